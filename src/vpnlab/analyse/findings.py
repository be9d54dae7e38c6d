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
* not comparable here: a condition this machine cannot give (what software emulation can have set, by
  comparability.RULE; a scenario this machine could not run, a piece vpnlab lacks, or the seed's own hardware
  limit stated in the study), with the reason.

The primary test is the one vpnlab uses everywhere (stats): the paired t test on log(B/A) per round
(Welch on logs when the two were not measured in the same rounds) for positive metrics, and on B - A
for the others. Nothing here changes a condition or a number: it only reads the store.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace


from .. import catalog
from . import comparability
from .algorithms import explain_profiles  # what two profiles of one configuration really changed
from .analysis import matched
from ..catalog import KINDS
from ..drivers import pptp
from .judging import values_of
from ..plan.scenarios import make_plan
from ..plan.seed_findings import Choice, Choices, Finding, Findings, Side, pick, side_rows
from ..plan.stored import StoredStudy
from ..plan.study import parse_study
from ..core.errors import VpnlabError
from .stats import (difference_ms, grade_range, holm, outlier_flags, paired_log_ratio, ratio_of_means,
                    repetitions_needed, tost_log_ratio, verdict, welch_log_ratio)

ALPHA = 0.05

RULE = ("reproduced = the difference goes the seed's way, is significant (p < 0.05) after Holm's correction "
        "over this study's findings, is estimated beyond the finding's margin (of A's mean for a difference "
        "B - A), and is as big as the seed's: the seed's B/A lies inside vpnlab's 95% interval of B/A, widened by "
        "the margin (a difference B - A is read as the ratio 1 + (B - A) / mean A, with Fieller's 95% interval of "
        "mean B / mean A, which counts the uncertainty of A's mean; the direction alone where that has no bound "
        "above zero); same direction, smaller effect / same direction, larger effect = all that but the seed's "
        "B/A beyond the interval, further from 1 (smaller here) or nearer to 1 (larger here), with both numbers; "
        "where the seed gave no ratio, the direction alone reproduces it (for a null finding: equivalent within "
        "the margin by TOST, Holm-corrected over the findings apart; its uncorrected 90% interval of B/A is "
        "shown); contradicted = a significant difference beyond the margin the other way, or equivalence within "
        "the margin where the seed found a difference (for a null finding: a significant difference whose 95% "
        "interval lies beyond the margin); "
        "inconclusive = none of these, with the repetitions per side that would detect a difference of the "
        "margin at the family's Bonferroni level (of 10% of A's mean at least, for a difference B - A) or show "
        "equivalence within it; not comparable here = a condition this machine cannot give (what software "
        "emulation can have set, by the emulation rule below; a scenario this machine could not run; a "
        "piece vpnlab lacks; PPTP data towards pptpd over a link that dropped, which measures pptpd's 0.3 s GRE "
        "hold; the seed's own hardware limit), with the reason; calibration, not a check = a finding that set "
        "a condition of the study (its result is shown, outside Holm's family). A side may be the mean of "
        "several scenarios, per round, where the seed averaged its cells. Primary test: paired t on log(B/A) "
        "per round (Welch on logs when the rounds differ), on B - A for metrics that can be zero; a size on the wire "
        "the same in every round on each side (a byte count, no sampling spread) is exact, p = 0. Flagged "
        "samples are kept, never re-run as the seeds did, and counted unless the study fixes otherwise before "
        "the run (analysis: flagged_samples).")

CHANGELOG = "docs/findings-changelog.md"   # why a built-in seed's finding was encoded again, and how
NOT_COMPARABLE = "not comparable here"
CALIBRATION = "calibration, not a check"
VERDICTS = ("reproduced", "same direction, smaller effect", "same direction, larger effect", "contradicted",
            "inconclusive", NOT_COMPARABLE, CALIBRATION)


# --- the plan check -------------------------------------------------------------------------------

