"""The command line as a user drives it: real runs, interrupted runs, bad input (a whole run with show,
export and compare on it is in test_report.py, which shares that run with the report's tests)."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from conftest import default_dispositions, kill_run, orphans_of_other_tests, our_namespaces, sample_count, settled
from hosts_harness import wait_until
from vpnlab.testbed.state import CLAIM, STATE_ROOT

VPNLAB = [sys.executable, "-m", "vpnlab"]

SMALL = """
name: small
repetitions: 2
vpns: [{driver: none}, {driver: wireguard}]
links: [{name: wan, rate_mbit: 50}]
workloads:
  - {kind: tcp, duration_s: 1, omit_s: 0}
  - {kind: udp, rate_mbit: 10, duration_s: 1}
  - {kind: ping, count: 5, interval_s: 0.02}
"""

LONG = """
name: long
repetitions: 2
vpns: [{driver: none}, {driver: wireguard}]
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""


def vpnlab(*args, check=True, **kwargs):
    proc = subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, timeout=600, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"vpnlab {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def our_processes() -> list[str]:
    """Daemons and traffic tools this test session started (a vpnlab it runs, or orphans left by
    one it killed), not those of another session's live vpnlab on the same machine."""
    names = {"wireguard-go", "iperf3", "tcpdump", "openvpn", "charon", "ocserv", "openconnect"}
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,comm="], capture_output=True, text=True).stdout
    parents = {int(pid): int(ppid) for pid, ppid, _ in (line.split(None, 2) for line in out.splitlines())}

    others = orphans_of_other_tests()

    def ours(pid: int) -> bool:
        if parents.get(pid) == 1:
            return pid not in others             # an orphan: its vpnlab is gone without stopping it
        while pid in parents and pid > 1:
            if pid == os.getpid():
                return True
            pid = parents[pid]
        return False

    return [comm for pid, _, comm in (line.split(None, 2) for line in out.splitlines())
            if comm in names and ours(int(pid))]


def test_bad_study_exits_nonzero_and_creates_nothing(tmp_path):
    study = tmp_path / "bad.yaml"
    study.write_text(SMALL.replace("rate_mbit: 50", "rate_mbit: fifty").replace("{kind: tcp,", "{kind: tcp, windw: 1,"))
    before = our_namespaces()
    proc = vpnlab("run", study, "--out", tmp_path / "out", check=False)
    assert proc.returncode == 2
    assert "bad.yaml" in proc.stderr and "links[0].rate_mbit" in proc.stderr
    assert "workloads[0].windw: unknown field" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
    assert settled(lambda: our_namespaces() - before) == set()  # another test's killed run may come and go


def test_missing_study_file(tmp_path):
    proc = vpnlab("run", tmp_path / "nope.yaml", check=False)
    assert proc.returncode == 2 and "no such study file" in proc.stderr


def test_version_names_the_commit_it_runs():
    """`vpnlab --version` says the code it runs, as each run records it (vpnlab.version())."""
    from vpnlab import version
    assert vpnlab("--version").stdout.strip() == f"vpnlab {version()}"
    assert "+g" in version() or not (Path(__file__).resolve().parents[1] / ".git").exists()


