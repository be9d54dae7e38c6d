"""Reading a store: its runs, scenarios, samples and raw output, and what a run asks of it to go on
(the repetitions done, the rounds). A ReadOnlyStore has nothing else: what results_dir.read_store
opens for the commands that only read cannot write."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Callable, TypeVar

from ..plan.stored import StoredStudy, of_runs
from .database import VALID, _Connection
from .legacy_flags import read_flags
from .rows import SampleRow, ScenarioRow

T = TypeVar("T")


class Reading:
    """The queries on a store's connection (`self.db`)."""

    def runs(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()

    def study(self) -> StoredStudy:
        """The study as the last sitting ran it, parsed once (plan/stored.py)."""
        return of_runs(self.runs())

    def scenarios(self) -> list[ScenarioRow]:
        return [ScenarioRow(**dict(r)) for r in self.db.execute("SELECT * FROM scenarios ORDER BY idx")]

    def samples(self, valid_only: bool = True) -> list[SampleRow]:
        """Samples with their repetition's flags, round and failure. Valid only (the default):
        not of a failed repetition nor of a failed scenario, as every statistic needs."""
        where = f"WHERE {VALID}" if valid_only else ""
        return [SampleRow(**{**dict(r), "flags": read_flags(r["flags"])}) for r in self.db.execute(
            "SELECT s.*, COALESCE(r.flags, '') AS flags, r.round AS round, COALESCE(r.failure, '') AS failure,"
            " r.position AS position"
            " FROM samples s JOIN scenarios sc ON sc.id = s.scenario_id LEFT JOIN repetitions r"
            f" ON r.scenario_id = s.scenario_id AND r.repetition = s.repetition {where}"
            " ORDER BY s.scenario_id, s.repetition, s.metric")]

    def raw_outputs(self, tool: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM raw_outputs WHERE tool=? AND repetition > 0 ORDER BY scenario_id,"
                               " repetition", (tool,)).fetchall()

    def raw_output(self, scenario_id: str, repetition: int, tool: str) -> str | None:
        row = self.db.execute("SELECT output FROM raw_outputs WHERE scenario_id=? AND repetition=? AND tool=?",
                              (scenario_id, repetition, tool)).fetchone()
        return row[0] if row else None

    def pair_values(self) -> list[tuple[str, int, str, dict[str, float]]]:
        """Each mesh pair's own values in the valid repetitions (their raw output `pairs`, by mesh_run):
        (scenario, repetition, pair "a->b", metric -> value), in order."""
        rows = self.db.execute(
            "SELECT o.scenario_id, o.repetition, o.output FROM raw_outputs o JOIN scenarios sc ON sc.id = o.scenario_id"
            " JOIN repetitions r ON r.scenario_id = o.scenario_id AND r.repetition = o.repetition"
            f" WHERE o.tool = 'pairs' AND {VALID} ORDER BY o.scenario_id, o.repetition").fetchall()
        return [(sid, rep, pair, values) for sid, rep, output in rows
                for pair, values in sorted(json.loads(output).items())]

    def attempts(self, scenario_id: str) -> list[str | None]:
        """Every repetition tried, in order: None for a valid one, else why it failed."""
        rows = self.db.execute("SELECT failure FROM repetitions WHERE scenario_id=? ORDER BY repetition", (scenario_id,))
        return [r[0] or None for r in rows]

    def done_repetitions(self, scenario_id: str) -> set[int]:
        """The repetitions that gave a valid sample."""
        rows = self.db.execute("SELECT repetition FROM repetitions WHERE scenario_id=? AND COALESCE(failure, '') = ''",
                               (scenario_id,))
        return {r[0] for r in rows}

    def last_round(self) -> int:
        row = self.db.execute("SELECT COALESCE(MAX(round), 0) FROM repetitions").fetchone()
        return row[0]

    def status(self, scenario_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM scenarios WHERE id=?", (scenario_id,)).fetchone()
        return row[0] if row else None

    def failure(self, scenario_id: str) -> str | None:
        row = self.db.execute("SELECT failure FROM scenarios WHERE id=?", (scenario_id,)).fetchone()
        return row[0] if row else None

    def values(self, scenario_id: str, metric: str) -> list[float]:
        """A metric's values over the measured repetitions of a scenario."""
        rows = self.db.execute("SELECT s.value FROM samples s JOIN repetitions r ON r.scenario_id = s.scenario_id"
                               " AND r.repetition = s.repetition WHERE s.scenario_id=? AND s.metric=?"
                               " AND COALESCE(r.failure, '') = '' ORDER BY s.repetition", (scenario_id, metric))
        return [r[0] for r in rows]

    def values_by_round(self, scenario_id: str, metric: str) -> dict[int, float]:
        """A metric's values over the valid repetitions of a scenario, by the round each ran in."""
        rows = self.db.execute("SELECT r.round, s.value FROM samples s JOIN repetitions r ON r.scenario_id ="
                               " s.scenario_id AND r.repetition = s.repetition WHERE s.scenario_id=? AND s.metric=?"
                               " AND COALESCE(r.failure, '') = '' AND r.round IS NOT NULL", (scenario_id, metric))
        return {r[0]: r[1] for r in rows}

    def completed(self, run_id: int, scenario_ids) -> list[tuple[str, int, str]]:
        """(scenario, repetition, completed_at) of what this run completed for these scenarios."""
        marks = ",".join("?" * len(scenario_ids))
        return [tuple(r) for r in self.db.execute(
            f"SELECT scenario_id, repetition, completed_at FROM repetitions WHERE run_id=? AND scenario_id IN ({marks})"
            " ORDER BY completed_at", (run_id, *scenario_ids))]

    def completion_times(self) -> list[tuple[int, str, str]]:
        """(run, scenario, completed_at) of every repetition stored, valid or failed, in time order."""
        return [tuple(r) for r in self.db.execute(
            "SELECT run_id, scenario_id, completed_at FROM repetitions ORDER BY completed_at")]


class ReadOnlyStore(Reading):
    """A connection that only reads the store at `path` through a read-only SQLite `uri`: no schema
    created, none migrated (results_dir.read_store checks the file first)."""

    def __init__(self, path: Path, uri: str):
        self.path = path
        self.db = sqlite3.connect(uri, uri=True, factory=_Connection)
        self.db.path = Path(path)
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()


class Stored:
    """A store read once, for everything that analyses it: its runs, scenarios, repetitions, every
    sample and the raw output of the tools asked for, each table in one query; then the same reading
    queries as a store's that analysing uses, answered from memory. `tools`: whose raw output to read."""

    def __init__(self, store: Reading, tools: set[str]):
        self.path = store.path
        self._runs = store.runs()
        self._scenarios = store.scenarios()
        self._samples = store.samples(valid_only=False)
        self._repetitions = store.db.execute("SELECT scenario_id, repetition, COALESCE(failure, '') AS failure"
                                             " FROM repetitions ORDER BY scenario_id, repetition").fetchall()
        marks = ",".join("?" * len(tools))
        self._raw = store.db.execute(f"SELECT * FROM raw_outputs WHERE tool IN ({marks}) ORDER BY scenario_id,"
                                     " repetition", sorted(tools)).fetchall()
        self.tools = set(tools)
        failed = {s.id for s in self._scenarios if s.status == "failed"}
        self._valid = {(r["scenario_id"], r["repetition"]) for r in self._repetitions
                       if not r["failure"] and r["scenario_id"] not in failed}
        self._valid_samples = [s for s in self._samples if not s.failure and s.scenario_id not in failed]
        self._derived: dict = {}

    def runs(self) -> list[sqlite3.Row]:
        return self._runs

    def study(self) -> StoredStudy:
        return self.derived("study", lambda: of_runs(self._runs))

    def scenarios(self) -> list[ScenarioRow]:
        return self._scenarios

    def samples(self, valid_only: bool = True) -> list[SampleRow]:
        return self._valid_samples if valid_only else self._samples

    def raw_outputs(self, tool: str) -> list[sqlite3.Row]:
        return [row for row in self._raw_of(tool) if row["repetition"] > 0]

    def raw_output(self, scenario_id: str, repetition: int, tool: str) -> str | None:
        return next((row["output"] for row in self._raw_of(tool)
                     if (row["scenario_id"], row["repetition"]) == (scenario_id, repetition)), None)

    def pair_values(self) -> list[tuple[str, int, str, dict[str, float]]]:
        return [(row["scenario_id"], row["repetition"], pair, values) for row in self._raw_of("pairs")
                if (row["scenario_id"], row["repetition"]) in self._valid
                for pair, values in sorted(json.loads(row["output"]).items())]

    def attempts(self, scenario_id: str) -> list[str | None]:
        return [r["failure"] or None for r in self._repetitions if r["scenario_id"] == scenario_id]

    def derived(self, key, make: Callable[[], T]) -> T:
        """What `make` derives from what was read, made the first time `key` is asked for and kept:
        nothing read changes, so neither does it."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def _raw_of(self, tool: str) -> list[sqlite3.Row]:
        if tool not in self.tools:
            raise KeyError(f"the raw output of {tool} was not read from {self.path}")
        return [row for row in self._raw if row["tool"] == tool]

