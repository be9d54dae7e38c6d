"""Recommendations that follow the tests: per link and workload (and among FIPS-only
configurations), the first-ranked configuration is called the best only when the study's
Holm-corrected tests put it ahead of every other one (significant, and estimated beyond the
practical threshold); otherwise the sentence says what the tests do support (equivalent within it,
or not distinguishable and how many rounds would be needed). Under software emulation the comparisons
decide by comparability.RULE, the findings' rule: an order that does not hold over what emulation can
have done to each side is shown, never recommended. A lone
configuration is not called the best of anything; one not yet measured to its rule is named. On the
workloads that carry bulk traffic, the cheapest in CPU per GB is named by the same rule, from the
comparisons of compare.cost_family."""

from __future__ import annotations

from collections import defaultdict

from .. import catalog
from .algorithms import weak_in
from .analysis import Summary, fmt, relative_text
from .compare import COST_METRIC, Comparison
from ..store import ScenarioRow
from ..catalog import KINDS


def versus(top: ScenarioRow, other: ScenarioRow, family: list) -> Comparison | None:
    """The study's comparison of two configurations (compare.py), if they were compared."""
    return next((c for c in family if {c.scenario_a, c.scenario_b} == {top.id, other.id}), None)


def singled_out(top: ScenarioRow, others: list[ScenarioRow], family: list) -> tuple[bool, str, list[Comparison]]:
    """Whether the study's tests put the first-ranked ahead of every other configuration (each
    Holm-corrected test significant, each estimate beyond the threshold: compare.py), what they say,
    and the comparisons that decided it: every one checked, up to the first (in rank order) that does
    not single it out. A lead over the runner-up alone is not enough: a noisy configuration ranked
    third may be the better one."""
    checked = []
    for other in others:
        c = versus(top, other, family)
        if c is None:
            return False, (f"{top.vpn_label} and {other.vpn_label} were not compared (fewer than two valid "
                           "repetitions a side)"), checked
        checked.append(c)
        if c.verdict != ("behind" if c.scenario_a == top.id else "ahead"):
            return False, c.verdict_text.rstrip("."), checked
    also = {1: "", 2: f"; {top.vpn_label} is also ahead of the other one"}.get(
        len(others), f"; {top.vpn_label} is also ahead of the {len(others) - 1} others")
    return True, checked[0].verdict_text.rstrip(".") + also, checked


def _recommendation(head: str, scope: str, ranked: list, decided: tuple[bool, str], left_out: list[str]) -> str:
    """One recommendation: the first-ranked configuration, and whether the tests single it out
    (`decided`: singled_out's answer and what the tests say)."""
    best, top = ranked[0]
    value = f"{top.vpn_label} ({best.metric} {fmt(best.centre)} {best.unit}" + (
        f", {relative_text(best)} against no VPN" if best.relative is not None else "") + ")"
    fips = "" if scope == "any" else "FIPS-only "
    after = (f" ({', '.join(left_out)}: not yet measured to their rule, left out; `vpnlab run --resume` "
               "measures them)") if left_out else ""
    weak = weak_in(top)
    if weak:  # speed is what was measured; what it costs in security is not, and must not go unsaid
        after += (f"; {top.vpn_label} runs broken or deprecated algorithms ({'; '.join(weak)}), so its rank "
                    "is one of speed only")
    if len(ranked) == 1:
        return f"{head}, {value} is the only {fips}configuration measured: there is nothing to choose between{after}."
    ahead, why = decided  # under emulation, by comparability.RULE, as the comparisons decide (compare.py)
    if ahead:
        return f"{head}, the best {fips}choice is {value}: {why}{after}."
    return f"{head}, the first-ranked {fips}configuration is {value}, but no best choice follows: {why}{after}."


def recommendations(scenarios: list[ScenarioRow], stat: dict, family: list[Comparison],
                    cost: list[Comparison] = ()) -> list[tuple[str, Summary, list[Comparison]]]:
    """The first-ranked configuration per link and workload, overall and among FIPS-only ones,
    called the best only when the study's corrected tests single it out; with its summary and the
    comparisons that decided it. Where `cost` (compare.cost_family) compared CPU per GB, the cheapest
    the same way, after the fastest."""
    out = []
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for s in scenarios:  # ranked among those measured in the same place (this host or the VM)
        if not s.is_baseline and s.status != "failed" and s.workload in KINDS:
            groups[(s.link_label, s.workload_label, s.measured_in)].append(s)
    mixed = len({place for _, _, place in groups}) > 1
    for (link, workload, place), members in sorted(groups.items()):
        where = {"host": " among those measured on this host", "vm": " among those measured in the VM"}[place]
        head = f"On {link}, for {workload}{where if mixed else ''}"
        out += _ranked(head, members, KINDS[members[0].workload].primary, stat, family)
        costed = {c.scenario_a for c in cost} | {c.scenario_b for c in cost}
        if costed & {m.id for m in members}:
            out += _ranked(f"{head}, in CPU per GB carried", [m for m in members if m.id in costed], COST_METRIC,
                           stat, cost)
    return out


def _ranked(head: str, members: list[ScenarioRow], metric: str, stat: dict,
            family: list[Comparison]) -> list[tuple[str, Summary, list[Comparison]]]:
    """The recommendations on `metric` among `members`, overall and among FIPS-only ones."""
    out = []
    for scope, pool in (("any", members), ("FIPS 140 only", [m for m in members if m.profile == "fips"])):
        done = [m for m in pool if not m.unfinished]
        ranked = [(stat[(m.id, metric)], m) for m in done if (m.id, metric) in stat]
        if not ranked:
            continue
        ranked.sort(key=lambda p: p[0].centre, reverse=catalog.metric(metric).higher_is_better is not False)
        left_out = [m.vpn_label for m in pool if m.unfinished]
        ahead, why, rests_on = (singled_out(ranked[0][1], [m for _, m in ranked[1:]], family)
                                if len(ranked) > 1 else (False, "", []))
        out.append((_recommendation(head, scope, ranked, (ahead, why), left_out), ranked[0][0], rests_on))
    return out


def at_capacity(analysed) -> list[str]:
    """The recommendations on the links without a rate, where the VPN is the bottleneck: which is
    fastest and which costs least CPU per GB carried, as far as the tests say (`vpnlab run`'s last
    lines, docs/capacity.md)."""
    # what the VPN carries as fast as it can: TCP and the UDP capacity search (a fixed-rate UDP stream is not)
    unshaped = [s for s in analysed.scenarios if s.link_rate_mbit is None and s.workload in ("tcp", "udp_capacity")]
    if not unshaped:
        return []
    said = recommendations(unshaped, analysed.stat, analysed.family, analysed.cost_family)
    return [text for text, _, _ in said if "FIPS-only" not in text]
