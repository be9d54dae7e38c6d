"""Families, secondary tests and equivalence.

Holm's family is fixed by the caller (every comparison the study defines), whatever is printed.
Secondary tests (one-sided t, rank tests) are labelled as such and not corrected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._dist import t_quantile, t_upper_p
from .comparisons import (difference_ms, difference_stats, one_sided_p, paired_log_ratio, sample_arrays,
                          welch_log_ratio)

SECONDARY = "secondary, uncorrected"


def holm(pvalues) -> list[float | None]:
    """Holm's step-down adjustment, in the order given. A None (no test was possible) stays None and
    still counts in the family size: the family is what the caller fixed, not what the data allowed."""
    family_size = len(pvalues)
    ranked = sorted((p, index) for index, p in enumerate(pvalues) if p is not None)
    adjusted: list[float | None] = [None] * family_size
    running = 0.0
    for rank, (p, index) in enumerate(ranked):
        running = max(running, min(1.0, (family_size - rank) * p))  # adjusted p never decreases
        adjusted[index] = running
    return adjusted


def min_attainable_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p the exact Mann-Whitney U test can give for n_a against n_b values
    (complete separation, no ties): 2 / C(n_a + n_b, n_a)."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def min_attainable_p_paired(n_pairs: int) -> float:
    """The smallest two-sided p the exact Wilcoxon signed-rank test can give for n_pairs non-zero
    differences (all of one sign): 2 / 2^n."""
    return min(1.0, 2.0 ** (1 - n_pairs))


@dataclass(frozen=True)
class SecondaryTest:
    """A secondary test: p is None when the test cannot reach alpha at this sample size (note says so)."""

    name: str
    p: float | None
    note: str = ""
    label: str = SECONDARY


def rank_test(a, b, paired: bool, alpha: float = 0.05) -> SecondaryTest:
    """Wilcoxon signed-rank on per-round differences (paired) or Mann-Whitney U (unpaired), two-sided;
    no p when even complete separation could not reach alpha at this sample size."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired:
        name, nonzero = "Wilcoxon signed-rank", int(np.count_nonzero(b - a))
        floor, sizes = min_attainable_p_paired(nonzero), f"{nonzero} non-zero paired differences"
    else:
        name, floor, sizes = "Mann-Whitney U", min_attainable_p(len(a), len(b)), f"{len(a)} vs {len(b)}"
    if floor > alpha:
        note = f"cannot reach {alpha:g} with {sizes} (smallest possible p = {floor:.3g})"
        return SecondaryTest(name, None, note)
    from scipy import stats  # slow to import; only the report's secondary column needs it

    result = stats.wilcoxon(b - a) if paired else stats.mannwhitneyu(b, a, alternative="two-sided")
    return SecondaryTest(name, float(result.pvalue))


def secondary_tests(a, b, paired: bool = True, log_scale: bool = True, alpha: float = 0.05) -> list[SecondaryTest]:
    """The one-sided t tests (B above A, B below A) and the rank test, on logs (log_scale, for strictly
    positive quantities) or on the values, all labelled secondary and uncorrected."""
    if log_scale:
        primary = paired_log_ratio(a, b) if paired else welch_log_ratio(a, b)
        a, b = np.log(a), np.log(b)
    else:
        primary = difference_ms(a, b, paired=paired)
    above, below = one_sided_p(primary)
    scale = "on logs" if log_scale else "on values"
    note = "" if primary.p is not None else primary.note
    return [SecondaryTest(f"one-sided t {scale}, B above A", above, note),
            SecondaryTest(f"one-sided t {scale}, B below A", below, note),
            rank_test(a, b, paired, alpha)]


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests on the log ratio: equivalent when the (1 - 2 alpha) interval of B/A lies
    inside [1/(1 + margin), 1 + margin]; p is the larger one-sided p (None when no test is possible)."""

    equivalent: bool
    ratio: float | None
    low: float | None
    high: float | None
    p: float | None
    margin: float
    level: float
    method: str
    note: str = ""


def tost_log_ratio(a_by_round, b_by_round, margin: float = 0.02, alpha: float = 0.05,
                   paired: bool = True) -> Equivalence:
    """Equivalence within +-margin (relative, symmetric on the log scale: |log(B/A)| < log(1 + margin))
    by two one-sided t tests at alpha, paired per round or Welch; the same as the (1 - 2 alpha)
    interval lying inside the margin."""
    a, b = sample_arrays(a_by_round, b_by_round, paired, log=True)
    method = f"TOST on log(B/A), {'paired per round' if paired else 'Welch'}, margin {100 * margin:g}%"
    stats = difference_stats(a, b, paired)
    if isinstance(stats, str):
        return Equivalence(False, None, None, None, None, margin, 1 - 2 * alpha, method, stats)
    bound = math.log1p(margin)
    p = max(t_upper_p((stats.mean + bound) / stats.se, stats.df),   # H0: log ratio <= -bound
            t_upper_p((bound - stats.mean) / stats.se, stats.df))   # H0: log ratio >= +bound
    half = t_quantile(stats.df, 1 - alpha) * stats.se
    return Equivalence(p < alpha, math.exp(stats.mean), math.exp(stats.mean - half),
                       math.exp(stats.mean + half), p, margin, 1 - 2 * alpha, method)
