"""Faults injected for real: a VPN daemon killed in the middle of a measurement."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import default_dispositions, sample_count
from vpnlab.core.backend import hang_limit

VPNLAB = [sys.executable, "-m", "vpnlab"]
CLIENTS = {"iperf3": "-c", "ping": "40"}  # the measuring clients (not the warm-up's ping)
# Each userspace data plane's daemon, killed once: four while iperf3 runs (which would hang),
# four while ping runs (which would count a dead tunnel as loss).
KILL_DURING = {"wireguard-go": "iperf3", "charon": "iperf3", "openvpn": "ping", "openconnect": "ping",
               "nebula": "iperf3", "tincd": "ping", "yggdrasil": "iperf3", "vpnclient": "ping"}
PLANNED_S = {"iperf3": 2, "ping": 40 * 0.04}  # each client's planned run in STUDY: its hang limit's start

STUDY = """
name: dying-daemons
order: listed
repetitions: 1
vpns:
  - {driver: wireguard, options: {implementation: wireguard-go}}
  - {driver: openvpn}
  - {driver: strongswan, options: {implementation: libipsec}}
  - {driver: ocserv}
  - {driver: nebula}
  - {driver: tinc}
  - {driver: yggdrasil}
  - {driver: softether}
links: [{rate_mbit: 100}]
workloads:
  - {kind: tcp, duration_s: 2, omit_s: 0}
  - {kind: ping, count: 40, interval_s: 0.04}
