"""A seed study's published findings, as reference data, and a verdict on each from a results store.

A built-in seed study lists what its seed found under `findings:`: an id, a short quote, where in the
seed (table, figure, section), the seed's numbers, and the comparison vpnlab makes to check it: two
scenarios of the study's plan, A and B (by their VPN, link and workload labels, as `vpnlab run
--dry-run` prints them), a metric, and the direction the seed found for B against A (`higher`,
`lower`, or `same` for a null finding, within `margin_pct`).

The verdict rule (RULE below, printed in the report):

* reproduced: the difference goes the seed's way, is significant after Holm's correction over the
  study's findings and is estimated beyond the margin (for a null finding: equivalent within the
  stated margin, by TOST, Holm-corrected apart);
* contradicted: the same the other way, or equivalent within the margin where the seed found a
  difference (for a null finding: a significant difference beyond the margin);
* inconclusive: neither, with the repetitions that would settle it;
* not comparable here: a condition this machine cannot give (a side measured in a VM under software
  emulation, a scenario this machine could not run, a piece vpnlab lacks, or the seed's own hardware
  limit stated in the study), with the reason.

The primary test is the one vpnlab uses everywhere (stats): the paired t test on log(B/A) per round
(Welch on logs when the two were not measured in the same rounds) for positive metrics, and on B - A
for the others. Nothing here changes a condition or a number: it only reads the store.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from . import catalog
from .algorithm_report import explain_profiles  # what two profiles of one configuration really changed
from .analysis import matched
from .catalog import KINDS
from .judging import settings_of, values_of
from .plan import make_plan
from .seed_findings import Finding, Findings, Side, parse, pick, side_rows
from .stats import (difference_ms, grade_range, holm, outlier_flags, paired_log_ratio, repetitions_needed,
                    tost_log_ratio, verdict, welch_log_ratio)
from .store import Store

ALPHA = 0.05

RULE = ("reproduced = the difference goes the seed's way, is significant (p < 0.05) after Holm's correction "
        "over this study's findings, and is estimated beyond the finding's margin (of A's mean for a difference "
        "B - A) (for a null finding: equivalent within the margin by TOST, Holm-corrected over the findings "
        "apart; its uncorrected 90% interval of B/A is shown); contradicted = the same the other way, or "
        "equivalent within the margin where the seed found a difference (for a null finding: a significant "
        "difference whose 95% interval lies beyond the margin); inconclusive = neither, with the repetitions "
        "per side that would detect a difference of the margin at the family's Bonferroni level (of 10% of A's "
        "mean at least, for a difference B - A) or show equivalence within it; not comparable here = a "
        "condition this machine cannot give (a side measured in a VM under software emulation, whose CPU is "
        "the emulator's; a scenario this machine could not run; a piece vpnlab lacks; the seed's own hardware "
        "limit), with the reason. Primary test: paired t on log(B/A) per round (Welch on logs when the rounds "
        "differ), on B - A for metrics that can be zero. Flagged samples are kept, never re-run as the seeds "
        "did, and counted unless the study fixes otherwise before the run (analysis: flagged_samples).")

VERDICTS = ("reproduced", "contradicted", "inconclusive", "not comparable here")


# --- the plan check -------------------------------------------------------------------------------

def plan_problems(study) -> list[str]:
    """What in a study's findings names no scenario of its plan (empty: all do)."""
    findings = parse(study.source_text)
    scenarios = make_plan(study).scenarios
    vpns = sorted({s.vpn.label for s in scenarios})
    links = sorted({s.link.label for s in scenarios})
    workloads = sorted({s.workload.label for s in scenarios})
    problems = []
    for i, finding in enumerate(findings):
        for side_name in ("a", "b"):
            side = getattr(finding, side_name)
            if side is None:
                continue
            where = f"findings[{i}] ({finding.id}).{side_name}"
            if side.vpn not in vpns:
                problems.append(f"{where}.vpn: no VPN labelled {side.vpn!r}; the plan has: {', '.join(vpns)}")
            if side.link is None and len(links) > 1:
                problems.append(f"{where}.link: the study has {len(links)} links; name one of: {', '.join(links)}")
            elif side.link is not None and side.link not in links:
                problems.append(f"{where}.link: no link labelled {side.link!r}; the plan has: {', '.join(links)}")
            if side.workload not in workloads:
                problems.append(f"{where}.workload: no workload labelled {side.workload!r}; the plan has: "
                                f"{', '.join(workloads)}")
        if finding.metric and finding.a and finding.a.workload in workloads:
            kind = next(s.workload.kind for s in scenarios if s.workload.label == finding.a.workload)
            if kind not in catalog.metric(finding.metric).producers.split(", "):
                problems.append(f"findings[{i}] ({finding.id}).metric: {finding.metric} is not recorded by a "
                                f"{kind} workload")
    return problems


