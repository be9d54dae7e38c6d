"""The store's file: its schema and upgrades, its read-only URI, and the connection that turns a full
disk into DiskFull naming the store (checking.py checks that a file is an intact store)."""

from __future__ import annotations

import atexit
import datetime as dt
import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from ..core.errors import VpnlabError

SCHEMA_VERSION = 6
READABLE_SINCE = 5   # results_dir.read_store reads these as they are (what was added since is derived)
DB_NAME = "results.sqlite"
RESERVE_NAME = ".vpnlab-reserve"   # beside the store while a run writes: room to mark it interrupted
RESERVE_BYTES = 128 * 1024
LOW_SPACE_BYTES = 1024 * 1024      # below this a run does not start, nor stores a failed repetition

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    vpnlab_version TEXT NOT NULL,
    kernel TEXT NOT NULL,
    hostname TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    tool_versions TEXT NOT NULL,
    study_name TEXT NOT NULL,
    study_text TEXT NOT NULL,
    hosts TEXT NOT NULL DEFAULT '{}'  -- JSON: each machine measured on (this one, or real hosts): CPU, NIC ...
);
CREATE TABLE IF NOT EXISTS scenarios (
    id TEXT PRIMARY KEY,
    idx INTEGER NOT NULL,
    label TEXT NOT NULL,
    topology TEXT NOT NULL,
    vpn TEXT NOT NULL,
    vpn_label TEXT NOT NULL,
    vpn_options TEXT NOT NULL,
    implementation TEXT NOT NULL,
    link_label TEXT NOT NULL,
    link_rate_mbit REAL,
    link_delay_ms REAL NOT NULL,
    link_jitter_ms REAL NOT NULL,
    link_loss_pct REAL NOT NULL,
    workload TEXT NOT NULL,
    workload_label TEXT NOT NULL,
    workload_params TEXT NOT NULL,
    repetitions INTEGER NOT NULL,
    repetition_rule TEXT NOT NULL,
    ci_target_met INTEGER,
    status TEXT NOT NULL DEFAULT 'pending',
    failure TEXT,
    notes TEXT NOT NULL DEFAULT '',
    measured_in TEXT NOT NULL DEFAULT 'host',
    hosts TEXT NOT NULL DEFAULT '',   -- JSON: role -> inventory host, on real hosts; '' in namespaces here
    as_run TEXT NOT NULL DEFAULT '',  -- JSON: the link and workload as run (emulation scales them); '' unrecorded
    baseline INTEGER                  -- 1: the no-VPN baseline, as its driver said when it was added; NULL: unrecorded
);
CREATE TABLE IF NOT EXISTS repetitions (
    scenario_id TEXT NOT NULL REFERENCES scenarios(id),
    repetition INTEGER NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    completed_at TEXT NOT NULL,
    flags TEXT NOT NULL DEFAULT '',
    round INTEGER,                    -- the round (block) it ran in, and its place in that round's order
    position INTEGER,
    failure TEXT,                     -- why this repetition is not a valid sample (kept, never used)
    PRIMARY KEY (scenario_id, repetition)
);
CREATE TABLE IF NOT EXISTS samples (
    scenario_id TEXT NOT NULL REFERENCES scenarios(id),
    repetition INTEGER NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    measured_at TEXT NOT NULL,
    PRIMARY KEY (scenario_id, repetition, metric)
);
CREATE TABLE IF NOT EXISTS raw_outputs (
    scenario_id TEXT NOT NULL REFERENCES scenarios(id),
    repetition INTEGER NOT NULL,
    tool TEXT NOT NULL,
    output TEXT NOT NULL,
    PRIMARY KEY (scenario_id, repetition, tool)
);
"""

# schema version -> what brings a store of that version to the next one
UPGRADES = {
    1: ["ALTER TABLE scenarios ADD COLUMN measured_in TEXT NOT NULL DEFAULT 'host'"],  # before the VM backend
    2: [f"ALTER TABLE repetitions ADD COLUMN {column}" for column in ("round INTEGER", "position INTEGER",
                                                                        "failure TEXT")],  # before rounds
    3: ["ALTER TABLE scenarios ADD COLUMN hosts TEXT NOT NULL DEFAULT ''",  # before real hosts
        "ALTER TABLE runs ADD COLUMN hosts TEXT NOT NULL DEFAULT '{}'"],
    4: ["ALTER TABLE scenarios ADD COLUMN as_run TEXT NOT NULL DEFAULT ''"],  # before the as-run record
    5: ["ALTER TABLE scenarios ADD COLUMN baseline INTEGER"],  # before the baseline was stored
}
SETUP_REPETITION = 0  # scenario-level samples of stores before rounds (tunnel set-up) used repetition 0
BASELINE_VPN = "none"  # the `vpn` column of a scenario without a tunnel layer (the baseline's)
VALID = "COALESCE(r.failure, '') = '' AND sc.status != 'failed'"  # samples every statistic may use


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class DiskFull(OSError):
    """The disk holding the results is full: what was committed is intact, `--resume` finishes.
    `stopped`: a run was under way (and is marked interrupted); else nothing was started."""

    def __init__(self, path: Path, detail: str = "", stopped: bool = True):
        super().__init__(errno.ENOSPC, detail or os.strerror(errno.ENOSPC), str(path))
        self.stopped = stopped


def free_bytes(path: Path) -> int:
    """Space this process may still write on the filesystem holding `path` (or its nearest
    existing ancestor)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