"""


def _processes(ancestor: int) -> list[tuple[int, str, list[str]]]:
    """The processes below `ancestor` (other sessions on this machine run the same daemons). Each
    process's parent is read once a scan: walking every process's chain up read /proc/*/stat
    thousands of times, ten times a second."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], list(children.get(ancestor, ()))
    while pending:
        pid = pending.pop()
        pending += children.get(pid, ())
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            found.append((pid, Path(f"/proc/{pid}/comm").read_text().strip(), argv))
        except OSError:
            continue
    return found


def _started_s(pid: int) -> float | None:
    """When the process started, in seconds since boot (None: it is gone)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except OSError:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


class Killer(threading.Thread):
    """Kills each daemon once, a second into the measurement KILL_DURING names, and follows the
    client measuring then until it ends: `lived` holds its run, in seconds, by the daemon's name."""

    def __init__(self, run: subprocess.Popen):
        super().__init__(daemon=True)
        self.run_proc, self.killed, self.done = run, set(), threading.Event()
        self.lived: dict[str, float] = {}
        self._following: dict[str, tuple[int, float]] = {}  # daemon -> its client's pid and start

    def run(self):
        while not self.done.is_set() and self.run_proc.poll() is None:
            procs = _processes(self.run_proc.pid)
            self._follow()
            measuring = [(pid, c) for pid, name, argv in procs for c, mark in CLIENTS.items()
                         if name == c and mark in argv]
            daemons = [(pid, name) for pid, name, _ in procs if name in KILL_DURING]
            for client_pid, client in measuring:
                self._kill_during(client_pid, client, daemons)
            time.sleep(0.1)
        self._follow(run_over=True)

    def _kill_during(self, client_pid: int, client: str, daemons: list[tuple[int, str]]) -> None:
        started = _started_s(client_pid)
        for pid, name in daemons:
            if KILL_DURING[name] == client and name not in self.killed and started is not None:
                time.sleep(1.0)
                try:
                    os.kill(pid, signal.SIGKILL)   # a daemon of the run this test started
                except ProcessLookupError:
                    return  # its repetition ended meanwhile: the next one's measurement
                self.killed.add(name)
                self._following[name] = (client_pid, started)
                return

    def _follow(self, run_over: bool = False) -> None:
        """The clients followed that have ended: how long they ran (at most)."""
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        for name, (pid, started) in list(self._following.items()):
            if run_over or _started_s(pid) != started:
                self.lived[name] = now - started
                del self._following[name]


@pytest.mark.integration
def test_a_daemon_killed_mid_measurement_fails_that_repetition_only(tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text(STUDY)
    out = tmp_path / "out"
    proc = subprocess.Popen([*VPNLAB, "run", study, "--out", out, "--no-progress", "--backend", "netns"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = Killer(proc)
    killer.start()
    stdout, stderr = proc.communicate(timeout=900)
    killer.done.set()
    assert proc.returncode == 0, stderr
    assert killer.killed == set(KILL_DURING), killer.killed
    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT sc.vpn, sc.workload, sc.status, r.repetition, r.failure FROM repetitions r"
                      " JOIN scenarios sc ON sc.id = r.scenario_id ORDER BY sc.idx, r.repetition").fetchall()
    db.close()
    failed = [(vpn, kind, failure) for vpn, kind, _, _, failure in rows if failure]
    assert len(failed) == len(killer.killed), failed
    for _, _, failure in failed:
        assert "died during the measurement" in failure or "no packet crossed" in failure, failure
    valid = {}
    for vpn, kind, status, _, failure in rows:
        assert status == "done", rows
        valid[(vpn, kind)] = valid.get((vpn, kind), 0) + (not failure)
    assert set(valid.values()) == {1}, valid          # the next repetition, on a fresh tunnel, counts
    # no client was left to hang: each ended (the tunnel's watch ends it) before vpnlab's hang limit
    for name, seconds in killer.lived.items():
        client = KILL_DURING[name]
        assert seconds < hang_limit(PLANNED_S[client]), f"{client} ran {seconds:.1f} s ({name} killed in it)"
    assert set(killer.lived) == killer.killed, killer.lived
    assert "not a valid sample" in stderr


LONG = """
name: long
repetitions: 3
vpns: [{driver: none}, {driver: wireguard}]
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""


def _start(tmp_path, preexec, prefix=()):
    tmp_path.mkdir(exist_ok=True)
    study = tmp_path / "s.yaml"
    study.write_text(LONG)
    out = tmp_path / "out"
    proc = subprocess.Popen([*prefix, *VPNLAB, "run", study, "--out", out, "--no-progress", "--backend", "netns"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    return proc, out


@pytest.mark.integration
def test_sighup_right_after_the_first_sample_ends_the_run_cleanly(tmp_path, no_leftovers):
    proc, out = _start(tmp_path, default_dispositions)
    deadline = time.monotonic() + 120
    while sample_count(out) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 129, stderr
    assert "--resume" in stderr
    db = sqlite3.connect(out / "results.sqlite")
    assert [r[0] for r in db.execute("SELECT status FROM runs")] == ["interrupted"]
    db.close()


@pytest.mark.integration
def test_an_inherited_ignore_is_respected(tmp_path, no_leftovers):
    def nohup():
        default_dispositions()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)   # what nohup does

    proc, out = _start(tmp_path, nohup)
    deadline = time.monotonic() + 120
    while sample_count(out) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGHUP)
    time.sleep(2)
    assert proc.poll() is None, "SIGHUP ended a run started with SIGHUP ignored"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr


def _probe_namespace(proc: subprocess.Popen) -> Path:
    """The capability probe's namespace of this vpnlab, once it exists."""
    namespace = Path(f"/run/netns/vlprobe{proc.pid}")
    deadline = time.monotonic() + 60
    while not namespace.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert namespace.exists(), "the probe's namespace never appeared"
    return namespace


@pytest.mark.integration
def test_a_signal_during_the_capability_probe_leaves_nothing(tmp_path, no_leftovers):
    in_probe = 0
    for delay in (0.01, 0.04, 0.2):   # after the probe's namespace appeared: in the probe, or just past it
        proc, _ = _start(tmp_path / f"after-{delay}", default_dispositions)
        namespace = _probe_namespace(proc)
        time.sleep(delay)
        in_probe += namespace.exists()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 143, stderr
        assert "Traceback" not in stderr
        assert not namespace.exists()
    assert in_probe, "no signal came while the probe ran"


@pytest.mark.integration
def test_a_signal_while_the_probe_namespace_exists_removes_it(tmp_path, no_leftovers):
    proc, _ = _start(tmp_path, default_dispositions)
    namespace = _probe_namespace(proc)
    proc.send_signal(signal.SIGTERM)   # the probe is running: its own EXIT trap will not run
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert not namespace.exists()


HELD = """
import os, signal, threading
from vpnlab.core import signals
signals.install()
try:
    with signals.held():
        sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
        sender.start()
        sender.join()
        for _ in range(10 ** 5):  # the main thread runs Python handlers between these
            pass
        print("block ended", flush=True)
except signals.Interrupted as exc:
    print("raised after it:", exc, flush=True)
"""


def test_a_signal_during_a_held_step_is_raised_once_it_is_over():
    """signals.held: how a process is started and recorded (or the probe started) with no signal
    between, here with SIGTERM sent from another thread, which a blocked mask would not stop."""
    shown = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True, timeout=60)
    assert shown.stdout.splitlines() == ["block ended", "raised after it: SIGTERM"], shown.stderr


@pytest.mark.integration
def test_two_runs_at_once_say_so_and_flag_their_samples(tmp_path, no_leftovers):
    from vpnlab.testbed.state import RunState

    other = RunState.create()   # a run of this test's own, alive while the measured one goes on
    try:
        study = tmp_path / "s.yaml"
        study.write_text("name: two\nrepetitions: 2\nvpns: [{driver: none}]\nlinks: [{rate_mbit: 50}]\n"
                         "workloads: [{kind: ping, count: 5, interval_s: 0.05}]\n")
        proc = subprocess.run([*VPNLAB, "run", study, "--out", tmp_path / "out", "--no-progress", "--backend",
                               "netns"], capture_output=True, text=True, timeout=300)
    finally:
        other.teardown()
    assert proc.returncode == 0, proc.stderr
    assert "another vpnlab run is going on on this machine" in proc.stderr and other.run_id in proc.stderr
    db = sqlite3.connect(tmp_path / "out" / "results.sqlite")
    flags = [r[0] for r in db.execute("SELECT flags FROM repetitions")]
    db.close()
    assert len(flags) == 2
    from vpnlab.core.flags import parse

    shared = [[f.text for f in parse(stored) if f.kind == "shared-machine"] for stored in flags]  # beside a busy-machine one under load
    assert all(len(texts) == 1 and texts[0].startswith("another vpnlab run shared this machine (") and other.run_id in texts[0]
               for texts in shared), flags


def test_a_tunnel_that_never_carries_quotes_the_logs_its_daemons_write_themselves(state, tmp_path):
    """pppd writes to its `logfile`, not to its output: a PPTP tunnel whose MPPE keys disagreed
    timed out with only the empty output of pptpd and pptp quoted; the reason must show pppd's."""
    from vpnlab.drivers.base import Tunnel, TunnelEnv, wait_for
    from vpnlab.core.errors import TunnelError

    env = TunnelEnv(state, 0, tmp_path, "pptp-linux")
    tunnel = Tunnel(env, ("gre", None))
    env.log("pptpd").write_text("")
    env.log("pppd-gateway").write_text("rcvd [proto=0x8f] e9 0a\nUnsupported protocol 0x8f received\n")
    env.log("pppd-gateway").with_name("l1-pppd-gateway.log").write_text("another layer's\n")
    with pytest.raises(TunnelError) as error:
        wait_for(lambda: False, 0.01, "the first packet", tunnel)
    reason = str(error.value)
    assert "l0-pppd-gateway.log:" in reason and "Unsupported protocol 0x8f received" in reason
    assert "l0-pptpd.log:" in reason and "another layer's" not in reason
    tunnel.down()
