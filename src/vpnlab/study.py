"""Study files: what a user asks for, validated before anything is created.

A study is YAML. Its `vpns`, `links` and `workloads` are lists whose cartesian
product is the plan. Inside one entry, a list where a single value is expected
is a sweep: `window: [8K, 16K, 32K, 64K]` makes four workloads. Every error
names the file, the field and what was expected.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator, model_validator

from .drivers import REGISTRY as DRIVERS
from .errors import StudyError
from .schema import Strict, socket_buffer_limit
from .testbed.topology import MAX_LAYERS
from .workloads import KINDS
from .workloads.background import PRESETS as BACKGROUND_PRESETS
from .workloads.background import Background

MAX_FILE_BYTES = 1024 * 1024  # a study is a few KB: sweeps are lists, not copies
MAX_SCENARIOS = 10_000        # counted from the sweeps' sizes before any is expanded
MAX_DEPTH = 32                # YAML nesting; a study needs fewer than 10 levels


class _TooDeep(yaml.composer.ComposerError):
    pass


class _Loader(yaml.SafeLoader):
    """yaml.safe_load's loader with a nesting limit: PyYAML composes nodes recursively, and a
    few thousand nested brackets would end in a RecursionError rather than a message."""

    depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _TooDeep(None, None, f"nested more than {MAX_DEPTH} levels deep (a study needs fewer than 10)",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


# --- links -----------------------------------------------------------------

class Link(Strict):
    """The WAN between the two sides. Unset rate means an unshaped veth."""

    name: str = ""
    rate_mbit: float | None = Field(None, gt=0, le=100_000)
    delay_ms: float = Field(0, ge=0, le=10_000, description="one-way delay added in each direction")
    jitter_ms: float = Field(0, ge=0, le=10_000, description="delay variation in each direction")
    jitter_distribution: Literal["uniform", "normal", "pareto", "paretonormal"] = "normal"
    loss_pct: float = Field(0, ge=0, le=100, description="random loss in each direction")
    queue_ms: float = Field(50, gt=0, le=10_000, description="bottleneck buffer, in ms at the link rate")
    background: Background | None = Field(None, description="'office', 'none' or {name, flows}")

    @field_validator("background", mode="before")
    @classmethod
    def preset(cls, value):
        if value in (None, "none"):
            return None
        if isinstance(value, str):
            if value not in BACKGROUND_PRESETS:
                raise ValueError(f"unknown background mix {value!r}; built-in: {', '.join(BACKGROUND_PRESETS)}, "
                                 f"none, or {{name, flows}}")
            return BACKGROUND_PRESETS[value]
        return value

    @property
    def label(self) -> str:
        if self.name:
            return self.name + self.background_label
        parts = [f"{self.rate_mbit:g}mbit" if self.rate_mbit else "unshaped"]
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g}ms")
        if self.jitter_ms:
            parts.append(f"j{self.jitter_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss{self.loss_pct:g}%")
        return "-".join(parts) + self.background_label

    @property
    def background_label(self) -> str:
        return f"+{self.background.name}" if self.background else ""

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms or self.loss_pct)


# --- workloads ---------------------------------------------------------------

Workload = Annotated[Union[tuple(k.Options for k in KINDS.values())], Field(discriminator="kind")]
_workload_adapter = TypeAdapter(Workload)


# --- VPN configurations ------------------------------------------------------

@dataclass(frozen=True)
class VpnConfig:
    """One concrete VPN configuration: a driver, its options, maybe a tunnel inside it."""

    driver: str
    options: BaseModel
    profile: str = "default"
    label: str = ""
    inner: "VpnConfig | None" = None

    @property
    def is_baseline(self) -> bool:
        return DRIVERS[self.driver].baseline

    @property
    def layers(self) -> list["VpnConfig"]:
        """Outermost first; the baseline has no layers."""
        own = [] if self.is_baseline else [self]
        return own + (self.inner.layers if self.inner else [])

    def as_dict(self) -> dict:
        data = {"driver": self.driver, "profile": self.profile, "options": self.options.model_dump(mode="json")}
        if self.inner:
            data["inner"] = self.inner.as_dict()
        return data


class _VpnEntry(Strict):
    driver: str
    label: str = ""
    profile: Literal["default", "fips"] = "default"
    options: dict[str, Any] = Field(default_factory=dict)
    inner: "_VpnEntry | None" = None


# --- repetitions ---------------------------------------------------------------

class RepetitionRule(Strict):
    """A fixed count (min == max, no target), or adaptive: repeat until the 95% confidence
    interval's half-width is within `ci_target_pct` of the mean, between min and max times."""

    min: int = Field(3, ge=1, le=1000)
    max: int = Field(20, ge=1, le=1000)
    ci_target_pct: float | None = Field(5.0, gt=0, le=100)

    @model_validator(mode="after")
    def ordered(self):
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.adaptive and self.min < 2:
            raise ValueError("an adaptive rule needs min >= 2: a confidence interval needs two values")
        return self

    @classmethod
    def fixed(cls, count: int) -> "RepetitionRule":
        return cls.model_construct(min=count, max=count, ci_target_pct=None)

    @property
    def adaptive(self) -> bool:
        return self.ci_target_pct is not None

    def describe(self) -> str:
        if not self.adaptive:
            return f"{self.max} repetitions"
        return (f"{self.min} to {self.max} repetitions, until the 95% CI half-width is within "
                f"{self.ci_target_pct:g}% of the mean")


