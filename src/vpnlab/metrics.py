"""The one registry of metrics: name, unit, meaning, direction, grading, and who records it.

Each producer declares its own metrics here with `declare` (a workload kind in its module, the
tunnel stage, CPU accounting, background traffic); everything that shows, exports, grades or
plots a metric asks this registry. `vpnlab list` prints it and the README's metric table is
checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where a metric comes from: a workload's measurement, the tunnel (once per scenario), the CPU
# accounting around a measurement, or the background traffic alongside it.
Level = Literal["sample", "tunnel", "cpu", "background"]
# How a metric is judged against no VPN: as a share of it (throughput), by what the VPN adds
# (times, in the unit), in percentage points (loss), or not at all.
Judged = Literal["share", "added", "points", ""]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    meaning: str
    higher_is_better: bool | None   # None: neither (a size, a count of things that just are)
    level: Level = "sample"
    judged: Judged = ""
    graded: bool = False            # graded on Jaha 2014's six-step scale
    positive: bool = False          # never zero or below: intervals on the log scale
    producers: str = ""             # who records it, for people: "tcp, udp", "tunnel", ...

    @property
    def direction(self) -> str:
        return {True: "higher is better", False: "lower is better", None: "-"}[self.higher_is_better]


REGISTRY: dict[str, Metric] = {}


def declare(name: str, unit: str, meaning: str, higher_is_better: bool | None, *, level: Level = "sample",
            judged: Judged = "", graded: bool = False, positive: bool = False, producers: str = "") -> Metric:
    """Register a metric once; a second declaration of the same name must be the same fact
    (two workload kinds may both record throughput, in the same unit and direction)."""
    metric = Metric(name, unit, meaning, higher_is_better, level, judged, graded, positive, producers)
    known = REGISTRY.get(name)
    if known is None:
        REGISTRY[name] = metric
        return metric
    if (known.unit, known.higher_is_better, known.level, known.judged, known.graded) != \
            (unit, higher_is_better, level, judged, graded):
        raise ValueError(f"metric {name} declared twice with different facts: {known} and {metric}")
    merged = ", ".join(sorted(set(filter(None, (*known.producers.split(", "), producers)))))
    REGISTRY[name] = known = Metric(name, unit, known.meaning, higher_is_better, level, judged, graded,
                                    known.positive, merged)
    return known


def all_metrics() -> dict[str, Metric]:
    """Every metric vpnlab can record (importing the producers declares theirs)."""
    from . import cpu, measure, observers, tunnels, workloads  # noqa: F401  (their metrics declare themselves)
    from .workloads import background  # noqa: F401

    return REGISTRY


def get(name: str) -> Metric:
    metrics = all_metrics()
    if name not in metrics:
        # a store written by another vpnlab may hold a metric this one does not know
        return Metric(name, "", "", None)
    return metrics[name]


def unit(name: str) -> str:
    return get(name).unit


def markdown_table() -> str:
    """The README's metric table, generated from the registry (a test keeps the two equal)."""
    lines = ["| metric | unit | direction | recorded by | meaning |", "|---|---|---|---|---|"]
    levels = list(Level.__args__)
    ordered = sorted(all_metrics().values(), key=lambda m: (levels.index(m.level), m.name))
    lines += [f"| `{m.name}` | {m.unit} | {m.direction} | {m.producers} | {m.meaning} |" for m in ordered]
    return "\n".join(lines)


if __name__ == "__main__":  # the registry lives in the imported module, not in __main__
    from vpnlab.metrics import markdown_table as table

    print(table())
