"""A race run by the study runner: a study whose set of configurations shrinks between rounds.

Every round runs the survivors and the no-VPN baseline once, in a shuffled order, each on a fresh
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
from ..plan.scenarios import duration
from ..run.runner import Progressor, Runner
from ..store import Store
from .design import RaceDesign
from .race import BUDGET, Drop, Standing, race

OUT_OF_TIME = "the race stopped: its budget's time was spent before another round would fit"


class RaceRunner(Runner):
    def __init__(self, plan, out_dir, caps, design: RaceDesign, **kwargs):
        super().__init__(plan, out_dir, caps, **kwargs)
        self.design = design
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
            store.add_note(name, f"dropped by the race after round {drop.look}: {self._named(drop.reason)}")
        if standing.stop:
            store.add_note(self.design.baseline, f"the race ended after round {standing.looks}: {standing.stop}")

    def _left(self, store: Store, scenario) -> int:
        """Rounds still to run: none once the race is over or the candidate is out."""
        standing = self.standing(store)
        if store.status(scenario.id) == "failed" or standing.stop:
            return 0
        if scenario.id != self.design.baseline and scenario.id not in standing.survivors:
            return 0
        return max(0, self.design.max_rounds - standing.looks)

    def _round_ended(self, store: Store, progress: Progressor) -> None:
        """The race after this round: its drops and its end (also when the next round, costing what the
        rounds so far cost on average, would overrun the budget), noted and said."""
        before = self.standing(store).dropped
        self._standing = standing = standing_of(store, self.design)
        used = time_used_s(store)
        if not standing.stop and used * (1 + 1 / max(1, standing.looks)) > self.design.budget_s:
            store.add_note(self.design.baseline, OUT_OF_TIME)
            standing.stop = BUDGET
        self._note(store, standing)
        for name, drop in standing.dropped.items():
            if name not in before:
                progress.log(f"round {drop.look}: dropped {safe(self.labels[name])}: {safe(self._named(drop.reason))}")
        if standing.stop:
            progress.log(f"the race ended after round {standing.looks}: {standing.stop} "
                         f"({len(standing.survivors)} left, {duration(used)} used)")

    def _named(self, reason: str) -> str:
        for scenario_id, label in self.labels.items():
            reason = reason.replace(scenario_id, label)
        return reason


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
    """The race replayed over the rounds stored so far. A candidate that failed is out of it."""
    failed = [c for c in design.candidates if store.status(c) == "failed"]
    running = [c for c in design.candidates if c not in failed]
    rounds = sorted({r for c in running + [design.baseline] for r in store.values_by_round(c, design.metric)})
    z = _matrix(store, running, design.metric, rounds, 1.0 if design.higher_is_better else -1.0)
    ceilings = [(_matrix(store, running, metric, rounds, 1.0), math.log(limit), metric)
                for metric, limit in design.ceilings.items()]
    standing = race(z, design.rules(), running, ceilings)
    standing.names = list(design.candidates)
    for candidate in failed:
        standing.dropped[candidate] = Drop(standing.looks, f"failed: {store.failure(candidate)}")
    out_of_time = any(OUT_OF_TIME in row.notes for row in store.scenarios() if row.id == design.baseline)
    if out_of_time and not standing.stop:
        standing.stop = BUDGET
    return standing
