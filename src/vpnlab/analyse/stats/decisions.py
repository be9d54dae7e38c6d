"""Recommendations that follow the tests, and how many rounds a clear answer would take."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ._dist import chi2_quantile, noncentral_t_cdf, t_quantile
from .comparisons import Comparison
from .significance import Equivalence

MAX_ROUNDS = 10_000
# Beyond this many rounds, a difference of the threshold is below what the setup resolves: the rounds' own
# spread, not a shortage of them, is what keeps two configurations apart (a busy or shared machine).
PRACTICAL_ROUNDS = 100


def spread_upper_bound(sd: float, df: float, confidence: float = 0.8) -> float:
    """One-sided upper confidence bound of a standard deviation from its chi-square distribution:
    sd * sqrt(df / chi2_{1 - confidence, df})."""
    return sd * math.sqrt(df / chi2_quantile(df, 1 - confidence))


def _first_n(enough: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] for which enough(n) holds (enough grows with n), else None."""
    if not enough(high):
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle + 1, high)
    return low


def repetitions_needed(sd_log: float, df: float, margin: float = 0.02, alpha: float = 0.05,
                       power: float = 0.8, upper_conf: float = 0.8, goal: str = "detect",
                       paired: bool = True, max_n: int = MAX_ROUNDS) -> int | None:
    """Rounds needed for a relative difference of margin. Goal "detect": the power of the two-sided
    t test on logs from the noncentral t (counting rejections in the right direction only); goal
    "equivalent": the TOST's power when there is no difference, from the approximation
    (t_{1-alpha} + t_{1-beta/2}) sigma / sqrt(n) <= log(1 + margin). sigma is the upper_conf upper
    confidence bound of sd_log (the spread of one round's log difference, with df degrees of
    freedom), so a lucky small spread does not promise too few. Unpaired: n per side, with
    sd_log = sqrt(sd_a^2 + sd_b^2). None when more than max_n would be needed."""
    if goal not in ("detect", "equivalent"):
        raise ValueError(f"goal is 'detect' or 'equivalent', not {goal!r}")
    if not sd_log > 0:
        raise ValueError("repetitions_needed needs a positive spread")
    sigma = spread_upper_bound(sd_log, df, upper_conf)
    delta = math.log1p(margin)

    def test_df(n: int) -> int:
        return n - 1 if paired else 2 * (n - 1)

    def detects(n: int) -> bool:
        shift, critical = delta * math.sqrt(n) / sigma, t_quantile(test_df(n), 1 - alpha / 2)
        return 1 - noncentral_t_cdf(test_df(n), shift, critical) >= power

    def shows_equivalence(n: int) -> bool:
        quantiles = t_quantile(test_df(n), 1 - alpha) + t_quantile(test_df(n), 1 - (1 - power) / 2)
        return quantiles * sigma / math.sqrt(n) <= delta

    return _first_n(detects if goal == "detect" else shows_equivalence, 2, max_n)


@dataclass(frozen=True)
class Verdict:
    """word: ahead, behind (B against A), equivalent, undecided or identical; sentence: for people."""

    word: str
    sentence: str
    rounds_needed: int | None = None


def _percent(ratio: float) -> str:
    return f"{100 * abs(ratio - 1):.1f}% {'higher' if ratio > 1 else 'lower'}"


def verdict(comparison: Comparison, adjusted_p: float | None, equivalence: Equivalence,
            adjusted_tost_p: float | None, threshold: float = 0.02, alpha: float = 0.05, family_size: int = 1,
            higher_is_better: bool = True, names: tuple[str, str] = ("A", "B")) -> Verdict:
    """The recommendation rule: B is "ahead" of (or "behind") A only when the Holm-adjusted p of the
    primary test is below alpha and the estimated ratio differs from 1 by more than the threshold
    (significance says a difference exists; its size beyond the threshold is an estimate, not a test);
    "equivalent" only when the TOST's Holm-adjusted p (over the same family) is below alpha; otherwise
    "undecided", with the rounds that would show a true difference of the threshold to exist (80%
    power at alpha / family_size, Bonferroni: as strict as Holm's first step); "ahead" also needs the
    estimate beyond the threshold, which a true difference of exactly the threshold gives about half
    the time. No test (identical samples) gives "identical"."""
    if comparison.scale != "ratio":
        raise ValueError("verdict judges a ratio (paired_log_ratio or welch_log_ratio)")
    a, b = names
    if comparison.p is None or adjusted_p is None:
        return Verdict("identical", f"{b} and {a}: {comparison.note}; no test.")
    ratio, n = comparison.estimate, min(comparison.n_a, comparison.n_b)
    significant = adjusted_p < alpha
    if significant and abs(math.log(ratio)) > math.log1p(threshold):
        word = "ahead" if (ratio > 1) == higher_is_better else "behind"
        position = "ahead of" if word == "ahead" else "behind"
        return Verdict(word, f"{b} is {position} {a}: {_percent(ratio)} (Holm-adjusted p = {adjusted_p:.2g}).")
    if adjusted_tost_p is not None and adjusted_tost_p < alpha:
        return Verdict("equivalent", f"{b} and {a} are equivalent within {100 * equivalence.margin:g}% "
                       f"(TOST, Holm-adjusted p = {adjusted_tost_p:.2g}; uncorrected {100 * equivalence.level:g}% "
                       f"interval of the ratio {equivalence.low:.3f} - {equivalence.high:.3f}).")
    needed = repetitions_needed(comparison.sd_round, comparison.df, margin=threshold, alpha=alpha / family_size,
                                paired=comparison.paired)
    about = f"about {needed}" if needed else f"more than {MAX_ROUNDS}"
    if significant:
        return Verdict("undecided", f"{b} differs from {a} by {_percent(ratio)} (Holm-adjusted p = "
                       f"{adjusted_p:.2g}), not shown to exceed {100 * threshold:g}% nor to lie within it.",
                       needed)
    if needed is None or needed > PRACTICAL_ROUNDS:
        spread = 100 * math.expm1(comparison.sd_round)
        return Verdict("undecided", f"{b} and {a} are not distinguishable with {n} repetitions, and a "
                       f"{100 * threshold:g}% difference is below what this setup resolves: their ratio varies by "
                       f"{spread:.0f}% from one round to the next ({about} rounds would be needed, 80% power at the "
                       "family's corrected level); a quieter machine, or more cores, would settle it.", needed)
    return Verdict("undecided", f"{b} and {a} are not distinguishable with {n} repetitions; {about} "
                   f"would show a true {100 * threshold:g}% difference to exist (80% power, at the family's "
                   "corrected level).", needed)