# --- the study ---------------------------------------------------------------

class _StudyFile(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    topology: Literal["remote-access", "site-to-site"] = "remote-access"
    repetitions: RepetitionRule = Field(default_factory=lambda: RepetitionRule.fixed(3),
                                        description="a count, or {min, max, ci_target_pct}")
    order: Literal["listed", "shuffled"] = "shuffled"   # within each round
    seed: int = 0
    vpns: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("repetitions", mode="before")
    @classmethod
    def count(cls, value):
        if isinstance(value, bool) or not isinstance(value, int):
            return value
        if not 1 <= value <= 1000:
            raise ValueError("expected a count from 1 to 1000, or {min, max, ci_target_pct}")
        return {"min": value, "max": value, "ci_target_pct": None}

    links: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1)
    workloads: list[dict[str, Any]] = Field(min_length=1)


@dataclass
class Study:
    name: str
    description: str
    topology: str
    repetitions: RepetitionRule
    order: str
    seed: int
    vpns: list[VpnConfig]
    links: list[Link]
    workloads: list[Any]
    source_text: str = ""
    source_path: str = ""
    nesting: int = field(init=False)

    def __post_init__(self) -> None:
        self.nesting = max((len(v.layers) for v in self.vpns), default=0)


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _errors(exc: ValidationError, prefix: str, skip_tags: bool = False) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        if skip_tags and loc and loc[0] in KINDS:
            loc = loc[1:]  # the discriminator tag pydantic adds is not a field
        where = ".".join(p for p in (prefix, _format_loc(tuple(loc)) if loc else "") if p)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "union_tag_invalid":
            message = f"unknown kind; expected one of: {', '.join(KINDS)}"
        elif err["type"] == "union_tag_not_found":
            message = f"missing field 'kind' (one of: {', '.join(KINDS)})"
        lines.append(f"{where}: {message}")
    return lines


