"""Summaries of stored samples: n, mean, standard deviation, 95% CI, and the
value relative to the no-VPN baseline measured on the same link and workload
in the same results directory.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from . import metrics
from .store import ScenarioRow, Store

# Jaha 2014, section IV: six grades from % of the no-VPN value (throughput) ...
PERCENT_GRADES = [(85, "excellent"), (75, "very good"), (65, "good"), (40, "acceptable"), (25, "weak"), (0, "very weak")]
# ... and from multiples of it (RTT, jitter, loss), the inverted intervals.
MULTIPLE_GRADES = [(1.176, "excellent"), (1.333, "very good"), (1.538, "good"), (2.5, "acceptable"), (4.0, "weak")]


def grade(metric: str, relative: float) -> str:
    """Grade a value relative to the baseline (a percentage or a multiple)."""
    if metrics.get(metric).higher_is_better:
        return next(name for bound, name in PERCENT_GRADES if relative >= bound)
    return next((name for bound, name in MULTIPLE_GRADES if relative <= bound), "very weak")


@dataclass
class Summary:
    scenario_id: str
    metric: str
    unit: str
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    flagged: int = 0
    relative: float | None = None      # % of baseline (higher-is-better) or multiple of it
    relative_kind: str = ""            # "%" or "x"
    grade: str = ""

    @property
    def ci_half_pct(self) -> float:
        """CI half-width as a percentage of the mean (how tight the estimate is)."""
        if self.n < 2 or self.mean == 0:
            return math.inf
        return 100 * (self.ci_high - self.ci_low) / 2 / abs(self.mean)


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure for people: three significant digits, whole numbers from 1000, '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def describe(values: list[float]) -> tuple[int, float, float, float, float]:
    """n, mean, sample standard deviation, and the t-based 95% confidence interval."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    mean = float(data.mean())
    if n < 2:
        return n, mean, math.nan, math.nan, math.nan
    sd = float(data.std(ddof=1))
    if sd == 0:
        return n, mean, 0.0, mean, mean
    from scipy import stats  # here, not at the top: importing scipy takes a second the CLI need not wait

    low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=sd / math.sqrt(n))
    return n, mean, sd, float(low), float(high)


def baseline_of(scenario: ScenarioRow, by_id: dict[str, ScenarioRow]) -> str | None:
    """The no-VPN scenario with the same topology, link and workload, measured in the same
    place (this host or the VM): a ratio across the two would mostly measure emulation."""
    if scenario.is_baseline:
        return None
    for other in by_id.values():
        if (other.is_baseline and other.topology == scenario.topology
                and other.link_label == scenario.link_label
                and other.workload_params == scenario.workload_params
                and other.measured_in == scenario.measured_in):
            return other.id
    return None


def summarise(store: Store) -> dict[str, list[Summary]]:
    """Scenario id -> one Summary per metric."""
    scenarios = {row.id: row for row in store.scenarios()}
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    flagged: dict[tuple[str, str], int] = defaultdict(int)
    for row in store.samples():
        key = (row.scenario_id, row.metric)
        values[key].append(row.value)
        units[row.metric] = row.unit
        if row.flags:
            flagged[key] += 1
    out: dict[str, list[Summary]] = defaultdict(list)
    for (sid, metric), vals in sorted(values.items()):
        n, mean, sd, low, high = describe(vals)
        out[sid].append(Summary(sid, metric, units[metric], n, mean, sd, low, high, flagged[(sid, metric)]))
    means = {(s.scenario_id, s.metric): s.mean for sums in out.values() for s in sums}
    for sid, sums in out.items():
        base = baseline_of(scenarios[sid], scenarios)
        for s in sums:
            ref = means.get((base, s.metric)) if base else None
            if ref is None:
                continue
            metric = metrics.get(s.metric)
            if ref == 0:
                if metric.graded and not metric.higher_is_better:
                    # no loss without a VPN: none with it is as good (1x), any is infinitely worse
                    s.relative, s.relative_kind = (1.0 if s.mean == 0 else math.inf), "x"
                    s.grade = grade(s.metric, s.relative)
                continue
            if metric.higher_is_better:
                s.relative, s.relative_kind = 100 * s.mean / ref, "%"
            else:
                s.relative, s.relative_kind = s.mean / ref, "x"
            if metric.graded:
                s.grade = grade(s.metric, s.relative)
    return out