def plan_problems(study) -> list[str]:
    """What in a study's findings names no scenario of its plan (empty: all do)."""
    findings = study.findings
    scenarios = make_plan(study).scenarios
    vpns = sorted({s.vpn.label for s in scenarios})
    links = sorted({s.link.label for s in scenarios})
    workloads = sorted({s.workload.label for s in scenarios})
    problems = []
    ids = {f.id for f in findings}
    for i, choice in enumerate(study.choices):
        problems += [f"choices[{i}].findings: no finding {fid!r}" for fid in choice.findings if fid not in ids]
    for i, finding in enumerate(findings):
        for side_name in ("a", "b"):
            side = getattr(finding, side_name)
            if side is None:
                continue
            where = f"findings[{i}] ({finding.id}).{side_name}"
            for vpn in side.vpns:
                if vpn not in vpns:
                    problems.append(f"{where}.vpn: no VPN labelled {vpn!r}; the plan has: {', '.join(vpns)}")
            if side.link is None and len(links) > 1:
                problems.append(f"{where}.link: the study has {len(links)} links; name one of: {', '.join(links)}")
            elif side.link is not None and side.link not in links:
                problems.append(f"{where}.link: no link labelled {side.link!r}; the plan has: {', '.join(links)}")
            for workload in side.workloads:
                if workload not in workloads:
                    problems.append(f"{where}.workload: no workload labelled {workload!r}; the plan has: "
                                    f"{', '.join(workloads)}")
        if finding.metric and catalog.metric(finding.metric).level == "tunnel":
            baselines = {s.vpn.label for s in scenarios if s.vpn.is_baseline}
            sides = [(name, side) for name, side in (("a", finding.a), ("b", finding.b)) if side]
            problems += [f"findings[{i}] ({finding.id}).{name}.vpn: {finding.metric} is a tunnel's, and no VPN has none"
                         for name, side in sides if baselines & set(side.vpns)]
        elif finding.metric and finding.a:
            kinds = {s.workload.kind for s in scenarios if s.workload.label in finding.a.workloads}
            for kind in sorted(kinds - set(catalog.metric(finding.metric).producers.split(", "))):
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
    bounds: tuple | None = None      # (A's, B's) comparability.Bound: how far emulation can have moved them
    alike: bool = False              # the two sides were slowed alike (comparability.slowed_alike)
    short_of_rule: list[str] = field(default_factory=list)  # sides not yet measured to their repetition rule
    held: str = ""                   # why pptpd's GRE hold shaped a side ('' when it did not): not comparable
    changed: str = ""                # how the finding differs from the one the run was stored with (changes)
    a_ids: tuple[str, ...] = ()      # the scenarios each side averages per round (the export's findings table)
    b_ids: tuple[str, ...] = ()
    paired: bool | None = None       # paired by round (True) or Welch on all values (False); None: no test
    family_size: int = 0             # Holm's family this finding's p was corrected in (0: not in it)
    _test: object = field(default=None, repr=False)
    _tost: object = field(default=None, repr=False)
    _ratio: object = field(default=None, repr=False)  # a difference's mean B / mean A (stats.ratio_of_means)
    _span: tuple = field(default=(None, None), repr=False)

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


USERSPACE_STAND_INS = ("libipsec", "wireguard-go", "wireguard-go-current")  # implementations standing in for a missing kernel piece


def _userspace(row) -> bool:
    return any(part in USERSPACE_STAND_INS for part in row.implementation.split("+"))


def _mean_by_round(sides: list[list]) -> list:
    """One side's (round, value) pairs: one scenario's as they are, several scenarios' arithmetic mean
    per round (the rounds all of them completed; in recorded order where rounds are unknown), as the
    seeds averaged their tables' cells."""
    if len(sides) == 1:
        return sides[0]
    if any(r is None for pairs in sides for r, _ in pairs):
        return [(None, sum(v for _, v in cells) / len(cells)) for cells in zip(*sides)]
    by_round = [dict(pairs) for pairs in sides]
    shared = sorted(set.intersection(*(set(d) for d in by_round)))
    return [(r, sum(d[r] for d in by_round) / len(by_round)) for r in shared]