def expand_sweeps(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A list value in an entry is a sweep: one entry per combination, in file order."""
    keys = list(entry)
    values = [v if isinstance(v, list) else [v] for v in entry.values()]
    if any(len(v) == 0 for v in values):
        empty = next(k for k, v in zip(keys, values) if len(v) == 0)
        raise ValueError(f"{empty}: empty list (a sweep needs at least one value)")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _sweep_label(entry: dict, variant: dict) -> str:
    swept = [k for k, v in entry.items() if isinstance(v, list)]
    return ",".join(f"{k}={variant[k]}" for k in swept)


def _build_vpn(entry: _VpnEntry, where: str, problems: list[str]) -> list[VpnConfig]:
    driver = DRIVERS.get(entry.driver)
    if driver is None:
        problems.append(f"{where}.driver: unknown VPN driver {entry.driver!r}; known: {', '.join(sorted(DRIVERS))}")
        return []
    inner_configs: list[VpnConfig | None] = [None]
    if entry.inner is not None:
        if driver.baseline:
            problems.append(f"{where}.inner: the '{entry.driver}' driver has no tunnel to nest another inside")
            return []
        inner_configs = _build_vpn(entry.inner, where + ".inner", problems) or []
    try:
        variants = expand_sweeps(entry.options)
    except ValueError as exc:
        problems.append(f"{where}.options.{exc}")
        return []
    configs = []
    for variant in variants:
        try:
            options = driver.Options.model_validate(variant)
        except ValidationError as exc:
            problems.extend(_errors(exc, where + ".options"))
            continue
        problem = driver.check(options, entry.profile)
        if problem:
            problems.append(f"{where}.{problem}")
            continue
        sweep = _sweep_label(entry.options, variant)
        base = entry.label or driver.describe(options, entry.profile)
        label = f"{base}[{sweep}]" if sweep and entry.label else base
        for inner in inner_configs:
            full_label = f"{inner.label} in {label}" if inner else label
            configs.append(VpnConfig(entry.driver, options, entry.profile, full_label, inner))
    return configs


def parse_study(text: str, source: str = "<study>") -> Study:
    """Validate a study's YAML text; raise StudyError listing every problem."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StudyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise StudyError(f"{source}: expected a mapping with name, vpns, links and workloads at the top level")
    try:
        top = _StudyFile.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(f"{source}: invalid study\n  " + "\n  ".join(_errors(exc, ""))) from exc

    problems: list[str] = []
    vpns: list[VpnConfig] = []
    for i, entry in enumerate(top.vpns):
        where = f"vpns[{i}]"
        try:
            parsed = _VpnEntry.model_validate(entry)
        except ValidationError as exc:
            problems.extend(_errors(exc, where))
            continue
        vpns.extend(_build_vpn(parsed, where, problems))

    def expand(section: str, entries: list[dict], validate) -> list:
        out = []
        for i, entry in enumerate(entries):
            where = f"{section}[{i}]"
            try:
                variants = expand_sweeps(entry)
            except ValueError as exc:
                problems.append(f"{where}.{exc}")
                continue
            for variant in variants:
                try:
                    out.append(validate(variant))
                except ValidationError as exc:
                    problems.extend(_errors(exc, where, skip_tags=True))
                    break  # one report per entry is enough
        return out

    links = expand("links", top.links, Link.model_validate)
    workloads = expand("workloads", top.workloads, _workload_adapter.validate_python)

    nesting = max((len(v.layers) for v in vpns), default=0)
    if nesting > MAX_LAYERS:
        problems.append(f"vpns: at most {MAX_LAYERS} tunnel layers (one VPN inside another)")
    if nesting > 1 and top.topology != "site-to-site":
        problems.append("topology: nested tunnels need topology 'site-to-site' (two gateway layers per side)")
    _check_unique("vpns", [v.label for v in vpns], problems)
    _check_unique("links", [l.label for l in links], problems)
    if problems:
        raise StudyError(f"{source}: invalid study\n  " + "\n  ".join(problems))
    return Study(
        name=top.name,
        description=top.description,
        topology=top.topology,
        repetitions=top.repetitions,
        order=top.order,
        seed=top.seed,
        vpns=vpns,
        links=links,
        workloads=workloads,
        source_text=text,
        source_path=source,
    )


def _check_unique(section: str, labels: list[str], problems: list[str]) -> None:
    seen = set()
    for label in labels:
        if label in seen:
            problems.append(f"{section}: two entries are both labelled {label!r}; give one a distinct 'label'/'name'")
        seen.add(label)


def load_study(path: str | Path) -> Study:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise StudyError(f"{path}: cannot read study file: {exc.strerror}") from exc
    return parse_study(text, str(path))


def builtin_studies() -> dict[str, str]:
    """Name -> YAML text of the studies shipped with vpnlab."""
    folder = resources.files("vpnlab") / "studies"
    return {p.name.removesuffix(".yaml"): p.read_text() for p in folder.iterdir() if p.name.endswith(".yaml")}


def load_builtin(name: str) -> Study:
    studies = builtin_studies()
    if name not in studies:
        raise StudyError(f"no built-in study {name!r}; built-in: {', '.join(sorted(studies))}")
    return parse_study(studies[name], f"builtin:{name}")
