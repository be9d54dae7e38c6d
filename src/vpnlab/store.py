"""The results store: one SQLite file per results directory.

Every repetition's samples, raw tool output and completion mark are committed
in one transaction the moment they are measured, so a killed run loses at most
the repetition in flight and `--resume` knows exactly what is left to do.

A full disk stops the run without harm: SQLite rolls the transaction in flight back, the store
raises DiskFull (an OSError, ENOSPC, naming the file), and the run is marked interrupted with
the room a reserve file kept for that; what was committed stays intact for `--resume`. A value
that is not a finite number (a tool printing garbage) is stored as missing, with a flag on its
repetition, never as NaN.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import math
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .errors import VpnlabError

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


@dataclass(frozen=True)
class ScenarioRow:
    """A stored scenario, its JSON columns parsed once for everything downstream."""

    id: str
    idx: int
    label: str
    topology: str
    vpn: str                 # driver name(s), inner first: 'openvpn-in-strongswan'
    vpn_label: str
    vpn_options: str         # the configuration as stored (JSON), exported as is
    implementation: str
    link_label: str
    link_rate_mbit: float | None
    link_delay_ms: float
    link_jitter_ms: float
    link_loss_pct: float
    workload: str            # the kind
    workload_label: str
    workload_params: str     # JSON, exported as is
    repetitions: int
    repetition_rule: str
    ci_target_met: int | None
    status: str
    failure: str | None
    notes: str
    measured_in: str
    hosts: str = ""          # JSON role -> inventory host (real hosts), else ''
    as_run: str = ""         # JSON {"link": {rate_mbit, delay_ms, jitter_ms, loss_pct}, "workload": {...}}; '' unrecorded
    baseline: int | None = None  # 1: the no-VPN baseline; None: a store written before it was recorded

    @property
    def unfinished(self) -> bool:
        """Not measured to its repetition rule yet: a sitting was interrupted, or the VM guest stopped."""
        return self.status in ("pending", "running")

    @property
    def emulated(self) -> bool:
        """Measured in a VM under software emulation (TCG), or in a VM whose acceleration is not recorded:
        its CPU is the emulator's."""
        if self.measured_in != "vm":
            return False
        notes = self.notes.lower()
        return "kvm" not in notes or "software emulation" in notes or "tcg" in notes

    @property
    def host_roles(self) -> dict[str, str]:
        """Role -> inventory host it was measured on; empty for namespaces on the machine of the run."""
        return json.loads(self.hosts) if self.hosts else {}

    @property
    def config(self) -> dict:
        return json.loads(self.vpn_options)

    @property
    def params(self) -> dict:
        return json.loads(self.workload_params)

    @property
    def profile(self) -> str:
        return self.config["profile"]

    @property
    def is_baseline(self) -> bool:
        if self.baseline is not None:
            return bool(self.baseline)
        return self.vpn == BASELINE_VPN  # stored before the column: no tunnel layer

    @property
    def shown(self) -> str:
        """The VPN's label for people, saying when it was measured in the (slower) VM."""
        in_vm = self.measured_in == "vm" and not self.vpn_label.endswith("(in the VM)")
        return self.vpn_label + (" (in the VM)" if in_vm else "")


@dataclass(frozen=True)
class SampleRow:
    scenario_id: str
    repetition: int
    metric: str
    value: float
    unit: str
    measured_at: str
    flags: str
    round: int | None = None
    failure: str = ""
    position: int | None = None   # its place in the round's order


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


def check_store(path: Path) -> list[dict]:
    """Check, without writing anything, that `path` is an undamaged vpnlab results store this
    vpnlab can read; its runs (id, status, study_name, study_text), oldest first. Raises
    StoreError saying what is wrong otherwise."""
    return inspect_store(Path(path))[1]


def inspect_store(path: Path) -> tuple[int, list[dict]]:
    """check_store's work: the store's schema version and its runs."""
    # Only SQLite opens the file: closing any other descriptor of it would drop every POSIX lock
    # this process holds on it (a store it has open), and another process could then delete that
    # store's write-ahead log as abandoned, with what was committed since.
    if not os.access(path, os.R_OK):
        raise StoreError(f"{path}: cannot be read ({'no such file' if not path.exists() else 'permission denied'})")
    if not path.stat().st_size:
        raise StoreError(f"{path}: an empty file, not a vpnlab results store; left untouched")
    db = None
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True)
        problems = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreError(f"{path}: the results store is damaged ({'; '.join(problems)}); left untouched")
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not TABLES <= tables:
            raise StoreError(f"{path}: an SQLite database but not a vpnlab results store (it has no "
                             f"{', '.join(sorted(TABLES - tables))} table); left untouched")
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise StoreError(f"{path}: the results store is damaged (no schema version); left untouched") from None
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path}: results schema {version}, this vpnlab reads up to {SCHEMA_VERSION}: "
                             "use the vpnlab that wrote it (or a newer one); left untouched")
        return version, [dict(zip(("id", "status", "study_name", "study_text"), r))
                         for r in db.execute("SELECT id, status, study_name, study_text FROM runs ORDER BY id")]
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise StoreError(f"{path}: not a vpnlab results store (not an SQLite database); left untouched") from exc
        raise StoreError(f"{path}: the results store is damaged or unreadable ({exc}); left untouched") from exc
    finally:
        if db is not None:
            db.close()


