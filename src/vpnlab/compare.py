"""Comparisons between configurations of one study, with proper tests.

For each pair: Welch's t-test (two-sided and both one-sided alternatives),
Mann-Whitney U, Hedges' g, the relative difference of means with a bootstrap
95% confidence interval, and Holm's correction across all comparisons of the
study. By default the pairs are the ones a study is built to answer: two VPN
configurations of the same driver that differ in one thing (profile, cipher,
compression, transport ...), on the same link under the same workload.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

from .store import Store
from .workloads import KINDS

ALPHA = 0.05


@dataclass
class Comparison:
    metric: str
    link: str
    workload: str
    a: str                      # VPN label
    b: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    relative_diff_pct: float    # (mean_b - mean_a) / mean_a
    rel_ci_low: float
    rel_ci_high: float
    welch_p: float              # two-sided
    welch_p_greater: float      # H1: mean_b > mean_a
    welch_p_less: float         # H1: mean_b < mean_a
    mannwhitney_p: float
    hedges_g: float
    holm_p: float = math.nan    # the two-sided Welch p after Holm's correction
    significant: bool = False


def hedges_g(a: np.ndarray, b: np.ndarray) -> float:
    """Standardised mean difference (b - a) with the small-sample correction."""
    na, nb = len(a), len(b)
    pooled = math.sqrt(((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2))
    if pooled == 0:
        return math.nan
    correction = 1 - 3 / (4 * (na + nb) - 9)
    return (b.mean() - a.mean()) / pooled * correction


def relative_difference_ci(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% CI of (mean b - mean a) / mean a, in percent."""
    if a.mean() == 0 or min(len(a), len(b)) < 2:
        return math.nan, math.nan

    def statistic(x, y, axis=-1):
        return 100 * (np.mean(y, axis=axis) - np.mean(x, axis=axis)) / np.mean(x, axis=axis)

    result = stats.bootstrap((a, b), statistic, n_resamples=2000, confidence_level=0.95, method="percentile",
                             random_state=np.random.default_rng(seed), vectorized=True)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def compare(a: list[float], b: list[float]) -> dict:
    """Every test on two samples; needs at least two values on each side."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("a comparison needs at least two repetitions on each side")
    low, high = relative_difference_ci(x, y)
    return {
        "n_a": len(x), "n_b": len(y), "mean_a": float(x.mean()), "mean_b": float(y.mean()),
        "relative_diff_pct": 100 * (y.mean() - x.mean()) / x.mean() if x.mean() else math.nan,
        "rel_ci_low": low, "rel_ci_high": high,
        "welch_p": float(stats.ttest_ind(y, x, equal_var=False).pvalue),
        "welch_p_greater": float(stats.ttest_ind(y, x, equal_var=False, alternative="greater").pvalue),
        "welch_p_less": float(stats.ttest_ind(y, x, equal_var=False, alternative="less").pvalue),
        "mannwhitney_p": float(stats.mannwhitneyu(y, x, alternative="two-sided").pvalue),
        "hedges_g": hedges_g(x, y),
    }


def holm(comparisons: list[Comparison]) -> None:
    """Holm-correct the two-sided Welch p-values of one study's comparisons, in place."""
    testable = [c for c in comparisons if not math.isnan(c.welch_p)]
    if not testable:
        return
    reject, corrected, _, _ = multipletests([c.welch_p for c in testable], alpha=ALPHA, method="holm")
    for c, r, p in zip(testable, reject, corrected):
        c.holm_p, c.significant = float(p), bool(r)


def differs_in_one_thing(a: dict, b: dict) -> bool:
    """Same driver (and nesting); exactly one of profile or one option differs."""
    if a["driver"] != b["driver"] or ("inner" in a) != ("inner" in b):
        return False
    if a.get("inner") != b.get("inner"):
        return False
    diffs = int(a["profile"] != b["profile"])
    keys = set(a["options"]) | set(b["options"])
    diffs += sum(a["options"].get(k) != b["options"].get(k) for k in keys)
    return diffs == 1


def study_comparisons(store: Store, pairs: list[tuple[str, str]] | None = None) -> list[Comparison]:
    """Compare the given VPN label pairs, or by default the one-difference pairs, per link and workload."""
    scenarios = store.scenarios()
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in store.samples():
        if row.repetition > 0:
            samples[(row.scenario_id, row.metric)].append(row.value)
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for sc in scenarios:  # never across this host and the VM: emulation would be what differs
        groups[(sc.link_label, sc.workload_params, sc.measured_in)].append(sc)
    out = []
    for (link, _, _), members in groups.items():
        for i, sa in enumerate(members):
            for sb in members[i + 1:]:
                wanted = (pairs is not None and ((sa.vpn_label, sb.vpn_label) in pairs
                                                 or (sb.vpn_label, sa.vpn_label) in pairs))
                if pairs is None:
                    wanted = differs_in_one_thing(sa.config, sb.config)
                if not wanted:
                    continue
                if sa.workload not in KINDS:
                    continue
                metric = KINDS[sa.workload].primary
                a, b = samples.get((sa.id, metric), []), samples.get((sb.id, metric), [])
                if len(a) < 2 or len(b) < 2:
                    continue
                out.append(Comparison(metric, link, sa.workload_label, sa.vpn_label, sb.vpn_label,
                                      **compare(a, b)))
    holm(out)
    return out


@dataclass
class RunDifference:
    vpn: str
    link: str
    workload: str
    metric: str
    result: dict | None      # compare() of run A against run B, None when a side has < 2 values
    mean_a: float | None
    mean_b: float | None


def compare_runs(store_a: Store, store_b: Store) -> list[RunDifference]:
    """The same scenarios in two results directories, side by side, with their tests."""

    def index(store: Store) -> dict:
        values: dict[tuple, list[float]] = defaultdict(list)
        keys = {s.id: (s.vpn_label, s.link_label, s.workload_label, s.workload)
                for s in store.scenarios()}
        for row in store.samples():
            key = keys[row.scenario_id]
            if row.repetition > 0 and key[3] in KINDS and row.metric == KINDS[key[3]].primary:
                values[key].append(row.value)
        return values

    a, b = index(store_a), index(store_b)
    out = []
    for key in sorted(set(a) & set(b)):
        va, vb = a[key], b[key]
        result = compare(va, vb) if len(va) >= 2 and len(vb) >= 2 else None
        out.append(RunDifference(key[0], key[1], key[2], KINDS[key[3]].primary, result,
                                 float(np.mean(va)) if va else None, float(np.mean(vb)) if vb else None))
    testable = [d for d in out if d.result]
    if testable:
        _, corrected, _, _ = multipletests([d.result["welch_p"] for d in testable], alpha=ALPHA, method="holm")
        for d, p in zip(testable, corrected):
            d.result["holm_p"] = float(p)
    return out
