"""Merging a VM guest's results: the store a guest continues from (hand_over), and what it measured
taken back in (merge), idempotently, nothing measured dropped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .database import SETUP_REPETITION


class Merging:
    """A store's exchange with a VM guest's store (`self.db`: the Store's connection; `_note` its
    Recording's)."""

    def hand_over(self, target: Path, scenario_ids: list[str]) -> None:
        """A new store at `target` holding these scenarios with everything measured for them (and
        the runs it came from): what a VM guest continues from, so that a resumed study's guest
        knows which repetitions exist and how many more its rule wants."""
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        type(self)(target, journal="DELETE").close()  # the guest's shared folder (9p) has no shared memory for WAL
        marks = ",".join("?" * len(scenario_ids))
        self.db.execute("ATTACH DATABASE ? AS guest", (str(target),))
        try:
            with self.db:
                for table, key in (("runs", None), ("scenarios", "id"), ("repetitions", "scenario_id"),
                                   ("samples", "scenario_id"), ("raw_outputs", "scenario_id")):
                    columns = ", ".join(r[1] for r in self.db.execute(f"PRAGMA guest.table_info({table})"))
                    where = f" WHERE {key} IN ({marks})" if key else ""
                    self.db.execute(f"INSERT INTO guest.{table} ({columns}) SELECT {columns} FROM main.{table}{where}",
                                    scenario_ids if key else ())
        finally:
            self.db.execute("DETACH DATABASE guest")

    def merge(self, other: Path, run_id: int, note: str) -> list[str]:
        """Take in what another store (a VM guest's) measured for scenarios this one planned:
        repetitions with their samples and raw output, status, notes. Idempotent, so a store left
        by an interrupted run can be merged again. Returns the scenario ids it touched."""
        src = sqlite3.connect(f"file:{other}?mode=ro", uri=True)
        src.row_factory = sqlite3.Row
        touched = []
        try:
            if not src.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='scenarios'").fetchone():
                return touched  # a guest stopped before its store had its tables (an empty file): nothing measured
            with self.db:
                for sc in src.execute("SELECT * FROM scenarios WHERE status != 'pending'"):
                    if not self.db.execute("SELECT 1 FROM scenarios WHERE id=?", (sc["id"],)).fetchone():
                        continue
                    touched.append(sc["id"])
                    as_run = sc["as_run"] if "as_run" in sc.keys() else ""  # (a guest store before schema 5)
                    self.db.execute("UPDATE scenarios SET status=?, failure=?, implementation=?, ci_target_met=?,"
                                    " as_run=COALESCE(NULLIF(?, ''), as_run) WHERE id=?",
                                    (sc["status"], sc["failure"], sc["implementation"], sc["ci_target_met"], as_run,
                                     sc["id"]))
                    for text in filter(None, [note, *sc["notes"].split("; ")]):
                        self._note(sc["id"], text)
                    self._merge_repetitions(src, sc["id"], run_id)
        finally:
            src.close()
        return touched

    def _merge_repetitions(self, src: sqlite3.Connection, scenario_id: str, run_id: int) -> None:
        """A repetition this store has (the same completion time) is skipped; one whose number
        another measurement holds here (a guest that did not know it) gets the next free number,
        its samples and raw output with it: nothing measured is dropped."""
        for rep in src.execute("SELECT * FROM repetitions WHERE scenario_id=? ORDER BY repetition", (scenario_id,)):
            if self.db.execute("SELECT 1 FROM repetitions WHERE scenario_id=? AND completed_at=?",
                               (scenario_id, rep["completed_at"])).fetchone():
                continue
            taken = self.db.execute("SELECT 1 FROM repetitions WHERE scenario_id=? AND repetition=?",
                                    (scenario_id, rep["repetition"])).fetchone()
            number = rep["repetition"] if not taken else self.db.execute(
                "SELECT MAX(repetition) + 1 FROM repetitions WHERE scenario_id=?", (scenario_id,)).fetchone()[0]
            self.db.execute("INSERT INTO repetitions (scenario_id, repetition, run_id, completed_at, flags, round,"
                            " position, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (scenario_id, number, run_id, rep["completed_at"], rep["flags"], rep["round"],
                             rep["position"], rep["failure"]))
            self._copy_rows(src, "samples", scenario_id, rep["repetition"], number)
            self._copy_rows(src, "raw_outputs", scenario_id, rep["repetition"], number)
        for table in ("samples", "raw_outputs"):
            self._copy_rows(src, table, scenario_id, SETUP_REPETITION, SETUP_REPETITION)

    def _copy_rows(self, src: sqlite3.Connection, table: str, scenario_id: str, repetition: int, number: int) -> None:
        rows = [(scenario_id, number, *tuple(r)[2:]) for r in src.execute(
            f"SELECT * FROM {table} WHERE scenario_id=? AND repetition=?", (scenario_id, repetition))]
        if rows:
            self.db.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)