# --- verdicts -------------------------------------------------------------------------------------

@dataclass
class Judgement:
    """A finding and what vpnlab's results say about it."""

    finding: Finding
    verdict: str
    reason: str
    metric: str = ""
    a_label: str = ""
    b_label: str = ""
    scale: str = ""                  # "ratio" (B/A) or "difference" (B - A, in the unit)
    unit: str = ""
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    mean_a: float | None = None
    mean_b: float | None = None
    n_a: int = 0
    n_b: int = 0
    p: float | None = None
    holm_p: float | None = None
    tost_holm_p: float | None = None  # the equivalence test's p, Holm-corrected over the findings apart
    method: str = ""
    rounds_needed: int | None = None
    grade: str = ""
    flagged: int = 0
    outliers: int = 0
    measured_in: str = ""
    emulated: bool = False           # a side measured under software emulation
    short_of_rule: list[str] = field(default_factory=list)  # sides not yet measured to their repetition rule
    _test: object = field(default=None, repr=False)
    _tost: object = field(default=None, repr=False)

    @property
    def result_text(self) -> str:
        """vpnlab's result for people: 'B/A = 0.62 [0.58, 0.66]' or 'B - A = +3.1 ms [1.2, 5.0]'."""
        if self.estimate is None:
            return "-"
        interval = "" if self.low is None else f" [{_g(self.low)}, {_g(self.high)}]"
        if self.scale == "ratio":
            return f"B/A = {_g(self.estimate)}{interval}"
        return f"B - A = {self.estimate:+.3g} {self.unit}{interval}".replace("  ", " ")


def _g(value: float) -> str:
    return f"{value:.3g}"


USERSPACE_STAND_INS = ("libipsec", "wireguard-go")  # implementations standing in for a missing kernel piece


def _userspace(row) -> bool:
    return any(part in USERSPACE_STAND_INS for part in row.implementation.split("+"))


def judge(store, study_text: str | None = None) -> list[Judgement]:
    """A verdict on each finding of the run's study (the last run's study text unless given), from the
    store's valid samples, Holm-corrected over the findings that have a test."""
    if study_text is None:
        runs = store.runs()
        study_text = runs[-1]["study_text"] if runs else ""
    findings = parse(study_text)
    if not findings:
        return []
    rows = store.scenarios()
    values = values_of(store, settings_of(study_text))[0]   # the flagged samples as the study fixed
    flagged: dict[tuple[str, str], int] = defaultdict(int)
    for sample in store.samples():
        if sample.flags:
            flagged[(sample.scenario_id, sample.metric)] += 1
    out = [_judge_one(finding, rows, values, flagged) for finding in findings]
    decide(out)
    explain_profiles(out, store)
    return out