def test_dry_run_creates_nothing(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(SMALL)
    proc = vpnlab("run", study, "--dry-run", "--out", tmp_path / "out")
    assert "6 scenarios" in proc.stdout and "Nothing was created" in proc.stdout
    assert not (tmp_path / "out").exists()
    study.write_text(SMALL.replace("repetitions: 2", "repetitions: {min: 2, max: 4, ci_target_pct: 5}"))
    proc = vpnlab("run", study, "--dry-run")  # adaptive: the range the rule allows, not just its minimum
    assert "at 2 repetitions each, up to" in proc.stdout and "asks for all 4" in proc.stdout


def start_run(study_text, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(study_text)
    out = tmp_path / "out"
    proc = subprocess.Popen([*VPNLAB, "run", str(study), "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_dispositions)  # however the suite itself was started
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if (out / "results.sqlite").exists() and sample_count(out) >= 1:
                return proc, out
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        raise AssertionError("no sample within 120 s")
    except BaseException:
        proc.terminate()  # the run cleans up after itself on SIGTERM
        proc.wait(timeout=60)
        raise


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_cleans_up_and_resume_finishes(tmp_path, sig, no_leftovers):
    proc, out = start_run(LONG, tmp_path)
    time.sleep(1.5)  # mid-scenario: tunnel and iperf3 running
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert "--resume" in stderr
    assert our_processes() == []
    done = sample_count(out)
    assert 1 <= done < 4

    before = (out / "results.sqlite").read_bytes()
    dry = vpnlab("run", "--resume", out, "--dry-run").stdout  # what is left, read without writing
    assert f"--resume would measure what is left: {done} repetitions were measured before; {4 - done} more" in dry
    assert (out / "results.sqlite").read_bytes() == before and sample_count(out) == done
    resumed = vpnlab("run", "--resume", out, "--no-progress").stderr
    assert f"resumed: {done} repetitions were measured before; {4 - done} more for" in resumed
    assert sample_count(out) == 4
    assert "--resume would measure nothing" in vpnlab("run", "--resume", out, "--dry-run").stdout
    db = sqlite3.connect(out / "results.sqlite")
    statuses = [r[0] for r in db.execute("SELECT status FROM runs ORDER BY id")]
    dupes = db.execute("SELECT count(*) FROM (SELECT scenario_id, repetition, metric FROM samples"
                       " GROUP BY 1, 2, 3 HAVING count(*) > 1)").fetchone()[0]
    db.close()
    assert statuses == ["interrupted", "completed"]
    assert dupes == 0


@pytest.mark.integration
def test_sigkill_leftovers_are_cleaned_by_the_next_command(tmp_path, no_leftovers):
    proc, out = start_run(LONG, tmp_path)
    time.sleep(1.0)
    kill_run(proc)
    leftover = our_namespaces()
    assert leftover, "a SIGKILLed run cannot clean up itself; its namespaces should still be there"
    records = [d for d in STATE_ROOT.iterdir() if (d / "state.json").exists()
               and json.loads((d / "state.json").read_text())["owner_pid"] == proc.pid]
    pids = [p["pid"] for d in records for p in json.loads((d / "state.json").read_text())["processes"]]
    assert records

    cleaned = vpnlab("clean").stdout
    # the next vpnlab command cleans them: this one, or one another test started meanwhile (each
    # claims a stale run by renaming its record, `<id>.cleaning-<its pid>`, before it removes what the
    # record lists; the record may be listed above as already claimed)
    for record in records:
        run_id = record.name.split(CLAIM)[0]
        assert f"cleaned run {run_id}" in cleaned or wait_until(
            lambda: not any(STATE_ROOT.glob(f"{run_id}*")), timeout=30), (cleaned, list(STATE_ROOT.iterdir()))
    assert wait_until(lambda: our_namespaces() == set(), timeout=30), our_namespaces()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert our_processes() == []
    again = vpnlab("clean").stdout
    assert not any(f"run {record.name}" in again for record in records)  # nothing of it left

    vpnlab("run", "--resume", out, "--no-progress")
    assert sample_count(out) == 4
    db = sqlite3.connect(out / "results.sqlite")
    assert [r[0] for r in db.execute("SELECT status FROM runs ORDER BY id")] == ["killed", "completed"]
    db.close()


def test_resume_refuses_a_different_study(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(LONG)
    out = tmp_path / "out"
    out.mkdir()
    from vpnlab.store import Store

    Store.open_dir(out).start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                                  study_name="long", study_text=LONG)
    other = tmp_path / "other.yaml"
    other.write_text(LONG.replace("repetitions: 2", "repetitions: 3"))
    proc = vpnlab("run", other, "--resume", out, check=False)
    assert proc.returncode == 2 and "differs from the study stored" in proc.stderr


def test_doctor_json_lists_features_and_drivers():
    if os.geteuid() != 0:
        pytest.skip("doctor probes the kernel in a namespace and needs root")
    report = json.loads(vpnlab("doctor", "--json").stdout)
    assert report["features"]["netns"] is True
    assert {"none", "wireguard"} <= set(report["drivers"])
    assert any(i["usable"] for i in report["drivers"]["wireguard"])


@pytest.mark.integration
@pytest.mark.parametrize("target", [10, 0.0001])
def test_adaptive_repetitions_follow_steins_rule_from_their_pilot(tmp_path, no_leftovers, target):
    # Stein's total is fixed by the pilot of 3 alone: N = max(3, ceil((t_2 * sd_log / log(1 + target))^2)),
    # capped at 5. Recomputed here from the stored pilot (scipy's t, not vpnlab's), so the test holds
    # whatever the machine's load does to the spread. A 10% target is met after the pilot on a shaped
    # link; a millionth never is, so the rule runs to its maximum and says so.
    study = tmp_path / "a.yaml"
    study.write_text(f"""
name: adaptive
repetitions: {{min: 3, max: 5, ci_target_pct: {target}}}
vpns: [{{driver: none}}]
links: [{{rate_mbit: 20}}]
workloads: [{{kind: tcp, duration_s: 2, omit_s: 1}}]
""")
    out = tmp_path / "out"
    vpnlab("run", study, "--out", out, "--no-progress")
    db = sqlite3.connect(out / "results.sqlite")
    ci_met, rule, notes = db.execute("SELECT ci_target_met, repetition_rule, notes FROM scenarios").fetchone()
    values = [v for (v,) in db.execute("SELECT value FROM samples WHERE metric='throughput_mbps' ORDER BY repetition")]
    db.close()
    pilot_sd, logs = np.log(values[:3]).std(ddof=1), np.log(values)
    needed = max(3, math.ceil((scipy.stats.t.ppf(0.975, 2) * pilot_sd / math.log1p(target / 100)) ** 2))
    assert len(values) == min(5, needed), (values, needed)
    # The final interval: Stein's (the pilot's spread) or, where it reaches further, the t interval of all.
    half = max(scipy.stats.t.ppf(0.975, 2) * pilot_sd, scipy.stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1))
    met = math.exp(half / math.sqrt(len(logs))) <= 1 + target / 100
    assert ci_met == met and (met or needed > 5 or "spread wider than the pilot" in notes)
    assert "3 to 5 repetitions" in rule
    assert ("wider than the target" in notes) == (not met)
    if target < 1:
        assert "capped at max 5" in notes