def judge(store, study: StoredStudy | None = None) -> list[Judgement]:
    """A verdict on each finding of the run's study (the last run's unless given), from the store's
    valid samples, Holm-corrected over the findings that have a test; the flagged samples counted as
    the run's study fixed."""
    findings = (study or store.study()).findings
    if not findings:
        return []
    rows = store.scenarios()
    values = values_of(store, store.study().analysis)[0]
    flagged: dict[tuple[str, str], int] = defaultdict(int)
    for sample in store.samples():
        if sample.flags:
            flagged[(sample.scenario_id, sample.metric)] += 1
    seen = comparability.evidence(store)
    out = [_judge_one(finding, rows, values, flagged, seen) for finding in findings]
    decide(out)
    explain_profiles(out, store)
    return out


def decide(out: list[Judgement]) -> None:
    """The verdicts of a study's judgements, their tests done: Holm over the findings compared here
    (a comparison without a test still counts), the TOSTs apart, then RULE."""
    family = [j for j in out if j._test is not None and j.verdict not in (NOT_COMPARABLE, CALIBRATION) and not j.held]
    family += [j for j in out if j._test is None and j.verdict == "inconclusive" and j.metric and not j.held]
    for j, p in zip(family, holm([j.p for j in family])):
        j.holm_p, j.family_size = p, len(family)
    for j, p in zip(family, holm([j._tost.p if j._tost is not None else None for j in family])):
        j.tost_holm_p = p
    for j in out:
        if j.held:
            _not_comparable_held(j)
            continue
        if j.verdict == NOT_COMPARABLE or j._test is None:
            continue
        if j.verdict == CALIBRATION:  # shown as measured, uncorrected: it is not one of the checks
            j.holm_p, j.tost_holm_p = j.p, (j._tost.p if j._tost is not None else None)
            _decide(j, 1)
            as_check = f"as a check it would read: {j.verdict}, {j.reason}"
            j.verdict, j.reason = CALIBRATION, f"{j.finding.calibration}; {as_check}"
            continue
        _decide(j, len(family))
        if j.flagged or j.outliers:
            j.reason += (f"; kept in the test: {j.flagged} flagged sample(s), {j.outliers} far from the rest "
                         "(the seeds re-ran such runs; vpnlab keeps and flags them)")
        if j.short_of_rule:
            j.reason += (f"; provisional: {' and '.join(j.short_of_rule)} not yet measured to the study's rule "
                         "(`vpnlab run --resume` measures the rest)")


def _not_comparable_held(j: Judgement) -> None:
    """A comparison pptpd's hold shaped is not comparable; where emulation alone already leaves it
    undecided (decided apart, uncorrected, as a calibration), that is said first and the hold beside it."""
    if j.verdict != NOT_COMPARABLE and j._test is not None and j.bounds is not None:
        j.holm_p, j.tost_holm_p = j.p, (j._tost.p if j._tost is not None else None)
        _decide(j, 1)
        j.holm_p = j.tost_holm_p = j.rounds_needed = None
    if j.verdict == NOT_COMPARABLE and j.reason:
        j.reason = f"{j.reason}; besides, {j.held}"
    else:
        j.verdict, j.reason, j.rounds_needed = NOT_COMPARABLE, j.held, None


def _label(rows: list, side: Side) -> str:
    first = rows[0]
    if len(rows) == 1:
        return f"{first.shown} | {first.link_label} | {first.workload_label}"
    vpns = first.shown if len(side.vpns) == 1 else f"mean of ({', '.join(side.vpns)})"
    work = first.workload_label if len(side.workloads) == 1 else f"mean of ({', '.join(side.workloads)})"
    return f"{vpns} | {first.link_label} | {work}"


