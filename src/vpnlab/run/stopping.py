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
from typing import TYPE_CHECKING

from ..analyse.stats import SteinPlan, stein_total_n
from ..analyse.stopping import STEIN_NOTE, final_interval

if TYPE_CHECKING:
    from ..plan.scenarios import Scenario
    from ..store import Store


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
