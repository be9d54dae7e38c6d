"""A race run by the study runner: a study whose set of configurations shrinks between rounds.

The field checks come first, in rounds of their own: each candidate over each check's link and workload,
scenarios of the race's store like the others (its plan holds them beside the race's study, from the
race's rules, so a resumed race has them too). A candidate that fails one is out before the first round.
Then every round runs the survivors and the no-VPN baseline once, in a shuffled order, each on a fresh
testbed and tunnel (runner.py, repetition.py). After each round the race is replayed from the store
(race.py), so a resumed race takes up where it stopped and decides as the first sitting would have:
a dropped candidate's scenario is done, with a note saying when and why; the race's end is noted on
the baseline. A round cut short by an interruption counts as a look of its own.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np

from ..core.printable import safe
from ..plan.placement import check_scenario
from ..plan.scenarios import Plan, Scenario, duration, make_plan
from ..plan.study import parse_study
from ..run.runner import Progressor, Runner
from ..store import Store
from .design import RaceDesign
from .field import outcomes
from .race import BUDGET, Drop, Standing, race

OUT_OF_TIME = "the race stopped: its budget's time was spent before another round would fit"


class RaceRunner(Runner):
    def __init__(self, plan, out_dir, caps, design: RaceDesign, refused: dict[str, str] | None = None, **kwargs):
        checks = check_scenarios(design, len(plan.scenarios))
        refused = (refused or {}) | {s.id: why for s in checks if (why := cannot_run(s, caps))}
        super().__init__(Plan(plan.study, plan.scenarios + checks), out_dir, caps, refused=refused, **kwargs)
        self.design = design
        self.check_ids = {s.id for s in checks}
        self.labels = {s.id: s.vpn_label for s in plan.scenarios}
        self._standing: Standing | None = None

    def standing(self, store: Store) -> Standing:
        if self._standing is None:  # a resumed race: what its stored rounds decided, noted if not yet
            self._standing = standing_of(store, self.design)
            self._note(store, self._standing)
        return self._standing

    def _note(self, store: Store, standing: Standing) -> None:
        """Each drop on its candidate, and the race's end on the baseline (a note is stored once)."""
        for name, drop in standing.dropped.items():
            store.add_note(name, f"dropped by the race {drop.when}: {self._named(drop.reason)}")
        if standing.stop:
            store.add_note(self.design.baseline, f"the race ended after round {standing.looks}: {standing.stop}")

    def _rounds(self, store: Store, state, run_id: int, scenarios: list[Scenario], progress: Progressor) -> None:
        """The field checks' rounds, then the race's over what they left (decided once the checks' scenarios
        settled, after their last round); a candidate they dropped is done."""
        checks = [s for s in scenarios if s.id in self.check_ids]
        if checks:
            super()._rounds(store, state, run_id, checks, progress)
            self._round_ended(store, progress)
        racing = [s for s in scenarios if s.id not in self.check_ids]
        for scenario in racing:
            if not self._needs_more(store, scenario):
                self._settle(store, scenario)
        super()._rounds(store, state, run_id, racing, progress)

    def _left(self, store: Store, scenario) -> int:
        """Rounds still to run: a field check's repetitions; none once the race is over or the candidate is out."""
        if scenario.id in self.check_ids:
            return super()._left(store, scenario)
        standing = self.standing(store)
        if store.status(scenario.id) == "failed" or standing.stop:
            return 0
        if scenario.id != self.design.baseline and scenario.id not in standing.survivors:
            return 0
        return max(0, self.design.max_rounds - standing.looks)

    def _round_ended(self, store: Store, progress: Progressor) -> None:
        """The race after this round (or the field checks' rounds): its drops and its end (also when the next
        round, costing what the race's rounds so far cost on average, would overrun the budget), noted and said."""
        before = self.standing(store).dropped
        self._standing = standing = standing_of(store, self.design)
        used = time_used_s(store)
        if not standing.stop and self._overruns(store, used, max(1, standing.looks)):
            store.add_note(self.design.baseline, OUT_OF_TIME)
            standing.stop = BUDGET
        self._note(store, standing)
        for name, drop in standing.dropped.items():
            if name not in before:
                progress.log(f"{drop.when}: dropped {safe(self.labels[name])}: {safe(self._named(drop.reason))}")
        if standing.stop:
            progress.log(f"the race ended after round {standing.looks}: {standing.stop} "
                         f"({len(standing.survivors)} left, {duration(used)} used)")

    def _overruns(self, store: Store, used: float, looks: int) -> bool:
        """Whether one more of the race's rounds, at their average so far (the field checks' time apart),
        would take the race past its budget."""
        racing = used - checks_time_s(store, self.check_ids)
        return used + racing / looks > self.design.budget_s

    def _named(self, reason: str) -> str:
        for scenario_id, label in self.labels.items():
            reason = reason.replace(scenario_id, label)
        return reason