def decide(out: list[Judgement]) -> None:
    """The verdicts of a study's judgements, their tests done: Holm over the findings compared here
    (a comparison without a test still counts), the TOSTs apart, then RULE."""
    family = [j for j in out if j._test is not None and j.verdict != "not comparable here"]
    family += [j for j in out if j._test is None and j.verdict == "inconclusive" and j.metric]
    for j, p in zip(family, holm([j.p for j in family])):
        j.holm_p = p
    for j, p in zip(family, holm([j._tost.p if j._tost is not None else None for j in family])):
        j.tost_holm_p = p
    for j in out:
        if j.verdict == "not comparable here" or j._test is None:
            continue
        _decide(j, len(family))
        if j.flagged or j.outliers:
            j.reason += (f"; kept in the test: {j.flagged} flagged sample(s), {j.outliers} far from the rest "
                         "(the seeds re-ran such runs; vpnlab keeps and flags them)")
        if j.short_of_rule:
            j.reason += (f"; provisional: {' and '.join(j.short_of_rule)} not yet measured to the study's rule "
                         "(`vpnlab run --resume` measures the rest)")


def _judge_one(finding: Finding, rows: list, values: dict, flagged: dict) -> Judgement:
    """One finding's pair of scenarios, whether they compare like the seed's, and its primary test."""
    if finding.not_comparable:
        return Judgement(finding, "not comparable here", finding.not_comparable)
    sa, sb = pick(side_rows(finding.a, rows), side_rows(finding.b, rows))
    missing = [s.describe() for s, r in ((finding.a, sa), (finding.b, sb)) if r is None]
    if missing:
        return Judgement(finding, "not comparable here", f"not in this run's results: {'; '.join(missing)}")
    metric = finding.metric or KINDS[sa.workload].primary if sa.workload in KINDS else finding.metric
    j = Judgement(finding, "inconclusive", "", metric=metric or "", a_label=f"{sa.shown} | {sa.link_label} | "
                  f"{sa.workload_label}", b_label=f"{sb.shown} | {sb.link_label} | {sb.workload_label}",
                  unit=catalog.metric(metric).unit if metric else "",
                  measured_in=sa.measured_in if sa.measured_in == sb.measured_in else "host and VM")
    failed = [r for r in (sa, sb) if r.status == "failed"]
    if failed:
        j.verdict, j.reason = "not comparable here", "; ".join(
            f"{r.shown} | {r.workload_label} could not be measured here: {(r.failure or 'failed')[:200]}"
            for r in failed)
        return j
    j.short_of_rule = [side for side, r in (("A", sa), ("B", sb)) if r.unfinished]
    _mark_unlike_the_seed(j, finding, sa, sb)
    if not metric:
        j.verdict, j.reason = "not comparable here", f"the workload kind {sa.workload!r} is unknown here"
        return j
    a_vals, b_vals = values.get((sa.id, metric), []), values.get((sb.id, metric), [])
    if finding.per_link_rate:
        if not (sa.link_rate_mbit and sb.link_rate_mbit):
            j.verdict, j.reason = "not comparable here", "per_link_rate needs both links shaped to a rate"
            return j
        a_vals = [(r, v / sa.link_rate_mbit) for r, v in a_vals]
        b_vals = [(r, v / sb.link_rate_mbit) for r, v in b_vals]
        j.unit = f"{j.unit} per Mbit/s of link"
    j.flagged = flagged.get((sa.id, metric), 0) + flagged.get((sb.id, metric), 0)
    _test(j, a_vals, b_vals)
    return j


def _mark_unlike_the_seed(j: Judgement, finding: Finding, sa, sb) -> None:
    """'not comparable here' when the pair was measured unlike the seed's machines (its values are
    still shown): under emulation, on a userspace stand-in for a kernel data path, or in two places."""
    j.emulated = sa.emulated or sb.emulated
    if j.emulated:
        j.verdict = "not comparable here"
        j.reason = ("measured in a VM under software emulation (QEMU TCG): the CPU is the emulator's, not "
                    "a machine like the seed's, so rates and delays that depend on it are the emulator's"
                    + ("" if sa.measured_in == sb.measured_in else "; and A and B were measured in different "
                       "places"))
    elif finding.needs_kernel_datapath and (stand_ins := [r for r in (sa, sb) if _userspace(r)]):
        j.verdict = "not comparable here"
        j.reason = ("this kernel lacks the seed's kernel data path: " + "; ".join(
            f"{r.shown} ran as {r.implementation} (in userspace)" for r in stand_ins))
    elif sa.measured_in != sb.measured_in:
        j.verdict, j.reason = "not comparable here", "A and B were measured in different places (host and VM)"