TABLES = {"meta", "runs", "scenarios", "repetitions", "samples", "raw_outputs"}


class StoreError(VpnlabError, ValueError):
    """A file that is not a vpnlab results store this vpnlab can read: not SQLite, SQLite without
    vpnlab's tables, a newer schema, or damaged. (A ValueError too, as the schema check was.)"""


def read_only_uri(path: Path) -> str:
    """A URI that opens the store without writing: immutable (not even a lock or a -shm file) when
    no journal or write-ahead log lies beside it, else read-only, so a WAL a crash left is read."""
    path = _readable(path)
    beside = any(path.with_name(path.name + suffix).exists() for suffix in ("-wal", "-journal"))
    return f"file:{quote(str(path.resolve()))}?mode=ro" + ("" if beside else "&immutable=1")


_COPIES: dict[tuple, Path] = {}


def _readable(path: Path) -> Path:
    """The store, or where it can be read: SQLite reads a write-ahead log only beside its -shm index,
    which it cannot create on a read-only filesystem; the store and its log are then read from a
    private copy (made once per process, removed at exit), the original left as it is."""
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    if not wal.exists() or shm.exists() or os.access(path.parent, os.W_OK):
        return path
    key = (str(path.resolve()), path.stat().st_mtime_ns, wal.stat().st_mtime_ns)
    if key not in _COPIES:
        folder = Path(tempfile.mkdtemp(prefix="vpnlab-read-"))
        atexit.register(shutil.rmtree, folder, True)
        for source in (path, wal):
            shutil.copyfile(source, folder / source.name)
        _COPIES[key] = folder / path.name
    return _COPIES[key]


class _Connection(sqlite3.Connection):
    """The store's connection: SQLite's "database or disk is full" comes out as DiskFull naming
    the store, whichever statement or commit met it (the transaction is rolled back)."""

    path: Path
    full = False  # set once the disk was found full

    def _translate(self, exc: sqlite3.Error) -> BaseException:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_FULL or (code == sqlite3.SQLITE_IOERR and free_bytes(self.path) < RESERVE_BYTES):
            self.full = True
            return DiskFull(self.path)
        return exc

    def execute(self, *args):
        try:
            return super().execute(*args)
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from exc

    def executemany(self, *args):
        try:
            return super().executemany(*args)
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from exc

    def executescript(self, *args):
        try:
            return super().executescript(*args)
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from exc

    def __exit__(self, *exc_info):
        try:
            return super().__exit__(*exc_info)
        except sqlite3.OperationalError as exc:  # the commit
            raise self._translate(exc) from exc