def check_scenarios(design: RaceDesign, first_index: int) -> list[Scenario]:
    """The field checks' scenarios, numbered on from the race's, from the studies the race's rules keep."""
    plans = [make_plan(parse_study(check.study, check.where, here=True)) for check in design.checks]
    scenarios = [scenario for plan in plans for scenario in plan.scenarios]
    for index, scenario in enumerate(scenarios, first_index):
        scenario.index = index
    return scenarios


def cannot_run(scenario: Scenario, caps) -> str | None:
    """What this machine lacks for a field check's scenario (its implementations resolved meanwhile), or None."""
    missing = check_scenario(scenario, caps)
    return f"this machine cannot run this field check: {'; '.join(missing)}" if missing else None


def checks_time_s(store: Store, check_ids: set[str]) -> float:
    """Wall-clock time the field checks took: in each sitting, from its start to its last check repetition
    (a sitting runs its checks first)."""
    last = {run_id: at for run_id, scenario_id, at in store.completion_times() if scenario_id in check_ids}
    started = {row["id"]: row["started_at"] for row in store.runs()}
    return sum((datetime.fromisoformat(at) - datetime.fromisoformat(started[run_id])).total_seconds()
               for run_id, at in last.items())


def time_used_s(store: Store) -> float:
    """Wall-clock time of every sitting of the race so far (the one under way until now)."""
    now = datetime.now(timezone.utc)
    return sum(((datetime.fromisoformat(r["finished_at"]) if r["finished_at"] else now)
                - datetime.fromisoformat(r["started_at"])).total_seconds() for r in store.runs())


def _matrix(store: Store, ids: list[str], metric: str, rounds: list[int], sign: float) -> np.ndarray:
    """ids x rounds of sign * log(value), NaN where there is no valid value above zero."""
    rows = []
    for scenario_id in ids:
        values = store.values_by_round(scenario_id, metric)
        rows.append([sign * math.log(values[r]) if values.get(r, 0) > 0 else math.nan for r in rounds])
    return np.array(rows, dtype=float).reshape(len(ids), len(rounds))


def standing_of(store: Store, design: RaceDesign) -> Standing:
    """The race replayed over the rounds stored so far. A candidate that failed a field check (dropped
    before the first round) or whose scenario failed is out of it."""
    checked = {c: why for c, found in outcomes(store, design.checks, design.candidates).items()
               if (why := next((w for w in found.values() if w), None))}
    failed = [c for c in design.candidates if c not in checked and store.status(c) == "failed"]
    running = [c for c in design.candidates if c not in failed and c not in checked]
    rounds = sorted({r for c in running + [design.baseline] for r in store.values_by_round(c, design.metric)})
    z = _matrix(store, running, design.metric, rounds, 1.0 if design.higher_is_better else -1.0)
    ceilings = [(_matrix(store, running, metric, rounds, 1.0), math.log(limit), metric)
                for metric, limit in design.ceilings.items()]
    standing = race(z, design.rules(), running, ceilings)
    standing.names = list(design.candidates)
    standing.dropped |= {candidate: Drop(0, why) for candidate, why in checked.items()}
    for candidate in failed:
        standing.dropped[candidate] = Drop(standing.looks, f"failed: {store.failure(candidate)}")
    out_of_time = any(OUT_OF_TIME in row.notes for row in store.scenarios() if row.id == design.baseline)
    if out_of_time and not standing.stop:
        standing.stop = BUDGET
    return standing