def _judge_one(finding: Finding, rows: list, values: dict, flagged: dict, seen: dict) -> Judgement:
    """One finding's scenarios, whether they compare like the seed's, and its primary test."""
    if finding.not_comparable:
        return Judgement(finding, "not comparable here", finding.not_comparable)
    sa, sb = pick(side_rows(finding.a, rows), side_rows(finding.b, rows))
    missing = [f"{vpn} | {side.link or '-'} | {w}" for side, picked in ((finding.a, sa), (finding.b, sb))
               for (vpn, w), r in zip(side.cells, picked) if r is None]
    if missing:
        return Judgement(finding, "not comparable here", f"not in this run's results: {'; '.join(missing)}")
    kind = sa[0].workload
    a_ids, b_ids = tuple(r.id for r in sa), tuple(r.id for r in sb)
    metric = finding.metric or (KINDS[kind].primary if kind in KINDS else None)
    places = {r.measured_in for r in sa + sb}
    j = Judgement(finding, "inconclusive", "", metric=metric or "", a_label=_label(sa, finding.a),
                  b_label=_label(sb, finding.b), unit=catalog.metric(metric).unit if metric else "",
                  measured_in=places.pop() if len(places) == 1 else "host and VM", a_ids=a_ids, b_ids=b_ids)
    failed = [r for r in sa + sb if r.status == "failed"]
    if failed:
        j.verdict, j.reason = "not comparable here", "; ".join(
            f"{r.shown} | {r.workload_label} could not be measured here: {(r.failure or 'failed')[:200]}"
            for r in failed)
        return j
    j.short_of_rule = [side for side, picked in (("A", sa), ("B", sb)) if any(r.unfinished for r in picked)]
    _mark_unlike_the_seed(j, finding, sa, sb)
    if not metric:
        j.verdict, j.reason = "not comparable here", f"the workload kind {kind!r} is unknown here"
        return j
    if j.verdict != "not comparable here" and metric not in comparability.WIRE - comparability.STREAM_WIRE:
        j.held = _held_by_pptpd(sa + sb, values)  # (a tunnel's per-packet sizes are the same however it was held)
    if j.emulated and j.verdict != NOT_COMPARABLE:
        _bound_by_emulation(j, metric, sa, sb, seen)
    a_vals = _mean_by_round([_per_rate(values.get((r.id, metric), []), r, finding) for r in sa])
    b_vals = _mean_by_round([_per_rate(values.get((r.id, metric), []), r, finding) for r in sb])
    if finding.per_link_rate:
        if not all(r.link_rate_mbit for r in sa + sb):
            j.verdict, j.reason = "not comparable here", "per_link_rate needs both links shaped to a rate"
            return j
        j.unit = f"{j.unit} per Mbit/s of link"
    j.flagged = sum(flagged.get((r.id, metric), 0) for r in sa + sb)
    _test(j, a_vals, b_vals)
    if finding.calibration and j.verdict != "not comparable here":
        j.verdict, j.reason = CALIBRATION, finding.calibration
    return j


def _per_rate(pairs: list, row, finding: Finding) -> list:
    if not (finding.per_link_rate and row.link_rate_mbit):
        return pairs
    return [(r, v / row.link_rate_mbit) for r, v in pairs]


def _held_by_pptpd(rows: list, values: dict) -> str:
    """Why a side's PPTP samples measured pptpd's GRE reorder hold rather than PPTP ('' when none
    did): data towards the gateway over a link that dropped (pptp.held_by_pptpd)."""
    held = []
    for r in rows:
        if "pptpd" not in r.implementation.split("+"):
            continue
        seen = {m: max((v for _, v in values.get((r.id, m), [])), default=0.0) for m in pptp.LOSS_EVIDENCE}
        if pptp.held_by_pptpd(r.workload, r.params, r.link_loss_pct, seen):
            held.append(f"{r.shown} | {r.workload_label}{_loss_seen(r, values)}")
    return (f"{'; '.join(held)}: {pptp.PPTPD_HOLD.meaning}" if held else "")


