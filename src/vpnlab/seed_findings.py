"""A seed study's published findings, as the study file lists them under `findings:` (findings.py
judges them), and which stored scenarios a finding's side names."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, Field, TypeAdapter, field_validator, model_validator

from . import catalog
from .schema import Strict


# --- the schema -----------------------------------------------------------------------------------

class Side(Strict):
    """One scenario of the study's plan, by the labels `vpnlab run --dry-run` prints. `link` may be
    left out when the study has one link."""

    vpn: str = Field(min_length=1, max_length=300)
    link: str | None = Field(None, min_length=1, max_length=200)
    workload: str = Field(min_length=1, max_length=200)

    def describe(self) -> str:
        return " | ".join(p for p in (self.vpn, self.link, self.workload) if p)


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
    seed_ratio: float | None = Field(None, gt=0, description="the seed's B/A on this metric, when it gave one")
    per_link_rate: bool = Field(False, description="compare metric / link rate (utilisation of each link)")
    graded: Literal["throughput", "latency"] | None = Field(None, description="also show Jaha's grade "
                                                                              "(Table VI) of B/A")
    needs_kernel_datapath: bool = Field(False, description="the finding is about a data path in the kernel "
                                                           "(as the seed's): a userspace stand-in is not comparable")
    not_comparable: str | None = Field(None, min_length=1, max_length=400,
                                       description="why this lab cannot give the seed's condition")
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


def _unique(findings: list[Finding]) -> list[Finding]:
    ids = [f.id for f in findings]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"two findings have the id {twice[0]!r}")
    return findings


# the type of the study file's top-level `findings` (the study loader validates it)
Findings = Annotated[list[Finding], AfterValidator(_unique)]
_findings = TypeAdapter(Findings)


def parse(study_text: str) -> list[Finding]:
    """The findings of a study's YAML text (already validated when the study loaded)."""
    raw = yaml.safe_load(study_text) if study_text else None
    if not isinstance(raw, dict):
        return []
    return _findings.validate_python(raw.get("findings") or [])


# --- which stored scenarios a side names -----------------------------------------------------------

def side_rows(side: Side, rows) -> list:
    """The stored scenarios a side names: the VPN as labelled (or its VM twin), link and workload."""
    names = {side.vpn, f"{side.vpn} (in the VM)"}
    return [r for r in rows if r.vpn_label in names and r.workload_label == side.workload
            and (side.link is None or r.link_label == side.link)]


def pick(a_rows: list, b_rows: list):
    """The pair of scenarios to compare: measured in the same place, this host before the VM."""
    for place in ("host", "vm"):
        a = [r for r in a_rows if r.measured_in == place]
        b = [r for r in b_rows if r.measured_in == place]
        if a and b:
            return a[0], b[0]
    return (a_rows[0] if a_rows else None), (b_rows[0] if b_rows else None)
