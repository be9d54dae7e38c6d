"""A store is checked by what it holds, not only by its tables: a value of the wrong type, JSON or a
study that does not parse, a time that is no time, or a schema version that lies is refused with
`damaged: <table>.<column> row N: <why>` (exit 2), the store left byte for byte as it was."""

import fcntl
import hashlib
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vpnlab.cli import app
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import parse_study
from vpnlab.store import SCHEMA_VERSION, UPGRADES, Store, StoreError, check_store, results_dir
from vpnlab.store.results_dir import LOCK_NAME

STUDY = """
name: tiny
repetitions: 3
vpns: [{driver: none}]
links: [{rate_mbit: 100}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""
RUN = ("--no-progress", "--backend", "netns")
COMMANDS = {
    "show": lambda d: ["show", d],
    "report": lambda d: ["report", d],
    "export": lambda d: ["export", d, "--format", "json"],
    "stats": lambda d: ["stats", d],
    "compare": lambda d: ["compare", d, d],
    "verdicts": lambda d: ["verdicts", d],
    "resume": lambda d: ["run", "--resume", d, *RUN],
}

# table, column, the value written over one row's, and which rows may be chosen
DAMAGE = {
    "number as text 'NaN'": ("samples", "value", "NaN", ""),
    "number as text 'fast'": ("samples", "value", "fast", ""),
    "number as a blob": ("samples", "value", b"\x00\xff", ""),
    "number missing (NULL)": ("samples", "value", None, ""),
    "whole number as text": ("scenarios", "repetitions", "many", ""),
    "text as a blob": ("scenarios", "label", b"\x01", ""),
    "vpn_options not JSON": ("scenarios", "vpn_options", "{driver: none", ""),
    "workload_params not an object": ("scenarios", "workload_params", "[1, 2]", ""),
    "scenario hosts not JSON": ("scenarios", "hosts", "client=h1", ""),
    "as_run not JSON": ("scenarios", "as_run", '{"link": ', ""),
    "run hosts not JSON": ("runs", "hosts", "{'a': 1}", ""),
    "tool_versions not JSON": ("runs", "tool_versions", "iperf3 3.12", ""),
    "capabilities not JSON": ("runs", "capabilities", "", ""),
    "raw cpu record not JSON": ("raw_outputs", "output", "ticks, pinned", "tool = 'cpu'"),
    "study not YAML": ("runs", "study_text", "name: [tiny", ""),
    "study with a python tag": ("runs", "study_text", "!!python/object/apply:os.system ['true']", ""),
    "study not a mapping": ("runs", "study_text", "- a list", ""),
    "start time garbage": ("runs", "started_at", "yesterday", ""),
    "end time garbage": ("runs", "finished_at", "2026-13-45T00:00:00", ""),
    "completion time garbage": ("repetitions", "completed_at", "12345", ""),
    "sample time garbage": ("samples", "measured_at", "soon", ""),
}


def make_store(directory: Path) -> Path:
    """A results directory as an interrupted run of STUDY leaves it (two of three repetitions)."""
    directory.mkdir(parents=True)
    scenario = make_plan(parse_study(STUDY)).scenarios[0]
    store = Store.open_dir(directory)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="tiny", study_text=STUDY)
    store.add_scenario(scenario)
    store.record_as_run(scenario)
    for rep in (1, 2):
        store.record_repetition(run, scenario.id, rep, {"throughput_mbps": 90.0 + rep, "retransmits": 0.0},
                                {"cpu": json.dumps({"method": "ticks", "ends": []})}, [])
    store.finish_run(run, "interrupted")
    store.close()
    return directory / "results.sqlite"


def loosen(path: Path, table: str, column: str) -> None:
    """The store as a tool other than vpnlab might have written it: `column` without NOT NULL."""
    db = sqlite3.connect(path)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
    kind = next(line.split()[1] for line in sql.splitlines() if line.strip().startswith(column + " "))
    db.execute("PRAGMA writable_schema=ON")
    db.execute("UPDATE sqlite_master SET sql=? WHERE name=?",
               (sql.replace(f"{column} {kind} NOT NULL", f"{column} {kind}"), table))
    db.commit()
    db.close()


def damage(path: Path, table: str, column: str, value, where: str) -> int:
    """`value` written over `column` of the last row of `table` (that `where` allows); its rowid."""
    if value is None:
        loosen(path, table, column)
    db = sqlite3.connect(path)
    rowid = db.execute(f"SELECT max(rowid) FROM {table} WHERE {where or 1}").fetchone()[0]
    db.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")  # the file alone is the store: nothing beside it to change
    db.close()
    return rowid


def tree(directory: Path) -> dict[str, str]:
    """Every file below `directory` and the hash of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def invoke(*args):
    """The command line in this process (a new one per command would take a second and more each);
    the signal handlers vpnlab installs are put back afterwards."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return CliRunner().invoke(app, [str(a) for a in args])
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)


def vpnlab(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vpnlab", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def refused(code: int, stderr: str, *says) -> None:
    assert "Traceback" not in stderr and "failed on a bug" not in stderr, stderr
    assert code == 2, stderr
    message = " ".join(stderr.split())  # whatever the console's width
    for text in says:
        assert " ".join(str(text).split()) in message, f"{text!r} not in\n{stderr}"


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_value_is_refused_by_every_reader_and_left_untouched(tmp_path, kind):
    table, column, value, where = DAMAGE[kind]
    directory = tmp_path / "results"
    path = make_store(directory)
    row = damage(path, table, column, value, where)
    said = f"damaged: {table}.{column} row {row}:"
    before = tree(directory)
    with pytest.raises(StoreError, match=re.escape(f"{path}: {said}")):
        check_store(path)
    for name, command in COMMANDS.items():
        result = invoke(*command(directory))
        refused(result.exit_code, result.stderr, path, said)
        assert tree(directory) == before, name  # no run row added, no report, no -wal beside it
    # the real program, in a process of its own, one command a kind in turn
    name = list(COMMANDS)[list(DAMAGE).index(kind) % len(COMMANDS)]
    proc = vpnlab(*COMMANDS[name](directory))
    refused(proc.returncode, proc.stderr, path, said)
    assert tree(directory) == before, name


def test_an_undamaged_store_is_read(tmp_path):
    """The checks refuse only damage: the store they were made on reads as before."""
    directory = tmp_path / "results"
    path = make_store(directory)
    # JSON as Python writes it, with NaN, which SQLite's strict JSON does not read
    damage(path, "raw_outputs", "output", json.dumps({"method": "ticks", "ends": [], "share": math.nan}), "tool = 'cpu'")
    assert [run["status"] for run in check_store(path)] == ["interrupted"]
    for name in ("show", "export", "stats"):
        result = invoke(*COMMANDS[name](directory))
        assert result.exit_code == 0, (name, result.output)


def lie(path: Path, version: str) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (version,))
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()


LIES = {  # the schema version written over a current store's, and what the refusal says
    "1": "results schema 1 claimed, but its tables are those of schema 6",
    "5": "results schema 5 claimed, but its tables are those of schema 6",
    "-1": "results schema -1, which no vpnlab writes",
    "x": "the results schema 'x' is not a number",
}


@pytest.mark.parametrize("version", LIES)
def test_upgrade_refuses_a_schema_version_that_lies_and_leaves_nothing(tmp_path, version):
    directory = tmp_path / "results"
    path = make_store(directory)
    lie(path, version)
    before = tree(directory)
    for _ in range(2):  # a second try leaves no more than the first
        proc = vpnlab("upgrade", directory)
        refused(proc.returncode, proc.stderr, path, "damaged: meta.value row 1:", LIES[version])
        assert tree(directory) == before  # no .bak, no .vpnlab-lock, the store as it was
    result = invoke("show", directory)
    refused(result.exit_code, result.stderr, "damaged: meta.value row 1:", LIES[version])


def test_upgrade_of_a_current_store_changes_nothing_and_leaves_no_lock(tmp_path):
    directory = tmp_path / "results"
    make_store(directory)
    before = tree(directory)
    result = invoke("upgrade", directory)
    assert result.exit_code == 0 and "nothing changed" in result.stdout, result.output
    assert tree(directory) == before


def older(path: Path) -> None:
    """The store as vpnlab wrote it at results schema 5: no baseline column."""
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE scenarios DROP COLUMN baseline")
    db.commit()
    db.close()
    lie(path, "5")


def test_upgrade_of_an_older_store_keeps_one_copy_and_no_lock(tmp_path):
    directory = tmp_path / "results"
    older(make_store(directory))
    result = invoke("upgrade", directory)
    assert result.exit_code == 0, result.output
    assert f"upgraded from results schema 5 to {SCHEMA_VERSION}" in " ".join(result.stdout.split())
    assert sorted(tree(directory)) == ["results.sqlite", "results.sqlite.v5.bak"]


def test_an_upgrade_that_fails_leaves_the_store_as_it_was_and_no_copy(tmp_path, monkeypatch):
    directory = tmp_path / "results"
    path = make_store(directory)
    older(path)
    monkeypatch.setitem(UPGRADES, 5, [*UPGRADES[5], "ALTER TABLE nowhere ADD COLUMN x"])  # its second step fails
    assert invoke("upgrade", directory).exit_code != 0
    assert sorted(tree(directory)) == ["results.sqlite"]
    assert check_store(path) and "baseline" not in {info[1] for info in sqlite3.connect(path).execute(
        "PRAGMA table_info(scenarios)")}  # the first step undone with it: still an intact schema 5 store


def test_a_lock_file_removed_between_its_opening_and_its_lock_is_not_the_one_held(tmp_path, monkeypatch):
    """An upgrade that ends removes the lock file it held: a run that had opened that file before and
    locks it after must lock the file there now, or two would hold "the" lock."""
    flock, removed = fcntl.flock, []

    def flock_after_an_upgrade_ended(fd, operation):
        if not removed:
            removed.append((tmp_path / LOCK_NAME).unlink())
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_an_upgrade_ended)
    fd = results_dir._lock(tmp_path)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / LOCK_NAME))
    finally:
        os.close(fd)


def _columns(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    found = [(t, c[1]) for t in tables for c in db.execute(f"PRAGMA table_info({t})")]
    db.close()
    return found


WRONG = {"text": "fast", "blob": b"\x00\xff", "null": None, "bad json": "{nope"}


@pytest.mark.parametrize("wrong", WRONG)
def test_every_column_of_every_table_damaged_in_turn_never_reaches_the_bug_handler(tmp_path, wrong):
    """Property-style: each column of each table of a real store, one at a time, overwritten with text,
    a blob, NULL or bad JSON; show, export and verdicts read it: exit 0 (a value that is still valid
    there) or exit 2 with the column named, never 70, the store byte for byte as it was."""
    seen = {}
    for n, (table, column) in enumerate(_columns(make_store(tmp_path / "probe"))):
        directory = tmp_path / f"r{n}"
        path = make_store(directory)
        if WRONG[wrong] is None and table == "meta":
            continue  # the schema version's row is checked by the upgrade tests
        try:
            damage(path, table, column, WRONG[wrong], "")
        except sqlite3.IntegrityError:
            continue  # an INTEGER PRIMARY KEY holds nothing else: SQLite itself refuses the damage
        before = tree(directory)
        for command in ("show", "export", "verdicts"):
            result = invoke(*COMMANDS[command](directory))
            assert result.exit_code in (0, 2), (table, column, command, result.output)
            if result.exit_code == 2:
                assert "Traceback" not in result.output, result.output
        assert tree(directory) == before, (table, column)
        seen[(table, column)] = result.exit_code
    assert len(seen) > 40 and 2 in seen.values()  # every column tried; damage found