def _loss_seen(row, values: dict) -> str:
    """On a link set to lose nothing, in how many samples a loss was seen (what made them held)."""
    if row.link_loss_pct:
        return ""
    rounds = [{r for r, v in values.get((row.id, m), []) if v > 0} for m in pptp.LOSS_EVIDENCE]
    samples = max(len(values.get((row.id, m), [])) for m in pptp.LOSS_EVIDENCE)
    return f" (a loss in {len(set().union(*rounds))} of {samples} samples, on a link set to lose nothing)"


def _mark_unlike_the_seed(j: Judgement, finding: Finding, sa: list, sb: list) -> None:
    """'not comparable here' when the scenarios were measured unlike the seed's machines (their values
    are still shown): on a userspace stand-in for a kernel data path, or in two places. What emulation
    leaves decidable is comparability.RULE's (_bound_by_emulation)."""
    j.emulated = any(r.emulated for r in sa + sb)
    places = {r.measured_in for r in sa + sb}
    if finding.needs_kernel_datapath and (stand_ins := [r for r in sa + sb if _userspace(r)]):
        j.verdict = "not comparable here"
        j.reason = ("this kernel lacks the seed's kernel data path: " + "; ".join(
            f"{r.shown} ran as {r.implementation} (in userspace)" for r in stand_ins))
    elif len(places) > 1:
        j.verdict, j.reason = "not comparable here", "A and B were measured in different places (host and VM)"


def _bound_by_emulation(j: Judgement, metric: str, sa: list, sb: list, seen: dict) -> None:
    """How far emulation can have moved each side (comparability.RULE); 'not comparable here' at once
    where a side's figure is the emulator's own."""
    j.bounds = (comparability.side_bound(metric, sa, seen), comparability.side_bound(metric, sb, seen))
    j.alike = comparability.slowed_alike(sa, sb)
    own = [b.why for b in j.bounds if b.kind == "the emulator's"]
    if own and not j.alike:
        j.verdict, j.reason = NOT_COMPARABLE, "; ".join(own)


def _within_emulation(j: Judgement) -> None:
    """comparability.RULE: the verdict stands only where it holds over every B/A (or B - A) the
    emulator can have moved the measured one to; else 'not comparable here', saying why."""
    a, b = j.bounds
    if j.alike and j.scale == "ratio":
        j.reason += "; emulated, but A and B differ only in content through the same software: slowed alike"
        return
    if a.exact and b.exact:
        return
    widened = _widened(j)
    if widened is None:
        j.verdict, j.reason = NOT_COMPARABLE, f"{_moved(j)}; no interval to widen"
        return
    up, down, equivalent, can = widened
    f, word = j.finding, j.verdict
    if f.direction == "same":
        stands = {"reproduced": equivalent, "contradicted": up or down}.get(word)
        possible = {"reproduced": can["equivalent"], "contradicted": can["up"] or can["down"]}
    else:
        seeds_way, other_way = (up, down) if f.direction == "higher" else (down, up)
        stands = {"contradicted": other_way or equivalent}.get(word, seeds_way if word != "inconclusive" else None)
        towards = "up" if f.direction == "higher" else "down"
        possible = {"reproduced": can[towards], "contradicted": can["down" if towards == "up" else "up"]}
    if word == "inconclusive":
        j.rounds_needed = None   # repetitions narrow the interval, not what emulation can have done
        left = [verdict for verdict, yes in possible.items() if yes]
        j.verdict, j.reason = ((NOT_COMPARABLE, f"{_moved(j)}: no result here could decide the finding")
                               if not left else
                               ("inconclusive", f"{j.result_text}: {_moved(j)}; only a result beyond the margin "
                                f"over that whole range would decide it (here it could come out {' or '.join(left)}"
                                "), and this one is not"))
        return
    if not stands:
        j.verdict, j.reason = NOT_COMPARABLE, (f"{_moved(j)}: the measured '{word}' ({j.result_text}) does not "
                                               "hold over that whole range")
    elif f.direction != "same" and word != "contradicted":
        j.verdict, j.reason = _size_within(j)
    else:
        j.reason += f"; it holds however far emulation moved it ({_moved(j)})"


