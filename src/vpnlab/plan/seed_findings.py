"""A seed study's published findings and the conditions vpnlab chose, as the study file lists them
under `findings:` and `choices:` (findings.py judges them), and which stored scenarios a finding's
side names."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, TypeAdapter, field_validator, model_validator

from .. import catalog
from ..core.schema import Strict


# --- the schema -----------------------------------------------------------------------------------

class Side(Strict):
    """One scenario of the study's plan, by the labels `vpnlab run --dry-run` prints, or the mean of
    several (a list of workloads: the seed averaged over protocols or file kinds, and so does the
    check, round by round). `link` may be left out when the study has one link."""

    vpn: str | list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(min_length=1, max_length=300)
    link: str | None = Field(None, min_length=1, max_length=200)
    workload: str | list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=200)

    @field_validator("vpn", "workload")
    @classmethod
    def distinct(cls, value):
        if isinstance(value, list) and len(set(value)) != len(value):
            raise ValueError("names one twice")
        return value

    @property
    def vpns(self) -> list[str]:
        return [self.vpn] if isinstance(self.vpn, str) else list(self.vpn)

    @property
    def workloads(self) -> list[str]:
        return [self.workload] if isinstance(self.workload, str) else list(self.workload)

    @property
    def cells(self) -> list[tuple[str, str]]:
        """(VPN, workload) of each scenario the side averages."""
        return [(vpn, workload) for vpn in self.vpns for workload in self.workloads]

    def describe(self) -> str:
        parts = [self.vpn if isinstance(self.vpn, str) else f"mean of {', '.join(self.vpn)}", self.link,
                 self.workload if isinstance(self.workload, str) else f"mean of {', '.join(self.workload)}"]
        return " | ".join(p for p in parts if p)


class Finding(Strict):
    """One published finding and the comparison that checks it: B against A on `metric`."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=60)
    quote: str = Field(min_length=1, max_length=400, description="the seed's words, short")
    where: str = Field(min_length=1, max_length=200, description="table, figure or section of the seed")
    seed: str = Field(min_length=1, max_length=400, description="the seed's numbers")
    direction: Literal["higher", "lower", "same"] = Field(description="B against A, as the seed found it")
    a: Side | None = None
    b: Side | None = None
    metric: str | None = Field(None, description="default: the workload kind's primary metric")
    margin_pct: float = Field(2.0, gt=0, le=100, description="smallest difference that counts, in %; "
                                                             "a null finding's equivalence margin")
    seed_ratio: float | None = Field(None, gt=0, description="the seed's B/A on this metric, when it gave one "
                                     "(its tables' numbers, traced in a comment beside it)")
    read_from_figure: bool = Field(False, description="seed_ratio was read off a figure, not stated in the text "
                                                      "or a table: it is as precise as the plot")
    per_link_rate: bool = Field(False, description="compare metric / link rate (utilisation of each link)")
    graded: Literal["throughput", "latency"] | None = Field(None, description="also show Jaha's grade "
                                                                              "(Table VI) of B/A")
    needs_kernel_datapath: bool = Field(False, description="the finding is about a data path in the kernel "
                                                           "(as the seed's): a userspace stand-in is not comparable")
    not_comparable: str | None = Field(None, min_length=1, max_length=400,
                                       description="why this lab cannot give the seed's condition")
    calibration: str | None = Field(None, min_length=1, max_length=400, description=(
        "why this finding set a condition of the study (a link delay derived from it): its comparison is "
        "shown, but it is a calibration, not a check"))
    note: str = Field("", max_length=400)

    @field_validator("metric")
    @classmethod
    def known_metric(cls, value):
        if value is None:
            return value
        if value not in catalog.METRICS:
            raise ValueError(f"unknown metric {value!r}; `vpnlab list` shows them")
        return value

    @model_validator(mode="after")
    def complete(self):
        if self.not_comparable is None and (self.a is None or self.b is None):
            raise ValueError("needs both sides, a and b (scenarios of the plan), or not_comparable: the reason")
        if self.a is not None and self.a == self.b:
            raise ValueError("a and b are the same scenario")
        if self.direction == "same" and self.metric is not None:
            if not catalog.metric(self.metric).positive:
                raise ValueError(f"direction 'same' needs a metric that is never zero ({self.metric} can be): "
                                 "equivalence is tested on the ratio B/A")
        if self.seed_ratio is not None and self.direction != "same":
            if (self.seed_ratio > 1) != (self.direction == "higher"):
                raise ValueError(f"seed_ratio {self.seed_ratio:g} does not go the finding's direction "
                                 f"({self.direction})")
            if abs(math.log(self.seed_ratio)) <= math.log1p(self.margin_pct / 100):
                raise ValueError(f"margin_pct ({self.margin_pct:g}) is not below the seed's difference "
                                 f"({100 * abs(self.seed_ratio - 1):.1f}%): equivalence within it would not "
                                 "contradict the seed")
        return self


class Choice(Strict):
    """A condition vpnlab chose where the seed states none or another (a study's `choices:`), shown in
    the report apart from what the seed states."""

    what: str = Field(min_length=1, max_length=200, description="the condition")
    seed: str = Field(min_length=1, max_length=400, description="what the seed states of it (or 'not stated')")
    here: str = Field(min_length=1, max_length=400, description="what vpnlab chose")
    why: str = Field("", max_length=400)
    findings: list[str] = Field(default_factory=list, description="ids of the findings it bears on most")


Choices = list[Choice]


def _unique(findings: list[Finding]) -> list[Finding]:
    ids = [f.id for f in findings]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"two findings have the id {twice[0]!r}")
    return findings


# the type of the study file's top-level `findings` (the study loader validates it)
Findings = Annotated[list[Finding], AfterValidator(_unique)]


# --- which stored scenarios a side names -----------------------------------------------------------

def side_rows(side: Side, rows) -> list[list]:
    """The stored scenarios a side names, one list per workload: the VPN as labelled (or its VM twin),
    link and workload."""
    return [[r for r in rows if r.vpn_label in (vpn, f"{vpn} (in the VM)") and r.workload_label == workload
             and (side.link is None or r.link_label == side.link)] for vpn, workload in side.cells]


def pick(a_rows: list[list], b_rows: list[list]) -> tuple[list, list]:
    """The scenarios to compare, per workload of each side: all measured in the same place, this host
    before the VM (else the first of each, wherever measured; None where a workload has no scenario)."""
    for place in ("host", "vm"):
        a = [next((r for r in rows if r.measured_in == place), None) for rows in a_rows]
        b = [next((r for r in rows if r.measured_in == place), None) for rows in b_rows]
        if None not in a + b:
            return a, b
    return [rows[0] if rows else None for rows in a_rows], [rows[0] if rows else None for rows in b_rows]
