"""The results directory is the user's data: vpnlab writes only into a new or empty directory or
its own unfinished run (with --resume), one run at a time; it reads a store only after checking
it, read-only; a full disk stops a run cleanly and resumably; garbage numbers never abort a run."""

import csv
import hashlib
import io
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vpnlab.cli import app
from vpnlab.plan.scenarios import make_plan
from vpnlab.store.results_dir import LOCK_NAME, StoreError, check_store, claim, explain
from vpnlab.store import RESERVE_NAME, DiskFull, Store, free_bytes, now
from vpnlab.plan.study import parse_study
from conftest import kill_run

VPNLAB = [sys.executable, "-m", "vpnlab"]

STUDY = """
name: tiny
repetitions: 2
vpns: [{driver: none}]
links: [{rate_mbit: 100}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""
OTHER = STUDY.replace("name: tiny", "name: other").replace("rate_mbit: 100", "rate_mbit: 50")
RUN = ("--no-progress", "--backend", "netns")


def vpnlab(*args, env=None):
    return subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def invoke(*args):
    """The command line in this process (a second faster than a new one); the signal handlers
    vpnlab installs are put back afterwards."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def tree(directory: Path) -> dict:
    """Every file below `directory` with its size, modification time and content hash."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns,
                                             hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(Path(directory).rglob("*"))}


def make_store(directory: Path, study: str = STUDY, reps: int = 2, status: str = "interrupted") -> None:
    """A results directory as a run of `study` leaves it, written through the store."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "study.yaml").write_text(study)
    scenario = make_plan(parse_study(study)).scenarios[0]
    store = Store.open_dir(directory)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name=parse_study(study).name, study_text=study)
    store.add_scenario(scenario)
    for rep in range(1, reps + 1):
        store.record_repetition(run, scenario.id, rep, {"throughput_mbps": 90.0 + rep},
                                {"iperf3": os.urandom(6000).hex()}, [])
    store.finish_run(run, status)
    store.close()


def valid_repetitions(directory: Path) -> list[tuple]:
    db = sqlite3.connect(f"file:{directory / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT repetition, completed_at FROM repetitions WHERE COALESCE(failure, '') = ''"
                          " ORDER BY repetition").fetchall()
    except sqlite3.OperationalError:  # the run has created the file but not yet its tables
        return []
    finally:
        db.close()


def statuses(directory: Path) -> list[str]:
    return [r["status"] for r in check_store(directory / "results.sqlite")]


