"""Comparing configuration B with configuration A.

The design runs every configuration once per round, so a round is a block: the primary test is the
paired t test on per-round differences (of logs for positive quantities). Welch's test is for data
that were not measured in rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._dist import no_spread, t_quantile, t_two_sided_p, t_upper_p
from .intervals import IDENTICAL, Interval

PAIRED_LOG = "paired t test on log(B/A) per round; ratio of geometric means"
WELCH_LOG = "Welch t test on log values; ratio of geometric means"
PAIRED_DIFF = "paired t test on B - A per round"
WELCH_DIFF = "Welch t test on B - A"
FIELLER = "Fieller's interval of mean B / mean A"


@dataclass(frozen=True)
class Comparison:
    """B against A. scale "ratio": estimate, low and high are B/A (geometric means); scale
    "difference": B - A in the data's unit. p is two-sided and None when no test is possible (note
    says why). sd_round is the spread of one round's difference (log scale for ratios; for unpaired
    data sqrt(sd_a^2 + sd_b^2)), with df degrees of freedom: what repetitions_needed takes."""

    scale: str
    estimate: float | None
    low: float | None
    high: float | None
    p: float | None
    statistic: float | None
    df: float | None
    sd_round: float | None
    n_a: int
    n_b: int
    paired: bool
    level: float
    method: str
    note: str = ""


@dataclass(frozen=True)
class DifferenceStats:
    """Mean difference B - A (on whatever scale it was computed), its standard error and df."""

    mean: float
    se: float
    df: float
    sd_round: float


def sample_arrays(a, b, paired: bool, log: bool) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired and len(a) != len(b):
        raise ValueError(f"paired data need one value per round on each side, got {len(a)} and {len(b)}")
    if log and ((a <= 0).any() or (b <= 0).any()):
        raise ValueError("a ratio on the log scale needs strictly positive values")
    return (np.log(a), np.log(b)) if log else (a, b)


def difference_stats(a: np.ndarray, b: np.ndarray, paired: bool) -> DifferenceStats | str:
    """The t test's ingredients, or the reason there is no test."""
    if min(len(a), len(b)) < 2:
        return "fewer than two values on a side: no test"
    if paired:
        d = b - a
        if no_spread(d):
            same = no_spread(np.append(d, 0.0))
            return IDENTICAL if same else "the same difference in every round: no spread to test against"
        sd = float(d.std(ddof=1))
        return DifferenceStats(float(d.mean()), sd / math.sqrt(len(d)), len(d) - 1, sd)
    if no_spread(a) and no_spread(b):
        return IDENTICAL if no_spread(np.append(a, b)) else "no spread on either side: no test"
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1))
    sd_round = math.sqrt(a.var(ddof=1) + b.var(ddof=1))
    return DifferenceStats(float(b.mean() - a.mean()), math.sqrt(var_a + var_b), float(df), sd_round)


def _compare(a, b, paired: bool, log: bool, level: float) -> Comparison:
    a, b = sample_arrays(a, b, paired, log)
    method = {(True, True): PAIRED_LOG, (False, True): WELCH_LOG,
              (True, False): PAIRED_DIFF, (False, False): WELCH_DIFF}[(paired, log)]
    back = math.exp if log else float
    common = dict(scale="ratio" if log else "difference", n_a=len(a), n_b=len(b), paired=paired,
                  level=level, method=method)
    stats = difference_stats(a, b, paired)
    if isinstance(stats, str):
        mean = float(b.mean() - a.mean()) if len(a) and len(b) else None
        estimate = None if mean is None else back(mean)
        return Comparison(estimate=estimate, low=None, high=None, p=None, statistic=None, df=None,
                          sd_round=None, note=stats, **common)
    t = stats.mean / stats.se
    half = t_quantile(stats.df, (1 + level) / 2) * stats.se
    return Comparison(estimate=back(stats.mean), low=back(stats.mean - half), high=back(stats.mean + half),
                      p=t_two_sided_p(t, stats.df), statistic=t, df=stats.df, sd_round=stats.sd_round,
                      **common)


def paired_log_ratio(a_by_round, b_by_round, level: float = 0.95) -> Comparison:
    """Paired t test on log(b / a) per round (the round is a block): the ratio of geometric means
    B/A, its t interval exponentiated, and the two-sided p, with n - 1 degrees of freedom."""
    return _compare(a_by_round, b_by_round, paired=True, log=True, level=level)


def welch_log_ratio(a, b, level: float = 0.95) -> Comparison:
    """Welch t test on log values for unpaired data: the ratio of geometric means B/A with its
    interval (Welch-Satterthwaite degrees of freedom) and the two-sided p."""
    return _compare(a, b, paired=False, log=True, level=level)


def difference_ms(a_by_round, b_by_round, paired: bool = True, level: float = 0.95) -> Comparison:
    """What B adds to A in the data's unit (ms for latency and jitter): the mean of per-round
    differences B - A with its paired t interval, or Welch's interval when the data are unpaired."""
    return _compare(a_by_round, b_by_round, paired=paired, log=False, level=level)


def ratio_of_means(a_by_round, b_by_round, paired: bool = True, level: float = 0.95) -> Interval:
    """mean B / mean A with Fieller's interval, for values that can be zero (no ratio of geometric
    means): the ratios R at which the t test of mean(B - R A) = 0 does not reject, per round (n - 1 df)
    or with Welch's variances (df at the estimate). Unlike 1 + (B - A)'s interval / mean A, it counts
    the uncertainty of A's mean. No interval (low and high None) where A's mean is not clearly above
    zero: the set of such R is then unbounded."""
    a, b = sample_arrays(a_by_round, b_by_round, paired, log=False)
    method = f"{FIELLER}, {'paired per round' if paired else 'Welch'}"
    n = min(len(a), len(b))
    if n < 2 or not a.mean() > 0:
        return Interval(None, None, None, n, level, method, "under two values a side, or A's mean at or below zero")
    mean_a, mean_b = float(a.mean()), float(b.mean())
    ratio = mean_b / mean_a
    if paired:
        cov = np.cov(a, b, ddof=1) / len(a)
        var_a, cov_ab, var_b, df = cov[0, 0], cov[0, 1], cov[1, 1], len(a) - 1
    else:
        var_a, var_b, cov_ab = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b), 0.0
        spread = var_b + ratio ** 2 * var_a   # Welch-Satterthwaite df of mean_b - ratio * mean_a
        df = spread ** 2 / (var_b ** 2 / (len(b) - 1) + ratio ** 4 * var_a ** 2 / (len(a) - 1)) if spread else 1
    t2 = t_quantile(df, (1 + level) / 2) ** 2
    # (mean_b - R mean_a)^2 <= t^2 var(mean_b - R mean_a): a quadratic in R, bounded when its R^2 term is positive
    quad, half_lin, const = mean_a ** 2 - t2 * var_a, mean_a * mean_b - t2 * cov_ab, mean_b ** 2 - t2 * var_b
    if quad <= 0:
        return Interval(ratio, None, None, n, level, method, "A's mean is not clearly above zero: no bounded interval")
    root = math.sqrt(max(half_lin ** 2 - quad * const, 0.0))
    return Interval(ratio, (half_lin - root) / quad, (half_lin + root) / quad, n, level, method)


def one_sided_p(comparison: Comparison) -> tuple[float | None, float | None]:
    """Secondary, uncorrected: p for "B above A" and for "B below A" from the primary t statistic."""
    if comparison.statistic is None:
        return None, None
    return (t_upper_p(comparison.statistic, comparison.df),
            t_upper_p(-comparison.statistic, comparison.df))
