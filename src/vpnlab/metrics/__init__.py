"""What a metric is (name, unit, meaning, direction, grading, who records it) and `declare`.

Each producer declares its own metrics with `declare` (a workload kind in its module, a tunnel
in drivers/base.py, CPU accounting, the observers, background traffic). This module imports none
of them: catalog.py imports every producer and answers for the whole registry (`catalog.metric`),
and everything that shows, exports, grades or plots a metric asks it. `vpnlab list` prints it and
the metric table in docs/metrics.md (`python -m vpnlab.catalog metrics`) is checked against it.
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
