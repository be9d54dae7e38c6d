"""`--set PATH=VALUE`: change any field of a study for one run without editing its file, as
Flent's test parameters do (`--set workloads[0].size=715M` runs a seed's own file size).

The overrides are applied to the study's YAML before it is validated, so a value is checked
like one written in the file; the result is a study text of its own (the overrides listed at its
top), which is what the plan shows, the run stores and `--resume` and the results-directory
checks compare.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..core.errors import StudyError
from .study import read_yaml

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", re.ASCII)
_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*", re.ASCII)   # a field, then any indices


def parse(assignment: str) -> tuple[list[str | int], Any]:
    """'workloads[0].size=715M' -> (['workloads', 0, 'size'], '715M'); the value is read as YAML."""
    path, sep, value = assignment.partition("=")
    if not sep or not path.strip():
        raise StudyError(f"--set {assignment!r}: expected PATH=VALUE, such as workloads[0].size=715M")
    steps: list[str | int] = []
    for part in path.strip().split("."):
        found = _STEP.findall(part)
        if not _PART.fullmatch(part):
            raise StudyError(f"--set {assignment!r}: cannot read the path {path!r} (fields and [index], "
                             "joined by dots)")
        steps += [name or int(index) for name, index in found]
    return steps, read_yaml(value, f"--set {assignment!r}: the value") if value.strip() else ""


def _set(data: Any, steps: list[str | int], value: Any, assignment: str) -> None:
    *parents, last = steps
    node = data
    for depth, step in enumerate(parents):
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            where = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps[:depth + 1]).lstrip(".")
            raise StudyError(f"--set {assignment!r}: the study has no {where}") from None
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise StudyError(f"--set {assignment!r}: index [{last}] is not in the study")
    elif not isinstance(node, dict):
        raise StudyError(f"--set {assignment!r}: {last!r} is not a field of a mapping here")
    node[last] = value


def apply(text: str, assignments: list[str]) -> str:
    """The study text with every assignment applied, in order; unchanged when there is none."""
    if not assignments:
        return text
    data = read_yaml(text, "the study")
    if not isinstance(data, dict):
        raise StudyError("--set: the study is not a mapping at the top level")
    for assignment in assignments:
        steps, value = parse(assignment)
        _set(data, steps, value, assignment)
    header = "".join(f"# --set {a}\n" for a in assignments)
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
