"""Field checks: conditions every candidate must pass to race (a spec's `constraints.field`). Each is a
link and a workload measured as a study measures them (a router's path MTU and ICMP filter, a NAT, a
workload's events) and what it requires of every repetition: a bulk transfer without a black hole, a
client the far side can reach, a tunnel back (soon enough) after each event. A candidate that fails one
is dropped before the race's first round, with the check and the value measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from ..core.schema import Strict, shorten
from ..measure.recovery import PREFIX, RECOVERY_WAIT_S
from ..plan.study import Link
from ..store import Store

RECOVERY_METRICS = tuple(f"{prefix}_recovery_s" for prefix in dict.fromkeys(PREFIX.values()))
WITHIN = "recovers_within_s"
MAX_REPETITIONS = 20


@dataclass(frozen=True)
class Requirement:
    """What a check requires of each repetition: metrics at exact values and, with `within_s`, traffic
    through the tunnel again that soon after every event. `kinds`: the workload kinds that record its
    metrics (empty: any workload with events)."""

    name: str
    exact: tuple[tuple[str, float], ...]
    kinds: tuple[str, ...] = ()
    within_s: float | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(metric for metric, _ in self.exact) + (RECOVERY_METRICS if self.within_s is not None else ())

    @property
    def as_written(self) -> str | dict:
        """As a spec writes it (and race.json keeps it)."""
        return self.name if self.within_s is None else {WITHIN: self.within_s}

    def failure(self, values: dict[str, float]) -> str | None:
        """Why one repetition's values fail it, naming the value measured; None: they pass."""
        for metric, wanted in self.exact:
            if metric not in values:
                return f"no {metric} measured"
            if values[metric] != wanted:
                return f"{metric} {values[metric]:g}"
        late = [(metric, values[metric]) for metric in RECOVERY_METRICS
                if self.within_s is not None and values.get(metric, 0) > self.within_s]
        return ", ".join(f"{metric} {seconds:.3g} s, above {self.within_s:g} s" for metric, seconds in late) or None


NAMED = {r.name: r for r in (
    Requirement("no-black-hole", (("bulk_completed", 1.0), ("bulk_stalled", 0.0)), ("path-mtu",)),
    Requirement("reachable", (("far_reachable", 1.0),), ("reach",)),
    Requirement("recovers", (("recovered", 1.0),)),
    Requirement("survives", (("workload_survived", 1.0),)),
)}
REQUIREMENTS_HELP = f"one of {', '.join(NAMED)}, {{{WITHIN}: SECONDS}}, or a list of them"


def requirements(value: Any) -> tuple[Requirement, ...]:
    """A check's `require`, as written: one requirement or a list of them; ValueError saying what is wrong."""
    given = value if isinstance(value, list) else [value]
    if not given:
        raise ValueError(f"an empty list; {REQUIREMENTS_HELP}")
    return tuple(_requirement(item) for item in given)


def _requirement(item: Any) -> Requirement:
    if isinstance(item, str) and item in NAMED:
        return NAMED[item]
    if isinstance(item, dict) and list(item) == [WITHIN]:
        seconds = item[WITHIN]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= RECOVERY_WAIT_S:
            raise ValueError(f"{WITHIN}: expected seconds above 0 and at most {RECOVERY_WAIT_S:g} (how long a tunnel "
                             f"is waited for after an event), got {shorten(seconds)}")
        return Requirement(f"recovers within {seconds:g} s", (("recovered", 1.0),), within_s=float(seconds))
    raise ValueError(f"unknown requirement {shorten(item)}; {REQUIREMENTS_HELP}")


class FieldCheckEntry(Strict):
    """A field check as a spec writes it."""

    link: dict[str, Any] = Field(default_factory=dict, description="the spec's link with these fields changed "
                                 "(mtu, icmp, nat, nat_udp_timeout_s ...)")
    workload: dict[str, Any] = Field(description="a workload as in a study file's `workloads`")
    require: tuple[Requirement, ...] = Field(description=REQUIREMENTS_HELP)
    repetitions: int = Field(1, ge=1, le=MAX_REPETITIONS, description="every one must pass")

    @field_validator("require", mode="before")
    @classmethod
    def readable(cls, value):
        return requirements(value)


@dataclass(frozen=True)
class FieldCheck:
    """A field check, validated: its link (the spec's, changed) and its workload."""

    where: str              # constraints.field[i]
    link: Link
    workload: Any
    requirements: tuple[Requirement, ...]
    repetitions: int

    @property
    def label(self) -> str:
        return f"{', '.join(r.name for r in self.requirements)}: {self.workload.full_label} on {self.link.label}"


@dataclass(frozen=True)
class CheckDesign:
    """A field check as a race runs it and race.json keeps it: a study of the candidates over its link and
    workload, and its scenario of each candidate (in the race's order of candidates)."""

    where: str
    label: str
    require: list
    study: str
    scenarios: list[str]
    estimate_s: float

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return requirements(self.require)


def verdict(needed: tuple[Requirement, ...], samples: list[dict[str, float]]) -> str | None:
    """Why a check's repetitions fail it (the first failure, and in how many of them), or None: every
    repetition passed every requirement."""
    if not samples:
        return "no repetition measured it"
    failures = [failure for values in samples if (failure := _first_failure(needed, values))]
    if not failures:
        return None
    return failures[0] + (f" (in {len(failures)} of {len(samples)} repetitions)" if len(samples) > 1 else "")


def _first_failure(needed: tuple[Requirement, ...], values: dict[str, float]) -> str | None:
    return next((f"{r.name}: {failure}" for r in needed if (failure := r.failure(values))), None)


def outcomes(store: Store, checks: list[CheckDesign], candidates: list[str]) -> dict[str, dict[str, str | None]]:
    """candidate -> {check (its `where`): None when passed, else why it failed}, for the checks decided so
    far: those whose scenario of the candidate is done, or failed (then it could not be measured)."""
    found: dict[str, dict[str, str | None]] = {c: {} for c in candidates}
    for check in checks:
        for candidate, scenario_id in zip(candidates, check.scenarios):
            status = store.status(scenario_id)
            if status == "failed":
                found[candidate][check.where] = f"{_named(check)} could not be measured: {store.failure(scenario_id)}"
            elif status == "done":
                why = verdict(check.requirements, _samples(store, scenario_id, check.requirements))
                found[candidate][check.where] = f"{_named(check)} failed: {why}" if why else None
    return found


def _named(check: CheckDesign) -> str:
    return f"field check {check.where} ({check.label})"


def _samples(store: Store, scenario_id: str, needed: tuple[Requirement, ...]) -> list[dict[str, float]]:
    """Each valid repetition's values of the metrics the requirements read, by round."""
    by_metric = {metric: store.values_by_round(scenario_id, metric) for r in needed for metric in r.metrics}
    rounds = sorted({round_no for values in by_metric.values() for round_no in values})
    return [{metric: values[r] for metric, values in by_metric.items() if r in values} for r in rounds]