def _widened(j: Judgement):
    """(B above A beyond the margin, below it, equivalent within it, and which of these emulation
    leaves possible), over the measured intervals widened by what emulation can have done; None
    without an interval."""
    test, tost, m = j._test, j._tost, j.finding.margin_pct / 100
    if test.low is None:
        return None
    if j.scale == "ratio":
        lo, hi = comparability.ratio_factor(*j.bounds)
        j._span = (test.low * lo, test.high * hi)
        up = test.low * lo > 1 and test.estimate * lo > 1 + m
        down = test.high * hi < 1 and test.estimate * hi < 1 / (1 + m)
        equivalent = (tost is not None and tost.low is not None and tost.low * lo >= 1 / (1 + m)
                      and tost.high * hi <= 1 + m)
        can = {"up": lo > 0, "down": hi < math.inf, "equivalent": lo > 0 and hi < math.inf}
    else:
        lo, hi = comparability.difference_offset(*j.bounds)
        margin = m * abs(j.mean_a or 0)
        j._span = (test.low + lo, test.high + hi)
        up = test.low + lo > 0 and test.estimate + lo > margin
        down = test.high + hi < 0 and test.estimate + hi < -margin
        equivalent = False   # (equivalence is tested on ratios only)
        can = {"up": lo > -math.inf, "down": hi < math.inf, "equivalent": False}
    return up, down, equivalent, can


def _moved(j: Judgement) -> str:
    """What emulation can have done to this comparison, for the reason."""
    why = "; ".join(b.why for b in j.bounds if b.why)
    if j.scale == "ratio":
        lo, hi = comparability.ratio_factor(*j.bounds)
        span = f"the true B/A lies {_g(lo)} to {_g(hi)} times the measured".replace("inf", "any number of")
    else:
        lo, hi = comparability.difference_offset(*j.bounds)
        span = (f"the true B - A lies {'below' if hi == 0 else 'above' if lo == 0 else 'anywhere around'} "
                "the measured" if (lo, hi) != (0, 0) else "the true B - A is the measured")
    return f"measured under software emulation (QEMU TCG): {why}: {span}"


def _size_within(j: Judgement) -> tuple[str, str]:
    """The effect-size verdict on the widened 95% interval (the direction having held over it)."""
    low, high = j._span
    moved = f"{_moved(j)}, widening the 95% interval to [{_g(low)}, {_g(high)}]"
    if j.scale == "ratio":
        verdict, reason = effect_size(j.finding, j.estimate, low, high, j.reason.split(";")[0])
    elif j.mean_a and j.mean_a > 0 and 1 + low / j.mean_a > 0:
        verdict, reason = effect_size(j.finding, 1 + j.estimate / j.mean_a, 1 + low / j.mean_a,
                                      1 + high / j.mean_a, j.reason.split(";")[0])
    else:
        verdict, reason = effect_size(j.finding, 1.0, None, None, j.reason.split(";")[0])
    return verdict, f"{reason}; {moved}"


def _test(j: Judgement, a_vals: list, b_vals: list) -> None:
    """The primary test of B against A on the rounds both completed (a ratio where the metric is
    positive, else a difference), its TOST, and the seed's grade where the finding asks for one."""
    a, b, paired = matched(a_vals, b_vals)
    j.n_a, j.n_b, j.paired = len(a), len(b), paired
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
        j._ratio = ratio_of_means(a, b, paired=paired)
    j._test = test = _exact_on_the_wire(test, j.metric, a, b)
    j.scale, j.estimate, j.low, j.high = test.scale, test.estimate, test.low, test.high
    j.p, j.method = test.p, test.method
    if positive and j.finding.graded and test.low is not None and not j.emulated:  # (the emulator's CPU: no grade)
        kind = j.finding.graded
        grade = grade_range(test.low, test.high, kind, len(b), len(a),
                            baseline_ms=j.mean_a if kind == "latency" else None)
        j.grade = grade.grade or grade.reason