def _test(j: Judgement, a_vals: list, b_vals: list) -> None:
    """The primary test of B against A on the rounds both completed (a ratio where the metric is
    positive, else a difference), its TOST, and the seed's grade where the finding asks for one."""
    a, b, paired = matched(a_vals, b_vals)
    j.n_a, j.n_b = len(a), len(b)
    j.outliers = sum(outlier_flags(a)) + sum(outlier_flags(b)) if len(a) > 2 and len(b) > 2 else 0
    j.mean_a = sum(a) / len(a) if a else None
    j.mean_b = sum(b) / len(b) if b else None
    if len(a) < 2 or len(b) < 2:
        if j.verdict != "not comparable here":
            j.reason = f"fewer than two valid values of {j.metric} on a side ({len(a)} and {len(b)}): no test"
        return
    positive = catalog.metric(j.metric).positive and min(a + b) > 0
    if positive:
        test = paired_log_ratio(a, b) if paired else welch_log_ratio(a, b)
        j._tost = tost_log_ratio(a, b, margin=j.finding.margin_pct / 100, alpha=ALPHA, paired=paired)
    else:
        test = difference_ms(a, b, paired=paired)
    j._test = test
    j.scale, j.estimate, j.low, j.high = test.scale, test.estimate, test.low, test.high
    j.p, j.method = test.p, test.method
    if positive and j.finding.graded and test.low is not None and not j.emulated:  # (the emulator's CPU: no grade)
        kind = j.finding.graded
        grade = grade_range(test.low, test.high, kind, len(b), len(a),
                            baseline_ms=j.mean_a if kind == "latency" else None)
        j.grade = grade.grade or grade.reason


def _decide(j: Judgement, family_size: int) -> None:
    """The verdict of RULE from the Holm-adjusted primary test (and the TOST on ratios)."""
    test = j._test
    # what the rounds are planned for: Bonferroni, as conservative as Holm's first step
    alpha = ALPHA / max(family_size, 1)
    if test.p is None or j.holm_p is None:
        j.verdict, j.reason = "inconclusive", f"no test: {test.note}"
    elif test.scale == "ratio":
        _decide_ratio(j, alpha)
    else:
        _decide_difference(j, alpha)


def _decide_ratio(j: Judgement, alpha: float) -> None:
    f, test, tost = j.finding, j._test, j._tost
    margin = f.margin_pct / 100
    decision = verdict(test, j.holm_p, tost, j.tost_holm_p, threshold=margin, alpha=ALPHA, names=("A", "B"))
    word = decision.word   # ahead: B/A above 1 + margin; behind: below it; equivalent; undecided
    change = 100 * (test.estimate - 1)
    shown = (f"B/A = {test.estimate:.3g}, {abs(change):.1f}% {'higher' if change > 0 else 'lower'} "
             f"(Holm-adjusted p = {j.holm_p:.2g})")
    equivalence = (f"TOST Holm-adjusted p = {j.tost_holm_p:.2g}, uncorrected 90% interval of B/A "
                   f"{tost.low:.3g} - {tost.high:.3g}" if tost.low is not None and j.tost_holm_p is not None
                   else f"no TOST: {tost.note}")
    if f.direction == "same":
        if word == "equivalent":
            j.verdict, j.reason = "reproduced", f"equivalent within ±{f.margin_pct:g}% ({equivalence})"
        elif word in ("ahead", "behind") and (test.low > 1 + margin or test.high < 1 / (1 + margin)):
            j.verdict = "contradicted"
            j.reason = (f"the seed found no difference; here {shown}, its 95% interval outside "
                        f"±{f.margin_pct:g}%")
        else:
            needed = _needed(test, margin, alpha, goal="equivalent")
            j.verdict, j.rounds_needed = "inconclusive", needed
            j.reason = (f"{shown}; equivalence within ±{f.margin_pct:g}% not shown ({equivalence}); "
                        f"{_about(needed)} repetitions per side would show it if there is no difference")
        return
    wanted = "ahead" if f.direction == "higher" else "behind"
    if word == wanted:
        j.verdict, j.reason = "reproduced", shown
    elif word in ("ahead", "behind"):
        j.verdict, j.reason = "contradicted", f"the seed found B {f.direction} than A; here {shown}"
    elif word == "equivalent":
        j.verdict = "contradicted"
        j.reason = (f"the seed found B {f.direction} than A; here the two are equivalent within "
                    f"±{f.margin_pct:g}% ({equivalence})")
    else:
        needed = _needed(test, margin, alpha, goal="detect")
        j.verdict, j.rounds_needed = "inconclusive", needed
        why = ("significant but not shown beyond the margin" if j.holm_p < ALPHA
               else "not significant after Holm's correction")
        j.reason = (f"{shown}: {why}, nor equivalent within ±{f.margin_pct:g}%; {_about(needed)} repetitions "
                    f"per side would detect a {f.margin_pct:g}% difference at the family's level "
                    f"(alpha {alpha:.2g})")


