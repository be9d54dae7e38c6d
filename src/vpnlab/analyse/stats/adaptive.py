"""Adaptive repetitions with valid coverage: Stein's two-stage procedure on the log scale.

Stopping when the interval looks tight (optional stopping) lets chance decide the stopping point and
the stated coverage no longer holds. Stein's rule fixes the total from a pilot alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._dist import t_quantile
from .intervals import IDENTICAL, Interval, log_interval

STEIN = "Stein two-stage t interval on the log scale (pilot spread and df)"
GUARDED = ("Stein two-stage t interval on the log scale (pilot spread and df), widened to the t interval of "
           "all repetitions where the later ones spread wider than the pilot")


@dataclass(frozen=True)
class SteinPlan:
    """total_n counts the pilot; capped means max_n bound the total, so the final interval will be
    wider than the target (its coverage is unaffected)."""

    total_n: int
    pilot_n: int
    pilot_sd_log: float
    pilot_df: int
    capped: bool


def stein_total_n(pilot_values, target_rel_halfwidth: float, level: float = 0.95,
                  max_n: int | None = None) -> SteinPlan:
    """Stein's rule: after a pilot of n0 rounds whose log values have spread s0, run
    N = max(n0, ceil((t_{n0-1} s0 / log(1 + target))^2)) rounds in all. Because N depends only on the
    pilot's spread, stein_interval then has exact coverage for lognormal data and a half-width of at
    most the target (relative, i.e. geometric mean / (1 + target) to geometric mean * (1 + target))."""
    logs = np.log(np.asarray(pilot_values, dtype=float))
    pilot_n = len(logs)
    if pilot_n < 2:
        raise ValueError("Stein's pilot needs at least two rounds")
    sd = float(logs.std(ddof=1))
    critical = t_quantile(pilot_n - 1, (1 + level) / 2)
    needed = max(pilot_n, math.ceil((critical * sd / math.log1p(target_rel_halfwidth)) ** 2))
    total = needed if max_n is None else min(needed, max(max_n, pilot_n))
    return SteinPlan(total, pilot_n, sd, pilot_n - 1, total < needed)


def stein_interval(all_values, pilot_sd_log: float, pilot_df: int, level: float = 0.95) -> Interval:
    """The final Stein interval: mean of all N log values +- t_{pilot_df} * pilot_sd_log / sqrt(N),
    exponentiated (a geometric mean). It uses the pilot's spread and df, not the final sample's."""
    logs = np.log(np.asarray(all_values, dtype=float))
    mean = float(logs.mean())
    half = t_quantile(pilot_df, (1 + level) / 2) * pilot_sd_log / math.sqrt(len(logs))
    note = IDENTICAL if pilot_sd_log == 0 else ""
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs), level, STEIN,
                    note)


def guarded_stein_interval(all_values, pilot_sd_log: float, pilot_df: int, level: float = 0.95) -> Interval:
    """Stein's interval, or the t interval of all N logs where that reaches further: their union.
    Stein's alone keeps its coverage on average but ignores what the later repetitions show, so a
    tight pilot followed by a stray repetition gave a narrow interval the data belie; the union covers
    whenever either does (so at least as often as each), at the price of some width."""
    stein = stein_interval(all_values, pilot_sd_log, pilot_df, level)
    if len(all_values) < 3:
        return stein
    plain = log_interval(all_values, level)
    if plain.low >= stein.low and plain.high <= stein.high:
        return stein
    return Interval(stein.estimate, min(stein.low, plain.low), max(stein.high, plain.high), stein.n, level,
                    GUARDED, stein.note)