EXACT = "exact: each side the same size on the wire in every round (a byte count has no sampling spread)"


def _exact_on_the_wire(test, metric: str, a: list, b: list):
    """A size on the wire (comparability.WIRE) the same in every round on each side, the two sides apart,
    is known exactly: B - A (or B/A) with no interval to speak of and p = 0, as scipy's t test also gives.
    Any spread leaves the t test as it was."""
    constant_apart = len(set(a)) == 1 and len(set(b)) == 1 and a[0] != b[0]
    if test.p is not None or metric not in comparability.WIRE or not constant_apart:
        return test
    return replace(test, low=test.estimate, high=test.estimate, p=0.0, statistic=math.inf, method=EXACT, note="")


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
    if j.bounds is not None and test.p is not None and j.holm_p is not None:
        _within_emulation(j)


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
        j.verdict, j.reason = effect_size(f, test.estimate, test.low, test.high, shown)
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
        j.verdict, j.reason = _difference_size(j, shown)
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


def effect_size(f: Finding, estimate: float, low: float | None, high: float | None, shown: str) -> tuple[str, str]:
    """The verdict of a difference that went the seed's way, by its size (RULE): reproduced when the
    seed's B/A lies in the 95% interval of B/A widened by the margin, else a smaller or larger effect."""
    if f.seed_ratio is None or low is None or high is None:
        return "reproduced", f"{shown}; the seed gave no ratio: the direction alone"
    widen = 1 + f.margin_pct / 100
    interval = f"95% interval [{low:.3g}, {high:.3g}]"
    if low / widen <= f.seed_ratio <= high * widen:
        return "reproduced", f"{shown}; the seed's B/A = {f.seed_ratio:g} lies in the {interval} (±{f.margin_pct:g}%)"
    smaller = abs(math.log(f.seed_ratio)) > abs(math.log(estimate))
    size = "smaller" if smaller else "larger"
    return (f"same direction, {size} effect",
            f"{shown}; B/A = {estimate:.3g} here ({interval}) against the seed's {f.seed_ratio:g}: a {size} effect")


def _difference_size(j: Judgement, shown: str) -> tuple[str, str]:
    """effect_size of a difference B - A, read as the ratio 1 + (B - A) / mean A = mean B / mean A, with
    Fieller's interval of it (stats.ratio_of_means): B - A's interval divided by A's mean, as if that
    were known, covered the true ratio in only about 90% of studies at B/A = 3 (tests/test_findings.py)."""
    ratio = j._ratio
    if ratio is not None and ratio.estimate is not None and ratio.estimate > 0:
        shown = f"{shown}, as a ratio 1 + (B - A) / mean A = {ratio.estimate:.3g}"
    if j.finding.seed_ratio is None:
        return effect_size(j.finding, 1.0, None, None, shown)
    if ratio is None or ratio.low is None or ratio.low <= 0:
        why = ratio.note if ratio is not None and ratio.note else "it reaches zero"
        return "reproduced", f"{shown}; no interval of B/A above zero ({why}): the direction alone"
    return effect_size(j.finding, ratio.estimate, ratio.low, ratio.high, shown)


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
    choices: list = field(default_factory=list)   # the conditions vpnlab chose (Choice)
    reencoded: bool = False   # judged by the findings this vpnlab ships, not the run's study file's
    emulation_rule: str = ""  # what a side measured under software emulation can still decide
    removed: list = field(default_factory=list)   # ids of the run's findings this vpnlab no longer lists
    changelog: str = CHANGELOG

    @property
    def summary(self) -> str:
        """'3 reproduced; 1 inconclusive (4 findings)'."""
        parts = [f"{count} {verdict}" for verdict, count in self.counts.items() if count]
        return f"{'; '.join(parts)} ({len(self.rows)} finding{'s' if len(self.rows) != 1 else ''})"


