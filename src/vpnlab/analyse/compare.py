"""Comparisons between configurations of one study, each with one pre-specified primary test.

The primary test is the paired t test on log(B/A) per round (the round is a block: each round runs
every configuration once, in a random order), giving the ratio of geometric means with its 95%
interval; Welch's t test on logs stands in only when the two were not measured in the same rounds.
Holm's correction runs over the family the study defines: every pair of VPN configurations on the
same link and workload, measured in the same place, whatever is printed. The one-sided t tests and
the rank test (Wilcoxon signed-rank when paired, Mann-Whitney U otherwise) are secondary: labelled,
uncorrected. A verdict follows the corrected test, a 2% practical threshold and a TOST (corrected
over the same family apart).
By default the pairs printed are the ones a study is built to answer: two configurations of the
same driver that differ in one thing (profile, cipher, compression, transport ...).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .. import catalog
from . import comparability
from .analysis import fmt, matched
from .judging import AnalysisSettings, values_of
from .stats import holm as holm_adjust
from .stats import paired_log_ratio, secondary_tests, tost_log_ratio, verdict, welch_log_ratio
from ..store import ScenarioRow, Store
from ..catalog import KINDS

ALPHA = 0.05
# What each gigabyte costs, compared on the workloads that carry bulk traffic (a family of its own)
COST_METRIC = "cpu_s_per_gb"
THRESHOLD = AnalysisSettings().threshold   # by default; a study sets its own (analysis: threshold_pct)


@dataclass
class Comparison:
    """B against A on the kind's primary metric. relative_diff_pct: 100 (B/A - 1) with B/A the ratio
    of geometric means, rel_ci_low..rel_ci_high its 95% interval (nan: none). welch_p keeps its name
    for scripts but holds the primary test's two-sided p (`method` names the test; None when there is
    no test, `note` says why: "identical samples"); welch_p_greater and welch_p_less are the one-sided
    p of the same t statistic, and mannwhitney_p the rank test's (`rank_test`; None when it cannot
    reach 0.05, `rank_note` says so): secondary, uncorrected. holm_p: the primary p after Holm's
    correction over the study's family (None outside it: `in_family`)."""

    metric: str
    link: str
    workload: str
    a: str                      # VPN label
    b: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    relative_diff_pct: float
    rel_ci_low: float
    rel_ci_high: float
    welch_p: float | None
    welch_p_greater: float | None
    welch_p_less: float | None
    mannwhitney_p: float | None
    hedges_g: float
    holm_p: float | None = math.nan
    significant: bool = False
    scenario_a: str = ""
    scenario_b: str = ""
    link_label: str = ""
    workload_label: str = ""
    method: str = ""
    paired: bool = False
    note: str = ""
    rank_test: str = ""
    rank_note: str = ""
    in_family: bool = True
    equivalent: bool = False    # TOST: B/A within 1 +- threshold (in a family: after Holm's correction)
    tost_p: float | None = None
    tost_holm_p: float | None = None  # the TOST's p after Holm's correction over the family
    verdict: str = ""           # ahead, behind (B against A), equivalent, undecided, identical, emulator-set,
                                # below-resolution
    verdict_text: str = ""
    rounds_needed: int | None = None
    threshold: float = THRESHOLD  # the study's practical threshold (analysis: threshold_pct)