def _decide_difference(j: Judgement, alpha: float) -> None:
    """A difference B - A in the unit (a metric that can be zero): no ratio, no equivalence test."""
    f, test = j.finding, j._test
    significant, goes_up = j.holm_p < ALPHA, test.estimate > 0
    beyond = abs(test.estimate) > f.margin_pct / 100 * abs(j.mean_a or 0)  # the margin is of A's mean
    shown = f"B - A = {test.estimate:+.3g} (Holm-adjusted p = {j.holm_p:.2g})"
    if f.direction == "same":
        j.verdict, j.reason = "inconclusive", f"{shown}; equivalence is only tested on ratios"
    elif significant and beyond and goes_up == (f.direction == "higher"):
        j.verdict, j.reason = "reproduced", shown
    elif significant and beyond:
        j.verdict, j.reason = "contradicted", f"the seed found B {f.direction} than A; here {shown}"
    else:
        margin = max(f.margin_pct / 100, 0.1)
        needed = None
        if j.mean_a and test.sd_round and test.df:
            needed = repetitions_needed(test.sd_round / abs(j.mean_a), test.df, margin=margin,
                                        alpha=alpha, paired=test.paired)
        j.verdict, j.rounds_needed = "inconclusive", needed
        why = (f"significant but not shown beyond {f.margin_pct:g}% of A's mean" if significant
               else "not significant")
        j.reason = (f"{shown}: {why}; {_about(needed)} repetitions per side would detect a difference "
                    f"of {100 * margin:g}% of A's mean")


def _needed(test, margin: float, alpha: float, goal: str) -> int | None:
    if not test.sd_round or not test.df:
        return None
    return repetitions_needed(test.sd_round, test.df, margin=margin, alpha=alpha, goal=goal, paired=test.paired)


def _about(needed: int | None) -> str:
    return f"about {needed}" if needed else "more than 10,000"


# --- the report's section ---------------------------------------------------------------------------

@dataclass
class Section:
    rule: str
    rows: list
    counts: dict

    @property
    def summary(self) -> str:
        """'3 reproduced; 1 inconclusive (4 findings)'."""
        parts = [f"{count} {verdict}" for verdict, count in self.counts.items() if count]
        return f"{'; '.join(parts)} ({len(self.rows)} finding{'s' if len(self.rows) != 1 else ''})"


def against_the_original(directory: Path) -> Section | None:
    """The report's "Against the original study": None when the run's study lists no findings."""
    store = Store.open_dir(Path(directory))
    try:
        judged = judge(store)
    except (ValidationError, yaml.YAMLError):  # a store written by a vpnlab whose findings schema differed
        return None
    finally:
        store.close()
    if not judged:
        return None
    counts = {v: sum(j.verdict == v for j in judged) for v in VERDICTS}
    return Section(RULE, judged, counts)


__all__ = ["ALPHA", "Finding", "Findings", "Judgement", "RULE", "Section", "Side", "VERDICTS",
           "against_the_original", "judge", "parse", "plan_problems"]