def against_the_original(store) -> Section | None:
    """The report's "Against the original study": None when the study lists no findings. The findings
    are those that judge the run (StoredStudy.judged_by: a built-in seed's as this vpnlab encodes them);
    the conditions vpnlab chose are always the run's own. `store`: a store, or what was read of it."""
    ran = store.study()
    judging, reencoded = ran.judged_by
    judged = judge(store, judging)
    if not judged:
        return None
    changed, removed = changes(ran, judging) if reencoded else ({}, [])
    moved = conditions_changed(ran, judging) if reencoded else {}
    labels = {r.id: (r.vpn_label, r.link_label, r.workload_label) for r in store.scenarios()}
    for j in judged:
        ran_otherwise = sorted({moved[labels[i]] for i in j.a_ids + j.b_ids if labels[i] in moved})
        j.changed = "; ".join(filter(None, [changed.get(j.finding.id, ""), *(
            f"measured under other conditions than the study now states ({what}): a new run measures them"
            for what in ran_otherwise)]))
    counts = {v: sum(j.verdict == v for j in judged) for v in VERDICTS}
    return Section(RULE, judged, counts, ran.choices, reencoded, comparability.RULE, removed=removed)


def changes(ran: StoredStudy, judging: StoredStudy) -> tuple[dict[str, str], list[str]]:
    """How each finding that judges a run differs from the one the run was stored with (by id; absent
    when alike), citing CHANGELOG, and the ids of the run's findings that are gone."""
    if "findings" in ran.unreadable:
        return {f.id: f"the run's own findings are unreadable here: see {CHANGELOG}" for f in judging.findings}, []
    before = {f.id: f for f in ran.findings}
    notes = {}
    for f in judging.findings:
        old = before.get(f.id)
        if old is None:
            notes[f.id] = f"not in the study this run was stored with ({CHANGELOG})"
        elif old != f:
            was, now = old.model_dump(), f.model_dump()
            what = "; ".join(_change(k, was[k], now[k]) for k in was if was[k] != now[k])
            notes[f.id] = f"encoded otherwise when this run was stored: {what} ({CHANGELOG})"
    ids = {f.id for f in judging.findings}
    return notes, [i for i in before if i not in ids]


def conditions_changed(ran: StoredStudy, judging: StoredStudy) -> dict[tuple[str, str, str], str]:
    """(VPN, link, workload labels) -> how the study that judges a run states that scenario otherwise than
    the run's own study did ('link queue_ms 50.0 -> 28.0'): the run measured other conditions than the
    findings were written for. Empty where either study no longer plans (an older vpnlab's)."""
    def planned(text: str) -> dict:
        return {(s.vpn_label, s.link.label, s.workload.label): s.key for s in make_plan(parse_study(text)).scenarios}

    try:
        before, after = planned(ran.text), planned(judging.text)
    except VpnlabError:
        return {}
    return {labels: ", ".join(_key_changes(before[labels], key)) for labels, key in after.items()
            if labels in before and before[labels] != key}


def _key_changes(old, new, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(old.keys() | new.keys())
                for c in _key_changes(old.get(k), new.get(k), f"{path} {k}".strip())]
    return [] if old == new else [f"{path} {old} -> {new}"]


def _change(name: str, old, new) -> str:
    """'margin_pct 5.0 -> 1.0' for a short value, else which way it went ('not_comparable set')."""
    if all(v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 40)
           for v in (old, new)):
        return f"{name} {'none' if old is None else old} -> {'none' if new is None else new}"
    return f"{name} {'set' if old is None else 'removed' if new is None else 'changed'}"


__all__ = ["ALPHA", "CALIBRATION", "CHANGELOG", "Choice", "Choices", "Finding", "Findings", "Judgement",
           "NOT_COMPARABLE", "RULE", "Section", "Side", "VERDICTS", "against_the_original", "changes",
           "effect_size", "judge", "plan_problems"]