def hedges_g(a: np.ndarray, b: np.ndarray) -> float:
    """Standardised mean difference (b - a) with the small-sample correction."""
    na, nb = len(a), len(b)
    pooled = math.sqrt(((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2))
    if pooled == 0:
        return math.nan
    correction = 1 - 3 / (4 * (na + nb) - 9)
    return (b.mean() - a.mean()) / pooled * correction


def primary_test(a: list[float], b: list[float], paired: bool):
    """The primary test: paired t on log(B/A) per round, or Welch's t on logs when unpaired."""
    return paired_log_ratio(a, b) if paired else welch_log_ratio(a, b)


def tested(a: list[float], b: list[float], paired: bool = False, threshold: float = THRESHOLD):
    """The primary test, its secondary tests and the TOST on two samples of a positive quantity
    (paired: ordered by round, one value each): the fields of a comparison, the primary test and
    the TOST. Needs at least two values on each side."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("a comparison needs at least two repetitions on each side")
    test = primary_test(a, b, paired)
    above, below, rank = secondary_tests(a, b, paired=paired, log_scale=True, alpha=ALPHA)
    tost = tost_log_ratio(a, b, margin=threshold, alpha=ALPHA, paired=paired)

    def pct(ratio):
        return math.nan if ratio is None else 100 * (ratio - 1)

    fields = {
        "n_a": len(x), "n_b": len(y), "mean_a": float(x.mean()), "mean_b": float(y.mean()),
        "relative_diff_pct": pct(test.estimate), "rel_ci_low": pct(test.low), "rel_ci_high": pct(test.high),
        "welch_p": test.p, "welch_p_greater": above.p, "welch_p_less": below.p, "mannwhitney_p": rank.p,
        "hedges_g": hedges_g(x, y), "method": test.method, "paired": paired, "note": test.note,
        "rank_test": f"{rank.name} ({rank.label})", "rank_note": rank.note,
        "equivalent": tost.equivalent, "tost_p": tost.p,
    }
    return fields, test, tost


def compare(a: list[float], b: list[float], paired: bool = False) -> dict:
    """The fields of tested(): every test on two samples, primary and secondary."""
    return tested(a, b, paired)[0]


def holm(comparisons: list[Comparison], untested: int = 0) -> None:
    """Holm-correct, in place, the primary p-values of one family of comparisons, and apart from them
    the TOSTs' (an equivalence claimed for one pair in many is as liable to chance as a difference);
    `untested` more members of the family had no test and still count in its size."""
    adjusted = holm_adjust([c.welch_p for c in comparisons] + [None] * untested)
    equivalence = holm_adjust([c.tost_p for c in comparisons] + [None] * untested)
    for c, p, q in zip(comparisons, adjusted, equivalence):
        c.holm_p, c.significant = p, p is not None and p < ALPHA
        c.tost_holm_p, c.equivalent = q, q is not None and q < ALPHA


def differs_in_one_thing(a: dict, b: dict) -> bool:
    """Same driver (and nesting); exactly one of profile, cores or one option differs."""
    if a["driver"] != b["driver"] or ("inner" in a) != ("inner" in b):
        return False
    if a.get("inner") != b.get("inner"):
        return False
    diffs = int(a["profile"] != b["profile"]) + int(a.get("cores") != b.get("cores"))
    keys = set(a["options"]) | set(b["options"])
    diffs += sum(a["options"].get(k) != b["options"].get(k) for k in keys)
    return diffs == 1


def _comparison(sa: ScenarioRow, sb: ScenarioRow, values: dict, threshold: float = THRESHOLD,
                metric: str = "") -> tuple[Comparison, tuple] | None:
    """The comparison of two scenarios on `metric` (their kind's primary metric by default) with its primary
    test and TOST, or None when a side has fewer than two valid values (or a value at or below zero)."""
    metric = metric or KINDS[sa.workload].primary
    a, b, paired = matched(values.get((sa.id, metric), []), values.get((sb.id, metric), []))
    if len(a) < 2 or len(b) < 2 or min(a + b) <= 0:
        return None
    fields, test, tost = tested(a, b, paired, threshold)
    return Comparison(metric, sa.link_label, sa.workload_label, sa.vpn_label, sb.vpn_label, **fields,
                      scenario_a=sa.id, scenario_b=sb.id, link_label=sa.link_label,
                      workload_label=sa.workload_label, threshold=threshold), (test, tost)


def _decide(c: Comparison, test, tost, family_size: int) -> None:
    """The verdict of the recommendation rule (stats.verdict) from the corrected tests."""
    decision = verdict(test, c.holm_p, tost, c.tost_holm_p, threshold=c.threshold, alpha=ALPHA,
                       family_size=family_size, higher_is_better=catalog.metric(c.metric).higher_is_better is not False,
                       names=(c.a, c.b))
    c.verdict, c.verdict_text, c.rounds_needed = decision.word, decision.sentence, decision.rounds_needed


def _family_pairs(scenarios: list[ScenarioRow]) -> list[tuple[ScenarioRow, ScenarioRow]]:
    """Every pair of VPN configurations on the same link and workload, measured in the same place
    (never across this host and the VM: emulation would be what differs): fixed by the study."""
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for sc in scenarios:
        if sc.workload in KINDS and not sc.is_baseline:
            groups[(sc.link_label, sc.workload_params, sc.measured_in)].append(sc)
    return [(sa, sb) for members in groups.values()
            for i, sa in enumerate(members) for sb in members[i + 1:]]


def comparison_family(store: Store) -> list[Comparison]:
    """Every comparison the study defines, tested, Holm-corrected together and decided. A pair
    without two valid values a side is left out but still counts in the family's size. The
    threshold and the flagged samples counted are the study's (judging.py)."""
    return _decided(store, _family_pairs(store.scenarios()), "")


def cost_family(store: Store) -> list[Comparison]:
    """The same pairs compared on COST_METRIC, where both sides' workload is a throughput one measured on this
    host or real hosts (CPU under software emulation is the emulator's): a family of its own, Holm-corrected
    apart from the primary metric's, decided by the same rule (lower is better)."""
    def costed(sc: ScenarioRow) -> bool:
        return KINDS[sc.workload].primary == "throughput_mbps" and not sc.emulated
    return _decided(store, [(a, b) for a, b in _family_pairs(store.scenarios()) if costed(a) and costed(b)],
                    COST_METRIC)


def _decided(store: Store, pairs: list[tuple[ScenarioRow, ScenarioRow]], metric: str) -> list[Comparison]:
    """The pairs compared on `metric` ('' for each kind's primary), Holm-corrected together and decided."""
    settings = store.study().analysis
    values = values_of(store, settings)[0]
    done = [result for sa, sb in pairs if (result := _comparison(sa, sb, values, settings.threshold, metric))]
    holm([c for c, _ in done], untested=len(pairs) - len(done))
    rows = {sc.id: sc for sc in store.scenarios()}
    seen = comparability.evidence(store) if any(r.emulated for r in rows.values()) else {}
    for c, (test, tost) in done:
        _decide(c, test, tost, len(pairs))
        a, b = rows[c.scenario_a], rows[c.scenario_b]
        if (a.emulated or b.emulated) and (why := _emulation_undecides(c, test, tost, a, b, seen)):
            # the emulator's cost (or cap), not the VPNs': more rounds here would not settle it either
            c.verdict, c.rounds_needed = "emulator-set", None
            c.verdict_text = f"{c.b} against {c.a}: not decided here, {why}"
        elif c.verdict == "undecided" and (under := _below_resolution(c, settings.latency_floor_ms)):
            c.verdict, c.rounds_needed, c.verdict_text = "below-resolution", None, under
    return [c for c, _ in done]


def _emulation_undecides(c: Comparison, test, tost, a: ScenarioRow, b: ScenarioRow, seen: dict) -> str:
    """Why the verdict does not stand under emulation, by comparability.RULE (the rule the findings
    follow): it must hold over the measured interval widened by what emulation can have done to each
    side; '' where it does (or the two were slowed alike)."""
    bounds = (comparability.side_bound(c.metric, [a], seen), comparability.side_bound(c.metric, [b], seen))
    if all(bound.exact for bound in bounds) or comparability.slowed_alike([a], [b]) or test.low is None:
        return ""
    lo, hi = comparability.ratio_factor(*bounds)
    higher = catalog.metric(c.metric).higher_is_better is not False
    up = test.low * lo > 1 and test.estimate * lo > 1 + c.threshold
    down = test.high * hi < 1 and test.estimate * hi < 1 / (1 + c.threshold)
    equivalent = tost.low is not None and tost.low * lo >= 1 / (1 + c.threshold) and tost.high * hi <= 1 + c.threshold
    stands = {"ahead": up if higher else down, "behind": down if higher else up, "equivalent": equivalent}
    if stands.get(c.verdict):
        return ""
    span = f"the true B/A lies {lo:.3g} to {hi:.3g} times the measured".replace("inf", "any number of")
    return (f"measured under software emulation (QEMU TCG): {'; '.join(bd.why for bd in bounds if bd.why)}: {span}, "
            f"and the verdict does not hold over that whole range (comparability.RULE)")


def _below_resolution(c: Comparison, floor_ms: float) -> str:
    """Why an undecided latency comparison is one no number of rounds makes meaningful: both sides under
    the study's latency floor, where a threshold's share of them is a few microseconds of scheduling."""
    if catalog.metric(c.metric).unit != "ms" or max(c.mean_a, c.mean_b) >= floor_ms:
        return ""
    step = c.threshold * min(c.mean_a, c.mean_b)
    return (f"{c.b} and {c.a}: both under the {floor_ms:g} ms latency floor ({c.mean_b:.3g} and {c.mean_a:.3g} ms); "
            f"a {100 * c.threshold:g}% difference there is {1000 * step:.2g} us, below what ping resolves through "
            "a tunnel, so more rounds would not make it meaningful: compare the ms each adds instead")


def _wanted(c: Comparison, config: dict[str, dict], pairs: list[tuple[str, str]] | None) -> bool:
    if pairs is None:
        return differs_in_one_thing(config[c.scenario_a], config[c.scenario_b])
    return (c.a, c.b) in pairs or (c.b, c.a) in pairs


def printed(family: list[Comparison], scenarios: list[ScenarioRow],
            pairs: list[tuple[str, str]] | None = None) -> list[Comparison]:
    """The members of the family to print: the given VPN label pairs, or the one-difference pairs."""
    config = {sc.id: sc.config for sc in scenarios}
    return [c for c in family if _wanted(c, config, pairs)]


def study_comparisons(store: Store, pairs: list[tuple[str, str]] | None = None,
                      family: list[Comparison] | None = None) -> list[Comparison]:
    """The given VPN label pairs, or by default the one-difference pairs, per link and workload, from
    the study's family (`family`, when it was made already): their correction does not depend on what
    is printed. A requested pair outside the family (one side without a VPN) is tested but not
    corrected, and gets no verdict."""
    out = printed(comparison_family(store) if family is None else family, store.scenarios(), pairs)
    if pairs:
        settings = store.study().analysis
        values = values_of(store, settings)[0]
        for sa, sb in _outside_family(store.scenarios(), pairs):
            if result := _comparison(sa, sb, values, settings.threshold):
                c = result[0]
                c.holm_p, c.in_family = None, False
                c.note = "outside the study's family (a side without a VPN): p uncorrected, no verdict"
                out.append(c)
    return out


def _outside_family(scenarios: list[ScenarioRow], pairs: list[tuple[str, str]]):
    """Requested pairs with a no-VPN side, on the same link and workload in the same place."""
    for i, sa in enumerate(scenarios):
        for sb in scenarios[i + 1:]:
            same = (sa.link_label, sa.workload_params, sa.measured_in) == \
                   (sb.link_label, sb.workload_params, sb.measured_in)
            requested = (sa.vpn_label, sb.vpn_label) in pairs or (sb.vpn_label, sa.vpn_label) in pairs
            if same and requested and sa.workload in KINDS and (sa.is_baseline or sb.is_baseline):
                yield sa, sb


@dataclass
class RunDifference:
    vpn: str
    link: str
    workload: str
    metric: str
    result: dict | None      # compare() of run A against run B, None when a side has < 2 values
    mean_a: float | None
    mean_b: float | None
    measured_in: str = ""


def compare_runs(store_a: Store, store_b: Store) -> list[RunDifference]:
    """The same scenarios in two results directories, side by side: Welch's t test on logs (two runs
    share no rounds), Holm-corrected over the scenarios both have. A scenario measured in the VM is
    never paired with one measured on this host."""

    def index(store: Store) -> dict:
        values: dict[tuple, list[float]] = defaultdict(list)
        keys = {s.id: (s.vpn_label, s.link_label, s.workload_label, s.workload, s.measured_in)
                for s in store.scenarios()}
        for row in store.samples():
            key = keys[row.scenario_id]
            if key[3] in KINDS and row.metric == KINDS[key[3]].primary:
                values[key].append(row.value)
        return values

    a, b = index(store_a), index(store_b)
    out = []
    for key in sorted(set(a) & set(b)):
        va, vb = a[key], b[key]
        testable = len(va) >= 2 and len(vb) >= 2 and min(va + vb) > 0
        result = compare(va, vb) if testable else None
        out.append(RunDifference(key[0], key[1], key[2], KINDS[key[3]].primary, result,
                                 float(np.mean(va)) if va else None, float(np.mean(vb)) if vb else None,
                                 key[4]))
    adjusted = holm_adjust([d.result["welch_p"] if d.result else None for d in out])
    for d, p in zip(out, adjusted):
        if d.result:
            d.result["holm_p"] = p
    return out


def p_text(p: float | None) -> str:
    return "-" if p is None or math.isnan(p) else f"{p:.3g}"


def ratio_text(pct: float, low: float, high: float) -> str:
    """B against A as a relative difference of geometric means with its interval: '+3.1% [+1.2, +5.0]'."""
    if math.isnan(pct):
        return "-"
    return f"{pct:+.1f}%" + ("" if math.isnan(low) else f" [{low:+.1f}, {high:+.1f}]")


STUDY_HEADINGS = ["link", "workload", "metric", "A", "B", "n", "mean A", "mean B", "B vs A [95% CI]",
                  "primary p", "Holm p", "verdict", "p(B>A) †", "p(B<A) †", "rank p †", "Hedges g"]
SECONDARY_HEADINGS = ("p(B>A) †", "p(B<A) †", "rank p †", "Hedges g")


def study_rows(comparisons: list[Comparison]) -> list[list[str]]:
    """The cells of `vpnlab stats` and the report's comparisons, in STUDY_HEADINGS' order."""
    return [[c.link, c.workload, c.metric, c.a, c.b, f"{c.n_a}/{c.n_b}", fmt(c.mean_a), fmt(c.mean_b),
             ratio_text(c.relative_diff_pct, c.rel_ci_low, c.rel_ci_high),
             p_text(c.welch_p) if c.welch_p is not None else c.note,
             p_text(c.holm_p) + (" *" if c.significant else "") if c.in_family else "not in family",
             c.verdict or "-", p_text(c.welch_p_greater), p_text(c.welch_p_less),
             p_text(c.mannwhitney_p) if c.mannwhitney_p is not None else "n/a ‡", fmt(c.hedges_g)]
            for c in comparisons]


def study_footnotes(comparisons: list[Comparison]) -> list[str]:
    """What the columns of study_rows mean, for the reader of the table."""
    methods = sorted({c.method for c in comparisons})
    threshold = comparisons[0].threshold if comparisons else THRESHOLD
    notes = [f"primary test: {'; '.join(methods)} (paired by round when both were measured in the same "
             "rounds, else Welch on logs); B vs A is the ratio of geometric means minus 1",
             "* significant at 0.05 after Holm's correction over every comparison of VPN configurations the "
             "study defines (the same whatever is printed)",
             f"verdict: ahead/behind only when the Holm-corrected p < {ALPHA:g} and the estimated difference "
             f"exceeds {100 * threshold:g}%; equivalent only when a TOST, Holm-corrected over the same family, "
             f"shows it within {100 * threshold:g}%",
             "† secondary tests, uncorrected: one-sided t on logs, and the rank test "
             "(Wilcoxon signed-rank when paired, Mann-Whitney U otherwise)"]
    notes += [f"‡ the rank test {note}" for note in sorted({c.rank_note for c in comparisons if c.rank_note})]
    notes += [f"{c.link}, {c.workload}: {c.verdict_text}" for c in comparisons if c.verdict_text]
    return notes


RUN_HEADINGS = ["vpn", "link", "workload", "metric", "mean A", "mean B", "B vs A [95% CI]", "Welch p (logs)",
                "rank p †", "Holm p"]
RUN_FOOTNOTES = ["B vs A: ratio of geometric means minus 1; Welch's t test on logs (two runs share no rounds), "
                 "Holm-corrected over the scenarios both runs have (* significant at 0.05)",
                 "† Mann-Whitney U, secondary and uncorrected; n/a where it cannot reach 0.05 at these sizes",
                 "a scenario measured in the VM is only compared with one measured in the VM"]


def run_rows(diffs: list[RunDifference]) -> list[list[str]]:
    """The cells of `vpnlab compare`, in RUN_HEADINGS' order."""
    rows = []
    for d in diffs:
        r = d.result
        cells = ["(fewer than 2 repetitions)", "-", "-", "-"]
        if r:
            cells = [ratio_text(r["relative_diff_pct"], r["rel_ci_low"], r["rel_ci_high"]),
                     p_text(r["welch_p"]) if r["welch_p"] is not None else r["note"],
                     p_text(r["mannwhitney_p"]) if r["mannwhitney_p"] is not None else "n/a",
                     p_text(r["holm_p"]) + (" *" if r["holm_p"] is not None and r["holm_p"] < ALPHA else "")]
        vpn = d.vpn + (" (in the VM)" if d.measured_in == "vm" and not d.vpn.endswith("(in the VM)") else "")
        rows.append([vpn, d.link, d.workload, d.metric, fmt(d.mean_a), fmt(d.mean_b), *cells])
    return rows
