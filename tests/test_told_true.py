"""What `show` tells of an interrupted or killed run is true: a scenario measured to its rule before
a SIGTERM is finished, and a run stored as running that no process holds is called killed."""

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from test_results_dir import make_store
from vpnlab.store.results_dir import LOCK_NAME

VPNLAB = [sys.executable, "-m", "vpnlab"]
TWO = """\
name: two
repetitions: 1
order: listed
vpns: [{driver: none}]
links: [{rate_mbit: 50}]
workloads: [{kind: ping, count: 3, interval_s: 0.05}, {kind: tcp, duration_s: 20, omit_s: 0}]
"""


def show(directory) -> str:
    proc = subprocess.run([*VPNLAB, "show", str(directory)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_run_stored_as_running_that_no_process_holds_is_called_killed(tmp_path):
    make_store(tmp_path / "r", status="running")
    assert "status killed (no vpnlab holds it now; finish it with: vpnlab run --resume" in " ".join(show(tmp_path / "r").split())
    fd = os.open(tmp_path / "r" / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a live run's lock, as claim() holds it
        assert "status running" in show(tmp_path / "r")
    finally:
        os.close(fd)


@pytest.mark.integration
def test_a_scenario_measured_before_a_sigterm_is_finished(tmp_path, no_leftovers):
    study, out = tmp_path / "two.yaml", tmp_path / "out"
    study.write_text(TWO)
    proc = subprocess.Popen([*VPNLAB, "run", str(study), "--out", str(out), "--no-progress", "--backend", "netns"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # the ping measured, the transfer begun
        time.sleep(0.5)
        if (out / "results.sqlite").exists() and _statuses(out) == ["running", "running"] and _samples(out) == 1:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert _statuses(out) == ["done", "running"]
    titles = [line for line in show(out).splitlines() if " | " in line]
    assert len(titles) == 2 and "not finished" not in titles[0] and "(not finished)" in titles[1], titles


def _statuses(out) -> list[str]:
    db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("SELECT status FROM scenarios ORDER BY idx")]
    except sqlite3.Error:
        return []
    finally:
        db.close()


def _samples(out) -> int:
    db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT count(*) FROM repetitions WHERE failure IS NULL").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        db.close()


def test_an_intact_store_with_its_wal_on_a_read_only_mount_is_read(tmp_path):
    """A store whose write-ahead log holds the last commit, copied without its -shm index onto a
    read-only mount (a bind mount here, remounted ro): SQLite cannot read it in place; vpnlab reads a
    private copy and shows the committed status, the mount left as it was."""
    import shutil

    source, held = tmp_path / "source", tmp_path / "held"
    make_store(source, status="interrupted")
    db = sqlite3.connect(source / "results.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("UPDATE runs SET status='completed'")  # in the log only: no checkpoint while db is open
    db.commit()
    (held / "r").mkdir(parents=True)
    for name in ("results.sqlite", "results.sqlite-wal", "study.yaml"):
        shutil.copyfile(source / name, held / "r" / name)
    db.close()
    mounted = tmp_path / "ro"
    mounted.mkdir()
    subprocess.run(["mount", "--bind", str(held), str(mounted)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        text = show(mounted / "r")
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    assert "status completed" in text and "damaged" not in text
    assert sorted(p.name for p in (held / "r").iterdir()) == ["results.sqlite", "results.sqlite-wal", "study.yaml"]
