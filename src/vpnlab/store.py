"""The results store: one SQLite file per results directory.

Every repetition's samples, raw tool output and completion mark are committed
in one transaction the moment they are measured, so a killed run loses at most
the repetition in flight and `--resume` knows exactly what is left to do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .metrics import unit

SCHEMA_VERSION = 3
DB_NAME = "results.sqlite"

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
    study_text TEXT NOT NULL
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
    measured_in TEXT NOT NULL DEFAULT 'host'
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
}
SETUP_REPETITION = 0  # scenario-level samples of stores before rounds (tunnel set-up) used repetition 0
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
        from .drivers import REGISTRY as DRIVERS

        driver = DRIVERS.get(self.config["driver"])
        return bool(driver and driver.baseline and "inner" not in self.config)

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


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class Store:
    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.row_factory = sqlite3.Row
        # WAL needs shared memory, which a VM guest's 9p share does not give: the guest asks for DELETE.
        self.db.execute(f"PRAGMA journal_mode={os.environ.get('VPNLAB_STORE_JOURNAL', 'WAL')}")
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

    def close(self) -> None:
        self.db.close()

    # -- writing -----------------------------------------------------------
    def start_run(self, *, version: str, kernel: str, hostname: str, capabilities: dict,
                  tool_versions: dict, study_name: str, study_text: str) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (started_at, status, vpnlab_version, kernel, hostname, capabilities,"
                " tool_versions, study_name, study_text) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (now(), version, kernel, hostname, json.dumps(capabilities), json.dumps(tool_versions),
                 study_name, study_text),
            )
        return cur.lastrowid

    def finish_run(self, run_id: int, status: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (now(), status, run_id))

    def add_scenario(self, scenario, measured_in: str = "host") -> None:
        """Record a planned scenario and where it is measured ("host" or "vm"); a resumed run
        keeps the row and its status."""
        link, workload = scenario.link, scenario.workload
        with self.db:
            self.db.execute(
                "INSERT INTO scenarios (id, idx, label, topology, vpn, vpn_label, vpn_options, implementation,"
                " link_label, link_rate_mbit, link_delay_ms, link_jitter_ms, link_loss_pct, workload,"
                " workload_label, workload_params, repetitions, repetition_rule, measured_in)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET idx=excluded.idx, implementation=excluded.implementation,"
                " measured_in=excluded.measured_in",
                (scenario.id, scenario.index, scenario.label, scenario.topology, _vpn_name(scenario.vpn),
                 scenario.vpn_label, json.dumps(scenario.vpn.as_dict(), sort_keys=True),
                 "+".join(scenario.implementations) or "none", link.label, link.rate_mbit, link.delay_ms,
                 link.jitter_ms, link.loss_pct, workload.kind, workload.label,
                 json.dumps(workload.model_dump(mode="json"), sort_keys=True), scenario.repetitions.max,
                 scenario.repetitions.describe(), measured_in),
            )

    def add_note(self, scenario_id: str, note: str) -> None:
        """Something a reader of the results must know (a model mismatch, a suspect figure)."""
        with self.db:
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

    def set_status(self, scenario_id: str, status: str, failure: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET status=?, failure=? WHERE id=?", (status, failure, scenario_id))

    def record_repetition(self, run_id: int, scenario_id: str, repetition: int, values: dict[str, float],
                          raw: dict[str, str], flags: list[str], round_: int | None = None,
                          position: int | None = None, failure: str | None = None) -> None:
        """Samples (with their units from the metric registry), raw output and the completion mark
        of one repetition, atomically."""
        stamp = now()
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                [(scenario_id, repetition, m, float(v), unit(m), stamp) for m, v in values.items()],
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
                    self.db.execute("UPDATE scenarios SET status=?, failure=?, implementation=?, ci_target_met=?"
                                    " WHERE id=?", (sc["status"], sc["failure"], sc["implementation"],
                                                    sc["ci_target_met"], sc["id"]))
                    for text in filter(None, [note, *sc["notes"].split("; ")]):
                        self.db.execute("UPDATE scenarios SET notes = CASE WHEN notes = '' THEN ? ELSE notes || '; ' || ?"
                                        " END WHERE id=? AND instr(notes, ?) = 0", (text, text, sc["id"], text))
                    for rep in src.execute("SELECT * FROM repetitions WHERE scenario_id=?", (sc["id"],)):
                        self.db.execute("INSERT OR IGNORE INTO repetitions (scenario_id, repetition, run_id,"
                                        " completed_at, flags, round, position, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                        (rep["scenario_id"], rep["repetition"], run_id, rep["completed_at"],
                                         rep["flags"], rep["round"], rep["position"], rep["failure"]))
                    self.db.executemany("INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                                        [tuple(r) for r in src.execute("SELECT * FROM samples WHERE scenario_id=?",
                                                                        (sc["id"],))])
                    self.db.executemany("INSERT OR IGNORE INTO raw_outputs VALUES (?, ?, ?, ?)",
                                        [tuple(r) for r in src.execute("SELECT * FROM raw_outputs WHERE scenario_id=?",
                                                                        (sc["id"],))])
        finally:
            src.close()
        return touched

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

    def has_sample(self, scenario_id: str, repetition: int, metric: str) -> bool:
        row = self.db.execute("SELECT 1 FROM samples WHERE scenario_id=? AND repetition=? AND metric=?",
                              (scenario_id, repetition, metric)).fetchone()
        return row is not None

    def runs(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()

    def scenarios(self) -> list[ScenarioRow]:
        return [ScenarioRow(**dict(r)) for r in self.db.execute("SELECT * FROM scenarios ORDER BY idx")]

    def samples(self, valid_only: bool = True) -> list[SampleRow]:
        """Samples with their repetition's flags, round and failure. Valid only (the default):
        not of a failed repetition nor of a failed scenario, as every statistic needs."""
        where = f"WHERE {VALID}" if valid_only else ""
        return [SampleRow(**dict(r)) for r in self.db.execute(
            "SELECT s.*, COALESCE(r.flags, '') AS flags, r.round AS round, COALESCE(r.failure, '') AS failure"
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


def _vpn_name(vpn) -> str:
    """'wireguard', or 'openvpn-in-strongswan' for nested tunnels (inner first, as people say it)."""
    layers = vpn.layers
    return "-in-".join(layer.driver for layer in reversed(layers)) if layers else "none"