def start(study: Path, out: Path, samples: int = 1) -> subprocess.Popen:
    """A run in the background, returned once `samples` repetitions are stored."""
    proc = subprocess.Popen([*VPNLAB, "run", str(study), "--out", str(out), *RUN],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        while len(valid_repetitions(out) if (out / "results.sqlite").exists() else []) < samples:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no sample within 120 s"
            time.sleep(0.2)
    except BaseException:
        proc.terminate()
        proc.wait(timeout=60)
        raise
    return proc


def strict_json(text: str):
    def refuse(token):
        raise AssertionError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


# -- a store that is not one, or damaged ------------------------------------------------------

def _garble(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.seek(2 * 4096)
        fh.write(os.urandom(3 * 4096))


def _newer(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()


def _foreign(path: Path) -> None:
    path.unlink()
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.execute("INSERT INTO notes VALUES ('my own database')")
    db.commit()
    db.close()


BAD_STORES = {
    "not SQLite": (lambda p: p.write_text("these are my notes, not a database\n"), "not an SQLite database"),
    "SQLite, not vpnlab's": (_foreign, "not a vpnlab results store"),
    "pages garbled": (_garble, "damaged"),
    "truncated": (lambda p: os.truncate(p, p.stat().st_size // 2), "damaged"),
    "newer schema": (_newer, "results schema 99"),
}


@pytest.mark.parametrize("kind", BAD_STORES)
def test_a_bad_store_is_refused_clearly_and_left_untouched(tmp_path, kind):
    spoil, says = BAD_STORES[kind]
    directory = tmp_path / "results"
    make_store(directory)
    spoil(directory / "results.sqlite")
    before = tree(directory)
    with pytest.raises(StoreError, match=says):
        check_store(directory / "results.sqlite")
    for command in (["show", directory], ["export", directory, "--format", "json"], ["report", directory],
                    ["stats", directory], ["compare", directory, directory],
                    ["run", "--resume", directory, *RUN]):
        result = invoke(*command)
        assert result.exit_code == 2, (command, result.output)
        assert says in result.stderr and str(directory / "results.sqlite") in result.stderr, (command, result.stderr)
    assert tree(directory) == before  # not a byte, not a -wal or -shm beside it


def test_commands_on_a_damaged_store_print_no_traceback(tmp_path):
    directory = tmp_path / "results"
    make_store(directory)
    _garble(directory / "results.sqlite")
    before = tree(directory)
    for command in (["show", directory], ["run", "--resume", directory, *RUN]):
        proc = vpnlab(*command)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "the results store is damaged" in proc.stderr
    assert tree(directory) == before


# -- values that are not numbers --------------------------------------------------------------

def test_values_that_are_not_finite_are_stored_as_missing_with_a_flag(tmp_path):
    scenario = make_plan(parse_study(STUDY)).scenarios[0]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="tiny", study_text=STUDY)
    store.add_scenario(scenario)
    store.record_repetition(run, scenario.id, 1, {"throughput_mbps": math.nan, "retransmits": math.inf,
                                                  "cpu_busy_pct": "garbage", "cpu_s_per_gb": 12.5}, {}, ["earlier"])
    samples = store.samples()
    assert [(s.metric, s.value) for s in samples] == [("cpu_s_per_gb", 12.5)]
    flags = samples[0].flags
    assert flags[0].text == "earlier" and len(flags) == 4
    for metric, shown in (("throughput_mbps", "'nan'"), ("retransmits", "'inf'"), ("cpu_busy_pct", "'garbage'")):
        assert any(f.kind == "not-finite" and f.text.startswith(f"{metric} was {shown}, not a finite number")
                   for f in flags), flags
    store.finish_run(run, "completed")
    # a store written before this check may hold an infinity: exports say null, strict JSON
    store.db.execute("INSERT INTO samples VALUES (?, 1, 'retransmits', 9e999, 'segments', ?)", (scenario.id, now()))
    store.db.commit()
    store.close()
    for table in ("samples", "summary", "comparisons"):
        result = invoke("export", tmp_path, "--format", "json", "--table", table)
        assert result.exit_code == 0, result.output
        strict_json(result.stdout)
    rows = strict_json(invoke("export", tmp_path, "--format", "json").stdout)
    assert {r["metric"]: r["value"] for r in rows} == {"cpu_s_per_gb": 12.5, "retransmits": None}
    summary = strict_json(invoke("export", tmp_path, "--format", "json", "--table", "summary").stdout)
    assert {r["metric"]: r["sd"] for r in summary}["cpu_s_per_gb"] is None  # one sample: no sd
    as_csv = invoke("export", tmp_path, "--format", "csv", "--table", "summary").stdout
    cells = [cell for r in csv.DictReader(io.StringIO(as_csv)) for cell in r.values()]
    assert not {"nan", "inf", "-inf"} & {cell.lower() for cell in cells}
    (row,) = [r for r in csv.DictReader(io.StringIO(as_csv)) if r["metric"] == "cpu_s_per_gb"]
    assert row["sd"] == "" and row["mean"] == "12.5"                         # an empty cell, not "nan"


@pytest.mark.integration
def test_a_tool_printing_nan_does_not_abort_the_run(tmp_path, no_leftovers):
    # an iperf3 whose client reports its goodput as NaN (a JSON NaN token), as a broken build might
    real = shutil.which("iperf3")
    wrapped = tmp_path / "bin"
    wrapped.mkdir()
    (wrapped / "iperf3").write_text(f"""#!{sys.executable}
import json, os, subprocess, sys
if "-c" not in sys.argv[1:]:
    os.execv({real!r}, [{real!r}, *sys.argv[1:]])
proc = subprocess.run([{real!r}, *sys.argv[1:]], capture_output=True, text=True)
data = json.loads(proc.stdout)
data["end"]["sum_received"]["bits_per_second"] = float("nan")
sys.stdout.write(json.dumps(data))
sys.exit(proc.returncode)
""")
    (wrapped / "iperf3").chmod(0o755)
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.replace("repetitions: 2", "repetitions: 1"))
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{wrapped}{os.pathsep}{os.environ['PATH']}"}
    proc = vpnlab("run", study, "--out", out, *RUN, env=env)
    assert proc.returncode == 0, proc.stderr
    assert statuses(out) == ["completed"] and len(valid_repetitions(out)) == 1
    rows = strict_json(invoke("export", out, "--format", "json").stdout)
    assert "throughput_mbps" not in {r["metric"] for r in rows} and "retransmits" in {r["metric"] for r in rows}
    assert any("throughput_mbps was 'nan'" in r["flags"] for r in rows)
    strict_json(invoke("export", out, "--format", "json", "--table", "summary").stdout)


# -- --out and the lock -----------------------------------------------------------------------

@pytest.mark.integration
def test_out_takes_only_a_new_or_empty_directory(tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text(STUDY)
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("months of work\n")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    make_store(same := tmp_path / "same")
    make_store(other := tmp_path / "other", OTHER)
    make_store(damaged := tmp_path / "damaged")
    _garble(damaged / "results.sqlite")
    cases = [(foreign, "holds files that are not a vpnlab run (chapter1.tex)"),
             (a_file, "exists and is not a directory"),
             (same, f"finish it with `vpnlab run --resume {same}`"),
             (other, "holds a run of another study ('other')"),
             (damaged, "results.sqlite that vpnlab cannot use")]
    for target, says in cases:
        before = tree(target) if target.is_dir() else a_file.read_bytes()
        result = invoke("run", study, "--out", target, *RUN)
        assert result.exit_code == 2 and says in result.stderr, result.stderr
        assert (tree(target) if target.is_dir() else a_file.read_bytes()) == before, target
        assert not (target / LOCK_NAME).exists()
    # the other study's samples were not reused, nor its directory resumed with this study
    before = tree(other)
    result = invoke("run", study, "--resume", other, *RUN)
    assert result.exit_code == 2 and "differs from the study stored" in result.stderr
    assert tree(other) == before


@pytest.mark.integration
def test_one_run_per_directory_and_a_dead_runs_lock_does_not_block(tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text(STUDY)
    out = tmp_path / "out"
    out.mkdir()  # an existing empty directory is fine
    first = start(study, out)
    try:
        second = invoke("run", "--resume", out, *RUN)  # a process of its own all the same: this one
        assert second.exit_code == 2, second.stderr
        assert f"another vpnlab run (pid {first.pid}) is writing into this directory" in second.stderr
    finally:
        kill_run(first)  # no clean-up, the lock stays in its file but the kernel drops it
    proc = vpnlab("run", "--resume", out, *RUN)
    assert proc.returncode == 0, proc.stderr
    assert len(valid_repetitions(out)) == 2
    assert statuses(out)[-1] == "completed"
    # a sitting with nothing left to measure leaves how the scenario was run as it was, and adds no note
    earlier = json.dumps({"link": {"rate_mbit": 10.0}, "workload": {"kind": "as an earlier sitting ran it"}})
    with sqlite3.connect(out / "results.sqlite") as db:
        db.execute("UPDATE scenarios SET as_run=?", (earlier,))  # (JSON: other text would be damage)
    assert invoke("run", "--resume", out, *RUN).exit_code == 0
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("SELECT as_run, notes FROM scenarios").fetchall() == [(earlier, "")]


# -- a full disk ------------------------------------------------------------------------------

@pytest.fixture
def tmpfs():
    """Small tmpfs mounts under /tmp, unmounted and removed afterwards whatever happens."""
    mounted = []

    def mount(size: str) -> Path:
        where = Path(tempfile.mkdtemp(prefix="vpnlab-disk-", dir="/tmp"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "vpnlab-test", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        for _ in range(50):  # the run's last children may still be closing their logs there
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        else:
            subprocess.run(["umount", "--lazy", str(where)], check=True)
        where.rmdir()
        assert str(where) not in Path("/proc/mounts").read_text()


@pytest.mark.integration
def test_the_store_on_a_full_disk(tmp_path, tmpfs):
    disk = tmpfs("2m")
    # a run does not start on a disk with less than a MiB free, and creates nothing
    (disk / "filler").write_bytes(bytes(free_bytes(disk) - 512 * 1024))
    with pytest.raises(DiskFull) as refused:
        claim(disk / "new", STUDY, resume=False)
    assert not (disk / "new").exists() and explain(refused.value)[1] == 1
    (disk / "filler").unlink()

    scenario = make_plan(parse_study(STUDY)).scenarios[0]
    store = Store.open_dir(disk)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="tiny", study_text=STUDY)
    store.add_scenario(scenario)
    assert (disk / RESERVE_NAME).stat().st_blocks > 0  # real blocks, not a hole
    stored = 0
    with pytest.raises(DiskFull) as full:
        while True:
            store.record_repetition(run, scenario.id, stored + 1, {"throughput_mbps": 90.0},
                                    {"iperf3": os.urandom(60_000).hex()}, [])
            stored += 1
    assert stored >= 2 and full.value.filename == str(disk / "results.sqlite")
    message, code = explain(full.value)
    assert code == 1 and "the disk is full" in message and f"vpnlab run --resume {disk}" in message
    # a repetition that failed on a full disk may have failed because of it: not stored
    with pytest.raises(DiskFull):
        store.record_repetition(run, scenario.id, stored + 1, {}, {}, [], failure="tcpdump did not start")
    store.finish_run(run, "failed")  # how the runner ends on an exception: the store knows better
    store.close()
    assert not (disk / RESERVE_NAME).exists()
    assert statuses(disk) == ["interrupted"]
    assert [r[0] for r in valid_repetitions(disk)] == list(range(1, stored + 1))


@pytest.mark.integration
def test_a_full_disk_stops_the_run_cleanly_and_resume_finishes_it_elsewhere(tmp_path, tmpfs, no_leftovers):
    disk = tmpfs("3m")
    out = disk / "results"
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.replace("repetitions: 2", "repetitions: 3"))  # more than 40 KiB can hold
    proc = start(study, out)
    # another program fills the disk, but for a few pages the run's own writes then take
    (disk / "filler").write_bytes(bytes(free_bytes(disk) - 40 * 1024))
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "the disk is full" in stderr and str(out) in stderr, stderr
    assert f"vpnlab run --resume {out}" in stderr
    assert free_bytes(disk) < 1024 * 1024

    assert statuses(out) == ["interrupted"]  # check_store: an intact store, read-only
    before = valid_repetitions(out)
    assert 1 <= len(before) < 3
    assert not (out / RESERVE_NAME).exists()
    shown = invoke("show", out)  # readable where it is, on the full disk
    assert shown.exit_code == 0 and "throughput_mbps" in shown.stdout and "interrupted" in shown.stdout, shown.output
    assert "not finished:" in shown.stdout, shown.output  # short of its rule: said before its figures

    bigger = tmp_path / "copy"
    shutil.copytree(out, bigger)
    resumed = vpnlab("run", "--resume", bigger, *RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert statuses(bigger) == ["interrupted", "completed"]
    after = valid_repetitions(bigger)
    assert len(after) == 3 and after[:len(before)] == before  # the samples stored before the disk filled, as they were
