"""The study a store ran, parsed once: what the analysis needs of it, typed.

A store keeps each sitting's study text; the analysis, the report and the export read the last
sitting's once, here, by the study loader's own careful YAML reader (nesting limited, a key given
twice refused), into a StoredStudy: its repetition rule, its order and seed, how its data are
judged (`analysis:`), its seed findings and choices. Each part is validated by the study model's own
type, and a part absent is the study model's own default; a part another vpnlab wrote otherwise is
read as the default and named in `unreadable`, so a reader can say so rather than fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from pydantic import TypeAdapter, ValidationError

from ..core.errors import StudyError
from .analysis_settings import AnalysisSettings
from .seed_findings import Choice, Finding
from .study import RepetitionRule, builtin_studies, read_yaml, repetition_count, study_fields

PARTS = ("name", "repetitions", "order", "seed", "analysis", "findings", "choices")


@dataclass(frozen=True)
class StoredStudy:
    text: str
    name: str
    repetitions: RepetitionRule
    order: str
    seed: int
    analysis: AnalysisSettings
    findings: list[Finding]
    choices: list[Choice]
    unreadable: tuple[str, ...] = ()   # parts read as the defaults: written otherwise by another vpnlab

    @classmethod
    def read(cls, text: str, source: str = "the stored study") -> StoredStudy:
        """The stored study text's parts; StudyError when it is not YAML or not a study at all."""
        data = read_yaml(text, source) if text.strip() else {}
        if not isinstance(data, dict):
            raise StudyError(f"{source}: not a study (its top level is a {type(data).__name__}, not a mapping)")
        parts, unreadable = {}, []
        for name, (annotation, default) in study_fields(PARTS).items():
            if name not in data:
                parts[name] = default
                continue
            try:
                value = repetition_count(data[name]) if name == "repetitions" else data[name]
                parts[name] = TypeAdapter(annotation).validate_python(value)
            except (ValidationError, ValueError):
                parts[name], _ = default, unreadable.append(name)
        return cls(text, unreadable=tuple(unreadable), **parts)

    @cached_property
    def judged_by(self) -> tuple[StoredStudy, bool]:
        """The study whose findings judge this run: for a run of a built-in seed study, the built-in as
        this vpnlab ships it (the seed's findings, encoded again since the run; what the run measured
        is unchanged), else this one; True when it is the built-in's and differs."""
        current = builtin_studies().get(self.name)
        if current is None or current == self.text:
            return self, False
        return StoredStudy.read(current, f"builtin:{self.name}"), True


def of_runs(runs: list) -> StoredStudy:
    """The study of a store's runs as the last sitting ran it (the defaults for a store without runs)."""
    return StoredStudy.read(runs[-1]["study_text"] or "" if runs else "")
