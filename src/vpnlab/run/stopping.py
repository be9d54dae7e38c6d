"""When a scenario has had enough repetitions: a fixed count, or Stein's two-stage rule on the log
scale for an adaptive one.

Stopping when the interval looks tight lets chance choose the stopping point, and the stated
coverage no longer holds. Stein's rule fixes the total from the pilot alone: the first `min` valid
repetitions of the primary metric give the spread of its logs, which sets how many rounds a 95%
interval within +-ci_target_pct needs (capped at `max`); the final interval uses the pilot's spread
and degrees of freedom. Configurations compared with one another (same link and workload) all run
to the largest of their totals, so extra repetitions come as whole rounds and the blocks stay
balanced for the paired tests.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import yaml

from ..analyse.stats import Interval, SteinPlan, guarded_stein_interval, stein_total_n
from ..plan.study import RepetitionRule

if TYPE_CHECKING:
    from ..plan.scenarios import Scenario
    from ..store import Store


def stored_rule(study_text: str) -> RepetitionRule | None:
    """The repetition rule of a stored study (as run, with any --set applied), None if unreadable."""
    try:
        study = yaml.safe_load(study_text)
        rule = study.get("repetitions", 3) if isinstance(study, dict) else 3
        return RepetitionRule.fixed(rule) if isinstance(rule, int) else RepetitionRule(**rule)
    except (yaml.YAMLError, TypeError, ValueError):
        return None


def final_interval(values: list[float], rule: RepetitionRule, pilot: list[float] | None = None) -> Interval | None:
    """Stein's final interval of an adaptive scenario's primary metric (values in repetition order):
    the geometric mean of all values, the pilot's spread and df (the first `min` values, unless the
    pilot the rule ran on is given: flagged values left out do not make a new one), widened where the
    t interval of all of them reaches further (stats.guarded_stein_interval); None without a positive pilot."""
    pilot = values[:rule.min] if pilot is None else pilot
    if not rule.adaptive or len(pilot) < max(rule.min, 2) or min(values + pilot) <= 0:
        return None
    plan = stein_total_n(pilot, rule.ci_target_pct / 100)
    return guarded_stein_interval(values, plan.pilot_sd_log, plan.pilot_df)


def pilot_plan(store: Store, scenario: Scenario) -> SteinPlan | None:
    """Stein's plan from the scenario's pilot, or None while the pilot is incomplete. A pilot value
    at or below zero (no log scale) plans the maximum."""
    rule, values = scenario.repetitions, store.values(scenario.id, scenario.kind.primary)
    pilot = values[:rule.min]
    if len(pilot) < rule.min:
        return None
    if min(pilot) <= 0:
        return SteinPlan(rule.max, rule.min, float("nan"), rule.min - 1, capped=False)
    return stein_total_n(pilot, rule.ci_target_pct / 100, max_n=rule.max)


def _compared(scenario: Scenario, scenarios: list[Scenario]) -> list[Scenario]:
    return [s for s in scenarios if s.repetitions.adaptive and s.link.label == scenario.link.label
            and s.workload.label == scenario.workload.label]


def rounds_wanted(store: Store, scenario: Scenario, scenarios: list[Scenario]) -> int:
    """How many valid repetitions the scenario needs in all: its fixed count, or (adaptive) `min`
    until its pilot is complete, then the largest Stein total among the configurations compared
    with it whose pilots are complete and that have not failed."""
    rule = scenario.repetitions
    if not rule.adaptive:
        return rule.max
    if pilot_plan(store, scenario) is None:
        return rule.min
    totals = [plan.total_n for s in _compared(scenario, scenarios)
              if store.status(s.id) != "failed" and (plan := pilot_plan(store, s)) is not None]
    return min(rule.max, max(totals))


STEIN_NOTE = "adaptive repetitions by Stein's two-stage rule on the log scale"  # (one note: no '; ' in it)
# Stein's note as stored when the scenario settled (before 2026-11-26 split in three at '; '): the report,
# `show` and the export say it afresh from the intervals as computed now (target_met), not from it.
STEIN_PARTS = re.compile(rf"^({re.escape(STEIN_NOTE)}|\d+ ran \(whole rounds|final interval )")


def lasting_notes(notes: str) -> list[str]:
    """A scenario's stored notes, Stein's left out."""
    return [note for note in notes.split("; ") if note and not STEIN_PARTS.match(note)]


def target_met(final, rule: RepetitionRule | None) -> bool | None:
    """Whether an adaptive scenario's final interval (a Summary of its primary metric, as computed now)
    is within the rule's target; None without an adaptive rule or a summary."""
    if rule is None or not rule.adaptive or final is None:
        return None
    return not math.isnan(final.ci_high) and final.ci_high <= final.centre * (1 + rule.ci_target_pct / 100)


def stein_note(store: Store, scenario: Scenario) -> tuple[bool, str]:
    """Whether Stein's final interval met the target, and a note saying the rule that ran and its
    interval (the geometric mean's, by the pilot's spread and df)."""
    rule, metric = scenario.repetitions, scenario.kind.primary
    plan, values = pilot_plan(store, scenario), store.values(scenario.id, metric)
    final = final_interval(values, rule)
    if plan is None or math.isnan(plan.pilot_sd_log) or final is None:  # no pilot, or no log scale
        return False, (f"adaptive repetitions: {metric} had a value at or below zero or no complete pilot, "
                       f"so Stein's rule could not run; {len(values)} repetitions, no interval target")
    met = final.high <= final.estimate * (1 + rule.ci_target_pct / 100)
    more = " (whole rounds with the configurations compared, whose pilots asked for more)" \
        if len(values) > plan.total_n else ""
    note = (f"{STEIN_NOTE}: a pilot of {plan.pilot_n} "
            f"(sd of log {metric} {plan.pilot_sd_log:.3g}, {plan.pilot_df} df) asked for {plan.total_n} in all "
            f"for a 95% interval within +-{rule.ci_target_pct:g}%, {len(values)} ran{more}, final interval "
            f"{final.low:.4g} - {final.high:.4g} around the geometric mean {final.estimate:.4g}")
    if not met:
        note += (f", wider than the target: the rule was capped at max {rule.max}" if plan.capped else
                 ", wider than the target: the later repetitions spread wider than the pilot")
    return met, note