def read_only_uri(path: Path) -> str:
    """A URI that opens the store without writing: immutable (not even a lock or a -shm file) when
    no journal or write-ahead log lies beside it, else read-only, so a WAL a crash left is read."""
    beside = any(path.with_name(path.name + suffix).exists() for suffix in ("-wal", "-journal"))
    return f"file:{quote(str(path.resolve()))}?mode=ro" + ("" if beside else "&immutable=1")


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


def _finite(values: dict, flags: list[str]) -> tuple[dict[str, float], list[str]]:
    """The values that are finite numbers; each other one is left out (missing) and flagged."""
    kept, flags = {}, list(flags)
    for metric, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if math.isfinite(number):
            kept[metric] = number
        else:
            flags.append(f"{metric} was {str(value)[:40].replace(';', ',')!r}, not a finite number: "
                         "stored as missing")
    return kept, flags


class Store:
    def __init__(self, path: Path, check: bool = True, journal: str | None = None):
        self.path = path
        if check and Path(path).is_file() and Path(path).stat().st_size:
            check_store(Path(path))  # read-only, before anything writes: refuses what is not an intact store
        self.db = sqlite3.connect(path, factory=_Connection)
        self.db.path = Path(path)
        self.db.row_factory = sqlite3.Row
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
                for step in range(int(version[0]), SCHEMA_VERSION):
                    for statement in UPGRADES[step]:
                        self.db.execute(statement)
                self.db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        elif int(version[0]) != SCHEMA_VERSION:
            raise ValueError(f"{path}: results schema {version[0]}, this vpnlab reads {SCHEMA_VERSION}")

    @classmethod
    def open_dir(cls, directory: Path) -> "Store":
        return cls(Path(directory) / DB_NAME)

    @classmethod
    def reading(cls, path: Path, uri: str) -> "Store":
        """A connection that only reads the store at `path` through a read-only SQLite `uri`: no
        schema created, none migrated (results_dir.read_store checks the file first)."""
        store = cls.__new__(cls)
        store.path = path
        store.db = sqlite3.connect(uri, uri=True, factory=_Connection)
        store.db.path = Path(path)
        store.db.row_factory = sqlite3.Row
        return store

    def another(self) -> "Store":
        """One more connection to this store, for another thread (it was checked when opened)."""
        return Store(self.path, check=False)

    def close(self) -> None:
        self.db.close()

    @property
    def _reserve(self) -> Path:
        return Path(self.path).with_name(RESERVE_NAME)

    # -- writing -----------------------------------------------------------
    def mark_killed_runs(self) -> None:
        """Runs still marked running were killed (SIGKILL, a power cut): the directory's lock says
        no other process writes here now."""
        with self.db:
            self.db.execute("UPDATE runs SET status='killed' WHERE status='running'")

    def start_run(self, *, version: str, kernel: str, hostname: str, capabilities: dict,
                  tool_versions: dict, study_name: str, study_text: str, hosts: dict | None = None) -> int:
        try:  # real blocks (zeros, not a hole): freed to mark the run interrupted if the disk fills
            self._reserve.write_bytes(bytes(RESERVE_BYTES))
        except OSError as exc:
            self._reserve.unlink(missing_ok=True)
            if exc.errno == errno.ENOSPC:
                raise DiskFull(self.path, stopped=False) from exc
            raise
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (started_at, status, vpnlab_version, kernel, hostname, capabilities,"
                " tool_versions, study_name, study_text, hosts) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
                (now(), version, kernel, hostname, json.dumps(capabilities), json.dumps(tool_versions),
                 study_name, study_text, json.dumps(hosts or {})),
            )
        return cur.lastrowid

    def finish_run(self, run_id: int, status: str) -> None:
        """Record how the run ended. A run that ends because the disk filled ("failed" to the
        runner) is interrupted: nothing is wrong with what it stored and `--resume` finishes it."""
        ending = sys.exc_info()[1]
        if status == "failed" and (self.db.full or (isinstance(ending, OSError) and ending.errno == errno.ENOSPC)):
            status = "interrupted"
        try:
            try:
                with self.db:
                    self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (now(), status, run_id))
            except DiskFull:
                self._reserve.unlink(missing_ok=True)  # the room kept for this
                with self.db:
                    self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (now(), status, run_id))
        finally:
            self._reserve.unlink(missing_ok=True)

    def add_scenario(self, scenario, measured_in: str = "host", hosts: dict | None = None) -> None:
        """Record a planned scenario and where it is measured ("host" or "vm"; on real hosts, `hosts`
        maps its roles to them); a resumed run keeps the row and its status."""
        link, workload = scenario.link, scenario.workload
        with self.db:
            self.db.execute(
                "INSERT INTO scenarios (id, idx, label, topology, vpn, vpn_label, vpn_options, implementation,"
                " link_label, link_rate_mbit, link_delay_ms, link_jitter_ms, link_loss_pct, workload,"
                " workload_label, workload_params, repetitions, repetition_rule, measured_in, hosts, baseline)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET idx=excluded.idx, implementation=excluded.implementation,"
                " measured_in=excluded.measured_in, hosts=excluded.hosts",
                (scenario.id, scenario.index, scenario.label, scenario.topology, _vpn_name(scenario.vpn),
                 scenario.vpn_label, json.dumps(scenario.vpn.as_dict(), sort_keys=True),
                 "+".join(scenario.implementations) or "none", link.label, link.rate_mbit, link.delay_ms,
                 link.jitter_ms, link.loss_pct, workload.kind, workload.full_label,
                 json.dumps(workload.model_dump(mode="json"), sort_keys=True), scenario.repetitions.max,
                 scenario.repetitions.describe(), measured_in, json.dumps(hosts) if hosts else "",
                 int(scenario.vpn.is_baseline)),
            )

    def record_as_run(self, scenario) -> None:
        """The link and workload a scenario runs with here (emulation scales them). A sitting that runs
        them otherwise than an earlier one did is noted: its samples are pooled with the earlier ones."""
        link = scenario.link_as_run
        as_run = json.dumps({"link": {"rate_mbit": link.rate_mbit, "delay_ms": link.delay_ms,
                                      "jitter_ms": link.jitter_ms, "loss_pct": link.loss_pct},
                             "workload": scenario.workload_as_run.model_dump(mode="json")}, sort_keys=True)
        with self.db:
            before = self.db.execute("SELECT as_run FROM scenarios WHERE id=?", (scenario.id,)).fetchone()[0]
            if before and before != as_run:
                self._note(scenario.id, f"run otherwise than by an earlier sitting (now {as_run}, then {before}): "
                                        "their samples are pooled")
            self.db.execute("UPDATE scenarios SET as_run=? WHERE id=?", (as_run, scenario.id))

    def add_note(self, scenario_id: str, note: str) -> None:
        """Something a reader of the results must know (a model mismatch, a suspect figure)."""
        with self.db:
            self._note(scenario_id, note)

    def _note(self, scenario_id: str, note: str) -> None:
        self.db.execute("UPDATE scenarios SET notes = CASE WHEN notes = '' THEN ? ELSE notes || '; ' || ? END"
                        " WHERE id=? AND instr(notes, ?) = 0", (note, note, scenario_id, note))

    def set_ci_target_met(self, scenario_id: str, met: bool) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET ci_target_met=? WHERE id=?", (int(met), scenario_id))

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

    def set_status(self, scenario_id: str, status: str, failure: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET status=?, failure=? WHERE id=?", (status, failure, scenario_id))

    def record_repetition(self, run_id: int, scenario_id: str, repetition: int, values: dict[str, float],
                          raw: dict[str, str], flags: list[str], round_: int | None = None,
                          position: int | None = None, failure: str | None = None,
                          units: dict[str, str] | None = None) -> None:
        """Samples (with their `units`, as the catalog gives them to the runner; '' without one), raw
        output and the completion mark of one repetition, atomically. A value that is not a finite number is stored as missing,
        with a flag. A failed repetition on a (nearly) full disk is not stored: the full disk may
        be why it failed, so the run stops (DiskFull) and `--resume` measures it again."""
        values, flags = _finite(values, flags)
        if failure and free_bytes(self.path) < LOW_SPACE_BYTES:
            self.db.full = True
            raise DiskFull(self.path, f"less than {LOW_SPACE_BYTES >> 20} MiB left on its disk, and a repetition "
                                      "failed (not stored: the full disk may be why)")
        stamp = now()
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                [(scenario_id, repetition, m, float(v), (units or {}).get(m, ""), stamp) for m, v in values.items()],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO raw_outputs VALUES (?, ?, ?, ?)",
                [(scenario_id, repetition, tool, text) for tool, text in raw.items()],
            )
            if repetition != SETUP_REPETITION:
                self.db.execute(
                    "INSERT OR REPLACE INTO repetitions (scenario_id, repetition, run_id, completed_at, flags, round,"
                    " position, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (scenario_id, repetition, run_id, stamp, ";".join(flags), round_, position, failure),
                )

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

    def add_flag(self, scenario_id: str, repetition: int, flag: str) -> None:
        with self.db:
            self.db.execute("UPDATE repetitions SET flags = CASE WHEN flags = '' THEN ? ELSE flags || ';' || ? END"
                            " WHERE scenario_id=? AND repetition=?", (flag, flag, scenario_id, repetition))

    def hand_over(self, target: Path, scenario_ids: list[str]) -> None:
        """A new store at `target` holding these scenarios with everything measured for them (and
        the runs it came from): what a VM guest continues from, so that a resumed study's guest
        knows which repetitions exist and how many more its rule wants."""
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Store(target, journal="DELETE").close()  # the guest's shared folder (9p) has no shared memory for WAL
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

    # -- reading -----------------------------------------------------------
    def done_repetitions(self, scenario_id: str) -> set[int]:
        """The repetitions that gave a valid sample."""
        rows = self.db.execute("SELECT repetition FROM repetitions WHERE scenario_id=? AND COALESCE(failure, '') = ''",
                               (scenario_id,))
        return {r[0] for r in rows}

    def attempts(self, scenario_id: str) -> list[str | None]:
        """Every repetition tried, in order: None for a valid one, else why it failed."""
        rows = self.db.execute("SELECT failure FROM repetitions WHERE scenario_id=? ORDER BY repetition", (scenario_id,))
        return [r[0] or None for r in rows]

    def last_round(self) -> int:
        row = self.db.execute("SELECT COALESCE(MAX(round), 0) FROM repetitions").fetchone()
        return row[0]

    def status(self, scenario_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM scenarios WHERE id=?", (scenario_id,)).fetchone()
        return row[0] if row else None

    def failure(self, scenario_id: str) -> str | None:
        row = self.db.execute("SELECT failure FROM scenarios WHERE id=?", (scenario_id,)).fetchone()
        return row[0] if row else None

    def runs(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()

    def scenarios(self) -> list[ScenarioRow]:
        return [ScenarioRow(**dict(r)) for r in self.db.execute("SELECT * FROM scenarios ORDER BY idx")]

    def samples(self, valid_only: bool = True) -> list[SampleRow]:
        """Samples with their repetition's flags, round and failure. Valid only (the default):
        not of a failed repetition nor of a failed scenario, as every statistic needs."""
        where = f"WHERE {VALID}" if valid_only else ""
        return [SampleRow(**dict(r)) for r in self.db.execute(
            "SELECT s.*, COALESCE(r.flags, '') AS flags, r.round AS round, COALESCE(r.failure, '') AS failure,"
            " r.position AS position"
            " FROM samples s JOIN scenarios sc ON sc.id = s.scenario_id LEFT JOIN repetitions r"
            f" ON r.scenario_id = s.scenario_id AND r.repetition = s.repetition {where}"
            " ORDER BY s.scenario_id, s.repetition, s.metric")]

    def raw_outputs(self, tool: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM raw_outputs WHERE tool=? AND repetition > 0 ORDER BY scenario_id,"
                               " repetition", (tool,)).fetchall()

    def pair_values(self) -> list[tuple[str, int, str, dict[str, float]]]:
        """Each mesh pair's own values in the valid repetitions (their raw output `pairs`, by mesh_run):
        (scenario, repetition, pair "a->b", metric -> value), in order."""
        rows = self.db.execute(
            "SELECT o.scenario_id, o.repetition, o.output FROM raw_outputs o JOIN scenarios sc ON sc.id = o.scenario_id"
            " JOIN repetitions r ON r.scenario_id = o.scenario_id AND r.repetition = o.repetition"
            f" WHERE o.tool = 'pairs' AND {VALID} ORDER BY o.scenario_id, o.repetition").fetchall()
        return [(sid, rep, pair, values) for sid, rep, output in rows
                for pair, values in sorted(json.loads(output).items())]

    def raw_output(self, scenario_id: str, repetition: int, tool: str) -> str | None:
        row = self.db.execute("SELECT output FROM raw_outputs WHERE scenario_id=? AND repetition=? AND tool=?",
                              (scenario_id, repetition, tool)).fetchone()
        return row[0] if row else None


def _vpn_name(vpn) -> str:
    """'wireguard', or 'openvpn-in-strongswan' for nested tunnels (inner first, as people say it)."""
    layers = vpn.layers
    return "-in-".join(layer.driver for layer in reversed(layers)) if layers else BASELINE_VPN
