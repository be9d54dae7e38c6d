"""A tune spec: a short YAML file saying the link, the traffic, the constraints and the search
space, validated before anything is created. Every error names the field.

    link: {rate_mbit: 50, delay_ms: 10}
    traffic: {workload: {kind: tcp, duration_s: 5}}      # metric/direction: the workload's primary
    constraints: {security: strong, cpu_s_per_gb_max: 30,
                  field: [{link: {mtu: 1400, icmp: blocked}, workload: {kind: path-mtu}, require: no-black-hole}]}
    space: [openvpn, {driver: wireguard, mtu: [1380, 1420]}, strongswan]
    budget: 30m
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..catalog import DRIVERS, KINDS, METRICS, recorded_by
from ..core.errors import StudyError
from ..core.schema import Strict, shorten
from ..core.files import file_kind
from ..plan.study import PATH_FIELDS, WORKLOAD_ADAPTER, Link, read_yaml, refuse_control_characters, validation_problems
from ..workloads.base import NAT_EVENTS
from .field import FieldCheck, FieldCheckEntry

MAX_SPEC_BYTES = 64 * 1024
DEFAULT_BUDGET = "30m"
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m(?:in)?)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$", re.ASCII)
CEILINGS = {"cpu_s_per_gb_max": "cpu_s_per_gb", "latency_under_load_ms_max": "rtt_under_load_ms"}


def parse_duration(value: Any) -> float:
    """'30m', '1h30m', '90s', or seconds as a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value)) if isinstance(value, str) else None
        if not match or not any(match.groups()):
            raise ValueError(f"expected a duration such as 30m, 1h30m or 90s, got {shorten(value)}")
        hours, minutes, secs = (float(g or 0) for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not 0 < seconds <= 7 * 24 * 3600:
        raise ValueError("expected a duration above zero and at most a week")
    return seconds


class Traffic(Strict):
    workload: dict[str, Any] = Field(description="a workload as in a study file's `workloads`")
    metric: str | None = Field(None, description="the metric optimised (default: the workload's primary)")
    direction: Literal["higher", "lower"] | None = Field(None, description="better (default: the metric's)")


class Constraints(Strict):
    security: Literal["fips", "strong", "weak"] = Field("strong", description="the weakest class a value may have")
    drivers: list[str] | None = Field(None, description="the drivers allowed (default: every one proposed)")
    ciphers: list[str] | None = Field(None, description="the data ciphers allowed, such as AES-256-GCM")
    cpu_s_per_gb_max: float | None = Field(None, gt=0)
    latency_under_load_ms_max: float | None = Field(None, gt=0)
    field: list[FieldCheckEntry] = Field(default_factory=list, description="conditions every candidate must pass "
                                         "to race (a link, a workload, what it requires)")


class RaceSettings(Strict):
    alpha: float = Field(0.05, gt=0, le=0.2, description="chance of dropping a candidate within the margin")
    margin_pct: float = Field(2.0, gt=0, le=50, description="a candidate within this of the best is as good")
    min_rounds: int = Field(3, ge=2, le=100, description="rounds before the first drop")
    seed: int = 0


class _SpecFile(Strict):
    name: str = Field("tune", min_length=1)
    topology: Literal["remote-access", "site-to-site"] = "remote-access"
    link: dict[str, Any] = Field(default_factory=dict)
    traffic: Traffic
    constraints: Constraints = Field(default_factory=Constraints)
    space: list[str | dict[str, Any]] | None = Field(None, min_length=1)
    race: RaceSettings = Field(default_factory=RaceSettings)
    budget: str | float = DEFAULT_BUDGET
    hosts: dict[str, str] | None = None

    @field_validator("budget")
    @classmethod
    def duration(cls, value):
        parse_duration(value)
        return value


@dataclass(frozen=True)
class SpaceEntry:
    """A driver to try, with the values of its tunables (narrowed by the spec, else declared)."""

    where: str
    driver: str
    values: dict[str, tuple]


@dataclass(frozen=True)
class TuneSpec:
    name: str
    topology: str
    link: Link
    workload: Any
    metric: str
    higher_is_better: bool
    constraints: Constraints
    space: list[SpaceEntry]
    race: RaceSettings
    budget_s: float
    hosts: dict | None
    text: str
    source: str
    checks: tuple[FieldCheck, ...] = ()

    @property
    def ceilings(self) -> dict[str, float]:
        """metric -> the most it may be."""
        return {metric: limit for key, metric in CEILINGS.items()
                if (limit := getattr(self.constraints, key)) is not None}


EXAMPLE = "example"  # the spec shipped with vpnlab (tune/example.yaml), shown in docs/tuning.md


def load_spec(path: str | Path, budget: str | None = None) -> TuneSpec:
    """A spec file, or the shipped example by its name."""
    path = Path(path)
    if str(path) == EXAMPLE and not path.exists():
        text = (resources.files("vpnlab") / "tune" / "example.yaml").read_text()
        return parse_spec(text, f"builtin:{EXAMPLE}", budget)
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):  # a FIFO would block the read until killed
            raise StudyError(f"{path}: not a regular file ({file_kind(mode)}); a tune spec is a YAML file")
        with path.open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
        text = data.decode("utf-8")
    except OSError as exc:
        raise StudyError(f"{path}: cannot read the tune spec: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise StudyError(f"{path}: not UTF-8 text") from exc
    if len(data) > MAX_SPEC_BYTES:
        raise StudyError(f"{path}: more than {MAX_SPEC_BYTES // 1024} KB; a tune spec is a few lines")
    return parse_spec(text, str(path), budget)


def parse_spec(text: str, source: str = "<spec>", budget: str | None = None) -> TuneSpec:
    """Validate a spec's text (`budget`: the command line's, which wins); StudyError lists every problem."""
    raw = read_yaml(text, source)  # read as a study file is: nesting limited, a key given twice refused
    if not isinstance(raw, dict):
        raise StudyError(f"{source}: (top level): expected a mapping with link, traffic, constraints and space")
    refuse_control_characters(raw, source)
    try:
        top = _SpecFile.model_validate(raw)
    except ValidationError as exc:  # with the metric's problem too, if it has one: every problem at once
        problems = validation_problems(exc, "") + _named_metric_problem(raw)
        raise StudyError(f"{source}: invalid tune spec\n  " + "\n  ".join(problems)) from exc
    problems: list[str] = []
    link = _validated(lambda: Link.model_validate(top.link), "link", problems)
    workload = _validated(lambda: WORKLOAD_ADAPTER.validate_python(top.traffic.workload), "traffic.workload",
                          problems, skip_tags=True)
    metric, higher = _metric(top, workload, problems)
    space = _space(top, problems)
    try:
        budget_s = parse_duration(budget if budget is not None else top.budget)
    except ValueError as exc:
        problems.append(f"{'--budget' if budget is not None else 'budget'}: {exc}")
        budget_s = 0.0
    if top.constraints.latency_under_load_ms_max and workload is not None and not KINDS[workload.kind].loads_path:
        problems.append(f"constraints.latency_under_load_ms_max: a {workload.kind} workload does not load the path, "
                        f"so no latency under load is measured (tcp, udp and transfer do)")
    checks = _checks(top, link, workload, space, problems)
    if problems:
        raise StudyError(f"{source}: invalid tune spec\n  " + "\n  ".join(problems))
    return TuneSpec(top.name, top.topology, link, workload, metric, higher, top.constraints, space, top.race,
                    budget_s, top.hosts, text, source, checks)


def _validated(make, where: str, problems: list[str], skip_tags: bool = False):
    try:
        return make()
    except ValidationError as exc:
        problems.extend(validation_problems(exc, where, skip_tags=skip_tags))
        return None


def _named_metric_problem(raw: dict) -> list[str]:
    """The problem of a named metric that is no metric, read from the raw spec (its model invalid)."""
    traffic = raw.get("traffic")
    name = traffic.get("metric") if isinstance(traffic, dict) else None
    if not isinstance(name, str) or (name in METRICS and METRICS[name].positive):
        return []
    return [_not_comparable(name)]


def _not_comparable(name: str) -> str:
    candidates = ", ".join(sorted(m for m, x in METRICS.items() if x.positive))
    return (f"traffic.metric: {name!r} is not a metric the race can compare on the log scale (it needs one "
            f"above zero: {candidates})")


def _metric(top: _SpecFile, workload, problems: list[str]) -> tuple[str, bool]:
    """The metric optimised and whether higher is better: the workload's primary unless named, and one
    its workload records."""
    if workload is None:
        return "", True
    kind = KINDS[workload.kind]
    name = top.traffic.metric or kind.primary
    metric = METRICS.get(name)
    if metric is None or not metric.positive:
        problems.append(_not_comparable(name))
        return name, True
    if name not in recorded_by(kind):
        problems.append(f"traffic.metric: a {kind.kind} workload does not record {name} (it records "
                        f"{', '.join(sorted(m for m in recorded_by(kind) if METRICS[m].positive))})")
    if top.traffic.direction is None and metric.higher_is_better is None:
        problems.append(f"traffic.direction: {name} has no direction of its own; say higher or lower")
    higher = metric.higher_is_better if top.traffic.direction is None else top.traffic.direction == "higher"
    return name, bool(higher)


def _space(top: _SpecFile, problems: list[str]) -> list[SpaceEntry]:
    """The space's entries: those the spec lists, else every driver proposed (and allowed)."""
    allowed = top.constraints.drivers
    for i, name in enumerate(allowed or []):
        if name not in DRIVERS:
            problems.append(f"constraints.drivers[{i}]: unknown VPN driver {name!r}; "
                            f"known: {', '.join(sorted(DRIVERS))}")
    if top.space is None:
        names = [n for n, d in DRIVERS.items() if not d.baseline and (n in allowed if allowed else d.proposed)]
        return [SpaceEntry(f"(every {'allowed' if allowed else 'proposed'} driver)", n, _declared(n)) for n in names]
    entries = []
    for i, item in enumerate(top.space):
        entry = _entry(item, f"space[{i}]", problems)
        if entry:
            entries.append(entry)
    return entries


def _declared(driver: str) -> dict[str, tuple]:
    return {t.option: t.values for t in DRIVERS[driver].tunables}


def _entry(item: str | dict, where: str, problems: list[str]) -> SpaceEntry | None:
    item = {"driver": item} if isinstance(item, str) else dict(item)
    name = item.pop("driver", None)
    driver = DRIVERS.get(name) if isinstance(name, str) else None
    if driver is None or driver.baseline:
        what = "missing" if name is None else f"{name!r} is the no-VPN baseline, in every round anyway" \
            if driver else f"unknown VPN driver {shorten(name)}; known: {', '.join(sorted(DRIVERS))}"
        problems.append(f"{where}.driver: {what}")
        return None
    values = _declared(name)
    tunables = ", ".join(values) or "none: it runs with its default options"
    for key, given in item.items():
        if key not in values:
            problems.append(f"{where}.{key}: {name} has no tunable {key!r} (its tunables: {tunables})")
            continue
        given = tuple(given) if isinstance(given, list) else (given,)
        if not given:
            problems.append(f"{where}.{key}: an empty list (give at least one value)")
            continue
        for value in given:
            try:
                driver.Options.model_validate({key: value})
            except ValidationError as exc:
                problems.extend(validation_problems(exc, where))
                break
        else:
            values[key] = given
    return SpaceEntry(where, name, values)


def _checks(top: _SpecFile, link: Link | None, workload, space: list[SpaceEntry], problems: list[str]) -> tuple:
    """The field checks, each validated as a study would validate its link and workload, and against
    what it requires, where it runs and the space it checks."""
    checks = []
    for i, entry in enumerate(top.constraints.field):
        found = len(problems)
        check = _check(entry, f"constraints.field[{i}]", top.link if link else None, problems)
        if check is None:
            continue
        _fits_requirements(check, problems)
        _fits_the_testbed(check, top.hosts, problems)
        _fits_the_events(check, problems)
        _fits_the_space(check, space, problems)
        if len(problems) == found:
            checks.append(check)
    if link and workload:
        _distinct(checks, link, workload, problems)
    return tuple(checks)


def _distinct(checks: list[FieldCheck], link: Link, workload, problems: list[str]) -> None:
    """A check is scenarios of its own: not the race's link and workload, nor another check's."""
    seen = {_identity(link, workload): "traffic"}
    for check in checks:
        same = seen.setdefault(_identity(check.link, check.workload), check.where)
        if same != check.where:
            problems.append(f"{check.where}: the same link and workload as {same}, so the same scenarios; "
                            + ("a check measures another condition" if same == "traffic" else
                               "give both requirements in one check's require (a list)"))


def _check(entry: FieldCheckEntry, where: str, spec_link: dict | None, problems: list[str]) -> FieldCheck | None:
    """The check's link (the spec's with its fields changed; None: the spec's is invalid) and workload, validated."""
    changed = _validated(lambda: Link.model_validate(spec_link | entry.link), f"{where}.link", problems) \
        if spec_link is not None else None
    workload = _validated(lambda: WORKLOAD_ADAPTER.validate_python(entry.workload), f"{where}.workload", problems,
                          skip_tags=True)
    if changed is None or workload is None:
        return None
    return FieldCheck(where, changed, workload, entry.require, entry.repetitions)


def _identity(link: Link, workload) -> str:
    return repr((link.model_dump(mode="json"), workload.model_dump(mode="json")))


def _fits_requirements(check: FieldCheck, problems: list[str]) -> None:
    """Each requirement reads metrics its check's workload records: a kind's, or its events'."""
    kind = check.workload.kind
    for requirement in check.requirements:
        reads = ", ".join(requirement.metrics)
        if requirement.kinds and kind not in requirement.kinds:
            problems.append(f"{check.where}.require: {requirement.name} reads {reads}, which a "
                            f"{' or '.join(requirement.kinds)} workload records, not a {kind} one")
        elif not requirement.kinds and not check.workload.events:
            problems.append(f"{check.where}.require: {requirement.name} reads {reads}, what a workload's events "
                            f"measure, and this check's {kind} workload has no events")


def _fits_the_testbed(check: FieldCheck, hosts: dict | None, problems: list[str]) -> None:
    """A path's MTU, ICMP filter and NAT and a workload's events are made by this machine's testbed (a router
    in the middle of its WAN, faults on its ends), not on real hosts, whose path is the real one."""
    if hosts is None:
        return
    problems += [f"{check.where}.link.{name}: only on this machine's testbed, whose WAN gets a router in the middle "
                 "that sets it; on real hosts (hosts:) the path between them is the real one"
                 for name in PATH_FIELDS if name in check.link.model_fields_set]
    if check.workload.events:
        problems.append(f"{check.where}.workload.events: events happen to the WAN of this machine's testbed; on "
                        "real hosts (hosts:) the path is the real one")


def _fits_the_events(check: FieldCheck, problems: list[str]) -> None:
    """Every event happens during its workload; a NAT's events need the NAT."""
    lasts = KINDS[check.workload.kind].estimate_s(check.workload, None)
    for j, event in enumerate(check.workload.events):
        here = f"{check.where}.workload.events[{j}]"
        if event.at_s >= lasts:
            problems.append(f"{here}.at_s: {event.at_s:g} s is past the workload's end (it lasts about {lasts:.3g} s); "
                            "an event happens during it")
        if event.kind in NAT_EVENTS and not check.link.behind_nat:
            problems.append(f"{here}.{event.kind}: acts on the client side's NAT, and this check's link has none "
                            "(nat: masquerade)")


def _fits_the_space(check: FieldCheck, space: list[SpaceEntry], problems: list[str]) -> None:
    """A rekey is forced only where the software allows one: every driver of the space must."""
    if not any(event.rekey for event in check.workload.events):
        return
    cannot = [entry for entry in space if not DRIVERS[entry.driver].rekeys]
    if cannot:
        can = ", ".join(sorted(name for name, driver in DRIVERS.items() if driver.rekeys))
        problems.append(f"{check.where}.workload.events: a rekey, and {cannot[0].where} ({cannot[0].driver}) offers "
                        f"no way to force one here; drivers that do: {can} (narrow the space to them)")
