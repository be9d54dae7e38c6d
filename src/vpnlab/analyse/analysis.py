"""Summaries of stored samples: per scenario and metric, n, mean, sd, the interval that fits the
quantity, and the value against the no-VPN baseline measured on the same link and workload in the
same place, judged the way the metric registry says and graded only where the data support a grade.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .. import catalog
from . import comparability
from ..catalog import KINDS
from .judging import AnalysisSettings, Paired, values_of
from .stats import (Interval, difference_ms, grade_range, interval, loss_interval, outlier_flags,
                    paired_log_ratio, welch_log_ratio)
from .stats.intervals import LOG_T
from ..plan.study import RepetitionRule
from .stopping import final_interval
from ..store import ScenarioRow, Store

MIN_BLOCKS = 3   # shared rounds a paired comparison needs when some rounds are incomplete




@dataclass
class Summary:
    """One scenario's metric. ci_low..ci_high is the 95% interval named by `method` (for a positive
    quantity: of the geometric mean, on the log scale), nan when there is none (`interval_note` says
    why). Against the baseline: `relative` is the share of it in % (metrics judged "share"), the
    multiple of it (judged "added", whose judged value is `added`, in the unit) or the difference in
    percentage points (judged "points"), with its interval rel_low..rel_high by `rel_method` (and
    added_low..added_high by `added_method`). `grade`
    is empty when the data do not support one; `grade_reason` then says why."""

    scenario_id: str
    metric: str
    unit: str
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    flagged: int = 0
    relative: float | None = None      # % of baseline, multiple of it, or percentage points
    relative_kind: str = ""            # "%", "x" or "pp"
    grade: str = ""
    method: str = ""
    interval_note: str = ""
    geometric_mean: float | None = None
    rel_low: float | None = None
    rel_high: float | None = None
    rel_method: str = ""
    added: float | None = None         # what the VPN adds over no VPN, in the unit, and its interval
    added_low: float | None = None
    added_high: float | None = None
    added_method: str = ""
    grade_reason: str = ""
    outliers: int = 0                  # samples far from the rest (flagged; counted unless set aside)
    set_aside: int = 0                 # flagged samples left out (the study's `flagged_samples: exclude`)
    emulation_bound: str = ""          # why the emulator, not the VPN, set this figure ('' if it did not)

    @property
    def centre(self) -> float:
        """The estimate the interval is of: the geometric mean on the log scale, else the mean."""
        return self.mean if self.geometric_mean is None else self.geometric_mean

    @property
    def ci_half_pct(self) -> float:
        """CI half-width as a percentage of the mean (how tight the estimate is)."""
        if self.n < 2 or self.mean == 0 or math.isnan(self.ci_high):
            return math.inf
        return 100 * (self.ci_high - self.ci_low) / 2 / abs(self.mean)


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure for people: three significant digits, whole numbers from 1000, '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def relative_text(s: Summary) -> str:
    """The value against no VPN for people: '92.1% [90.3, 93.8]', '+0.71 ms [0.6, 0.8]' or '+0.2 pp'."""
    if s.added is not None:
        value, low, high, unit = s.added, s.added_low, s.added_high, f" {s.unit}"
    elif s.relative is None:
        return "-"
    else:
        value, low, high = s.relative, s.rel_low, s.rel_high
        unit = {"%": "%", "pp": " pp"}.get(s.relative_kind, "x")
    signed = s.relative_kind == "pp" or s.added is not None
    interval_text = "" if low is None else f" [{fmt(low)}, {fmt(high)}]"
    return f"{'+' if signed and value >= 0 else ''}{fmt(value)}{unit}{interval_text}"


def centre_text(s: Summary) -> str:
    """The centre with its 95% interval, '5.77 [5.43, 6.13]'; alone where there is none (nan: one repetition)."""
    return fmt(s.centre) + ("" if s.ci_low != s.ci_low else f" [{fmt(s.ci_low)}, {fmt(s.ci_high)}]")


def summary_text(s: Summary | None) -> str:
    """A summary for people: 'n = 3: 5.77 [5.43, 6.13] Mbit/s; vs no VPN 89.7% [85.7, 93.9]; good'."""
    if s is None:
        return "no sample left"
    against = relative_text(s)
    return (f"n = {s.n}: {centre_text(s)} {s.unit}" + (f"; vs no VPN {against}" if against != "-" else "")
            + (f"; {s.grade}" if s.grade else ""))


def baseline_of(scenario: ScenarioRow, by_id: dict[str, ScenarioRow]) -> str | None:
    """The no-VPN scenario with the same topology, link and workload, measured in the same
    place (this host or the VM): a ratio across the two would mostly measure emulation.
    A failed baseline is no reference."""
    if scenario.is_baseline:
        return None
    for other in by_id.values():
        if (other.is_baseline and other.status != "failed" and other.topology == scenario.topology
                and other.link_label == scenario.link_label
                and other.workload_params == scenario.workload_params
                and other.measured_in == scenario.measured_in):
            return other.id
    return None


def matched(a: Paired, b: Paired) -> tuple[list[float], list[float], bool]:
    """The values of two scenarios paired by round: the rounds both completed (complete blocks; a
    round where one side failed is left out of the pair), when each side has one value per round and
    at least MIN_BLOCKS rounds are shared (or all of them are); otherwise all values, unpaired (the
    tests then fall back to Welch's)."""
    rounds_a, rounds_b = dict(a), dict(b)
    shared = sorted(rounds_a.keys() & rounds_b.keys()) if None not in rounds_a | rounds_b else []
    whole = len(rounds_a) == len(a) and len(rounds_b) == len(b)
    if whole and shared and (len(shared) >= MIN_BLOCKS or len(shared) == len(a) == len(b)):
        return [rounds_a[r] for r in shared], [rounds_b[r] for r in shared], True
    return [v for _, v in a], [v for _, v in b], False


def _packets(scenario: ScenarioRow) -> float | None:
    """The packets one repetition offers, where the workload states them: a ping's count, or a UDP
    stream's rate x duration / datagram size."""
    params = scenario.params
    if "count" in params:
        return float(params["count"])
    if {"rate_mbit", "duration_s", "size"} <= params.keys():
        return params["rate_mbit"] * 1e6 * params["duration_s"] / (8 * params["size"])
    return None


def _interval(metric: catalog.Metric, values: list[float], scenario: ScenarioRow) -> Interval:
    """Loss by Korn and Graubard's interval with the repetition as the unit (where the packets a
    repetition offers are known); every other metric by the interval that fits the quantity."""
    packets = _packets(scenario) if metric.judged == "points" else None
    if packets and len(values) >= 2:
        return loss_interval(values, packets)
    return interval(values, positive=metric.positive)


def _summary(sid: str, name: str, unit: str, values: list[float], flagged: int,
             scenario: ScenarioRow) -> Summary:
    metric = catalog.metric(name)
    data = np.asarray(values, dtype=float)
    iv = _interval(metric, values, scenario)
    nan = math.nan
    return Summary(sid, name, unit, len(data), float(data.mean()),
                   float(data.std(ddof=1)) if len(data) > 1 else nan,
                   nan if iv.low is None else iv.low, nan if iv.high is None else iv.high, flagged,
                   method=iv.method, interval_note=iv.note,
                   geometric_mean=iv.estimate if iv.method == LOG_T else None,
                   outliers=sum(outlier_flags(values)))


def _ratio(a: list[float], b: list[float], paired: bool):
    """B/A as a ratio of geometric means with the paired t interval by round (Welch's on logs when
    unpaired), or None when a value is at or below zero."""
    if not a or not b or min(a + b) <= 0:
        return None
    return paired_log_ratio(a, b) if paired else welch_log_ratio(a, b)


def _grade(s: Summary, ratio, kind: str, n_base: int, baseline: float | None, floor_ms: float) -> None:
    """Jaha's band(s) of the ratio's interval (of the estimate when there is no interval)."""
    if ratio is None:  # the n and floor rules still say why first: they refuse a grade whatever the ratio
        refused = grade_range(1.0, 1.0, kind, s.n, n_base, baseline_ms=baseline, floor_ms=floor_ms).reason
        s.grade_reason = refused or "a value at or below zero: no ratio to the baseline to grade"
        return
    low, high = (ratio.low, ratio.high) if ratio.low is not None else (ratio.estimate, ratio.estimate)
    result = grade_range(low, high, kind, s.n, n_base, baseline_ms=baseline, floor_ms=floor_ms)
    s.grade, s.grade_reason = result.grade or "", result.reason


def _judge(s: Summary, base: Summary, a: list[float], b: list[float], paired: bool, floor_ms: float) -> None:
    """Fill in s against its baseline the way the registry judges the metric: throughput as a share
    (ratio of geometric means, graded as such); latency and jitter by the ms the VPN adds (paired
    difference), graded as multiples only from a baseline at or above the floor; loss by the
    difference in percentage points, not graded (multiples of a near-zero loss grade noise)."""
    metric = catalog.metric(s.metric)
    if metric.judged in ("added", "points"):
        diff = difference_ms(a, b, paired=paired)
        low, high = diff.low, diff.high
        if metric.judged == "points":
            s.relative, s.relative_kind, s.rel_low, s.rel_high = diff.estimate, "pp", low, high
            s.rel_method = f"{diff.method}, in percentage points"
            s.grade_reason = "loss is judged in percentage points, which Jaha's multiples do not grade"
            return
        s.added, s.added_low, s.added_high, s.added_method = diff.estimate, low, high, diff.method
    ratio = _ratio(a, b, paired)
    if ratio is not None:
        scale = 100 if metric.judged == "share" else 1
        s.relative, s.relative_kind = scale * ratio.estimate, "%" if scale == 100 else "x"
        if ratio.low is not None:
            s.rel_low, s.rel_high = scale * ratio.low, scale * ratio.high
        s.rel_method = ratio.method
    if metric.graded:
        kind = "throughput" if metric.judged == "share" else "latency"
        _grade(s, ratio, kind, base.n, base.mean if kind == "latency" else None, floor_ms)


def _stein(stat: dict, values: dict, scenarios: dict[str, ScenarioRow], rule: RepetitionRule, every: dict) -> None:
    """Adaptive runs: the primary metric's interval is Stein's final one (pilot spread and df). Its
    pilot is the one the rule ran on, from `every` valid value, also when flagged ones are left out."""
    if not rule.adaptive:
        return
    for sid, scenario in scenarios.items():
        s = stat.get((sid, KINDS[scenario.workload].primary)) if scenario.workload in KINDS else None
        if s is None:
            continue
        final = final_interval([v for _, v in values[(sid, s.metric)]], rule,
                               pilot=[v for _, v in every[(sid, s.metric)]][:rule.min])
        if final is not None:
            s.ci_low, s.ci_high, s.method, s.interval_note = final.low, final.high, final.method, final.note
            s.geometric_mean = final.estimate


def summarise(store: Store, settings: AnalysisSettings | None = None) -> dict[str, list[Summary]]:
    """Scenario id -> one Summary per metric, from valid samples only (and without the flagged ones
    where the study says so); metrics the registry judges are set against the scenario's baseline.
    The settings are the study's (`analysis:`), unless given."""
    settings = settings or store.study().analysis
    scenarios = {row.id: row for row in store.scenarios()}
    values, far_or_busy = values_of(store, settings)
    flagged: dict[tuple[str, str], int] = defaultdict(int)
    for row in store.samples():
        flagged[(row.scenario_id, row.metric)] += bool(row.flags)
    out: dict[str, list[Summary]] = defaultdict(list)
    for (sid, name), pairs in sorted(values.items()):
        if not pairs:
            continue  # every sample flagged and left out
        summary = _summary(sid, name, catalog.unit(name), [v for _, v in pairs], flagged[(sid, name)], scenarios[sid])
        summary.set_aside = 0 if settings.counts_flagged else far_or_busy[(sid, name)]
        out[sid].append(summary)
    stat = {(s.scenario_id, s.metric): s for sums in out.values() for s in sums}
    seen = comparability.evidence(store) if any(row.emulated for row in scenarios.values()) else {}
    bounds = {key: comparability.side_bound(key[1], [scenarios[key[0]]], seen) for key in stat}
    for key, s in stat.items():
        s.emulation_bound = "" if bounds[key].exact else bounds[key].why
    every = values if settings.counts_flagged else values_of(store, settings.other_way())[0]
    _stein(stat, values, scenarios, store.study().repetitions, every)
    for (sid, name), s in stat.items():
        if not catalog.metric(name).judged or scenarios[sid].is_baseline:
            continue
        base = baseline_of(scenarios[sid], scenarios)
        if (base, name) not in stat:
            s.grade_reason = "no valid no-VPN baseline measured in the same place"
            continue
        a, b, paired = matched(values[(base, name)], values[(sid, name)])
        _judge(s, stat[(base, name)], a, b, paired, settings.latency_floor_ms)
        if s.grade and not (bounds[(base, name)].exact and bounds[(sid, name)].exact):
            _grade_within_emulation(s, bounds[(base, name)], bounds[(sid, name)], stat[(base, name)].n)
    return out


def _grade_within_emulation(s: Summary, base: comparability.Bound, own: comparability.Bound, n_base: int) -> None:
    """comparability.RULE for a grade: the band(s) of the ratio to no VPN over its interval widened by
    what emulation can have done to each side; none when that is unbounded."""
    lo, hi = comparability.ratio_factor(base, own)
    why = "; ".join(b.why for b in (base, own) if b.why)
    if lo == 0 or math.isinf(hi) or s.relative is None:
        s.grade, s.grade_reason = "", f"{why}: the true ratio to no VPN is unbounded here (comparability.RULE): no grade"
        return
    scale = 100 if s.relative_kind == "%" else 1
    kind = "throughput" if s.relative_kind == "%" else "latency"
    low, high = (s.rel_low, s.rel_high) if s.rel_low is not None else (s.relative, s.relative)  # (no spread)
    widened = grade_range(low / scale * lo, high / scale * hi, kind, s.n, n_base, baseline_ms=math.inf)
    s.grade = widened.grade or ""
    s.grade_reason = "" if s.grade else widened.reason
