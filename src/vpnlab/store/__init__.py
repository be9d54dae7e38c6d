"""The results store: one SQLite file per results directory, by job.

Every repetition's samples, raw tool output and completion mark are committed in one transaction
the moment they are measured, so a killed run loses at most the repetition in flight and
`--resume` knows exactly what is left to do.

- database.py: the file, its schema and upgrades, the connection (DiskFull)
- checking.py: the read-only check that a file is an intact store, its tables and every value
- rows.py: a stored scenario and sample, as everything downstream reads them
- recording.py: what a run writes, as it measures
- merging.py: a VM guest's store, handed over and merged back
- reading.py: the queries; ReadOnlyStore, which has nothing else; Stored, a store read once to analyse
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .database import (BASELINE_VPN, DB_NAME, LOW_SPACE_BYTES, READABLE_SINCE, RESERVE_BYTES, RESERVE_NAME,
                       SCHEMA, SCHEMA_VERSION, SETUP_REPETITION, UPGRADES, VALID, DiskFull, StoreError, _Connection,
                       free_bytes, now, read_only_uri)
from .checking import check_store, inspect_store
from .merging import Merging
from .reading import ReadOnlyStore, Reading, Stored
from .recording import Recording
from .rows import SampleRow, ScenarioRow


class Store(Recording, Merging, Reading):
    """A store opened to write (created, or migrated to this schema, when opened)."""

    def __init__(self, path: Path, check: bool = True, journal: str | None = None):
        self.path = path
        if check and Path(path).is_file() and Path(path).stat().st_size:
            check_store(Path(path))  # read-only, before anything writes: refuses what is not an intact store
        self.db = sqlite3.connect(path, factory=_Connection)
        self.db.path = Path(path)
        self.db.row_factory = sqlite3.Row
        try:
            self._prepare(journal)
        except BaseException:
            self.db.close()  # nothing left open (nor a -wal beside the store) by an opening that failed
            raise

    def _prepare(self, journal: str | None) -> None:
        """The connection's settings, and the store created or migrated to this schema."""
        # WAL needs shared memory, which a VM guest's 9p share does not give: the guest asks for DELETE.
        self.db.execute(f"PRAGMA journal_mode={journal or os.environ.get('VPNLAB_STORE_JOURNAL', 'WAL')}")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)
        version = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if version is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(version[0]) in UPGRADES:
            with self.db:
                self.db.execute("BEGIN")  # ALTER TABLE begins no transaction itself: the steps all or none
                for step in range(int(version[0]), SCHEMA_VERSION):
                    for statement in UPGRADES[step]:
                        self.db.execute(statement)
                self.db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        elif int(version[0]) != SCHEMA_VERSION:
            raise ValueError(f"{self.path}: results schema {version[0]}, this vpnlab reads {SCHEMA_VERSION}")

    @classmethod
    def open_dir(cls, directory: Path) -> "Store":
        return cls(Path(directory) / DB_NAME)

    def another(self) -> "Store":
        """One more connection to this store, for another thread (it was checked when opened)."""
        return Store(self.path, check=False)

    def close(self) -> None:
        self.db.close()


__all__ = ["BASELINE_VPN", "DB_NAME", "LOW_SPACE_BYTES", "READABLE_SINCE", "RESERVE_BYTES", "RESERVE_NAME", "SCHEMA",
           "SCHEMA_VERSION", "SETUP_REPETITION", "UPGRADES", "VALID", "DiskFull", "ReadOnlyStore", "SampleRow",
           "ScenarioRow", "Store", "StoreError", "Stored", "check_store", "free_bytes", "inspect_store", "now", "read_only_uri"]
