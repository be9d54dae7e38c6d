import compileall
import contextlib
import fcntl
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from declared import programs

DATA = Path(__file__).parent / "data"
AUDIT = Path(__file__).parent / "audit"
# Every Python process of the suite, this one and the vpnlab commands it starts, records the
# programs it runs (audit/sitecustomize.py); each test fails if one of them is not declared.
# Absolute, so that a command started in another directory runs this tree's vpnlab (PYTHONPATH=src
# is relative), not the one installed.
os.environ["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in filter(None, [
    str(AUDIT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
sys.path.insert(0, str(AUDIT))
import execlog  # noqa: E402

execlog.install()


_CONFIG: pytest.Config | None = None


def pytest_configure(config):
    """The suite starts hundreds of vpnlab commands: each imports vpnlab and the audit compiled rather
    than compiling them anew, also where PYTHONDONTWRITEBYTECODE keeps Python from saving what it
    compiles (once, before any worker starts)."""
    global _CONFIG
    _CONFIG = config
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import vpnlab

        for folder in (Path(vpnlab.__file__).parent, AUDIT):
            compileall.compile_dir(folder, quiet=2)


def pytest_collection_modifyitems(config, items):
    items[:] = _in_turn(items)
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration tests build namespaces and need root")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


# --- Tests run in parallel (bootstrap.sh test: pytest-xdist, a module's tests on one worker, so that
# its module-scoped fixture is built once), most of them waiting on daemons, links and timeouts rather
# than computing. These need the machine to themselves: their figures or flags would show another
# test's load or run. Keys: a module or a module::test. They run one after another on one worker
# (ALONE_GROUP, _FilesAndAlone), each while no other test runs.
ALONE = {
    "test_cpu.py": "CPU meters: another test's load is in their figures and its programs are flagged as busy",
    "test_hosts_study.py::test_a_remote_access_study_runs_on_two_hosts_over_ssh":
        "its samples must carry no busy-machine flag: the hosts are namespaces of this machine",
    "test_hosts_study.py::test_a_program_outside_the_run_on_a_host_flags_the_repetitions_it_disturbed":
        "the one busy program must be the test's own",
    # thresholds on throughput, its spread and latency under load, set on a machine doing nothing else
    "test_transfer.py::test_every_protocol_through_a_tunnel_and_compression_helps_only_text":
        "more than 21 Mbit/s of text through compression on a 20 Mbit/s link",
    "test_background.py::test_every_protocol_crosses_the_tunnel_and_takes_its_share_of_the_link":
        "the link over 80% full with the background's traffic",
    "test_observers.py::test_latency_under_load_and_bytes_on_the_wire": "a round trip under load over 3 x the idle one",
    "test_cli.py::test_adaptive_repetitions_stop_when_the_interval_is_tight": "goodput within 3% after 3 repetitions",
}
ALONE_GROUP = "machine-alone"


def _alone(item) -> bool:
    return _alone_id(item.nodeid)


def _alone_id(nodeid: str) -> bool:
    """Whether the test of this id (path::function[parameters]) needs the machine alone."""
    path, _, test = nodeid.partition("::")
    name = Path(path).name
    return bool({name, f"{name}::{test.split('[')[0]}"} & ALONE.keys())


class _FilesAndAlone(LoadScopeScheduling):
    """xdist's scheduling by file (bootstrap.sh: --dist loadfile, the order kept), except that every
    ALONE test is one unit of its own (ALONE_GROUP)."""

    def _split_scope(self, nodeid: str) -> str:
        return ALONE_GROUP if _alone_id(nodeid) else nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    return _FilesAndAlone(config, log)


# Each boots the VM and runs a study there for minutes: the suite lasts as long as the last of them
# to start plus its own time. They are handed out first and start once every ALONE test is done (those
# cannot share the machine with an emulator), LONG_AT_ONCE at a time, in LONG's order, their workers
# (and so their emulators) at the priority GUEST_NICE gives. The last to start runs when the rest of
# the suite is ending: the hosts' guest, whose two cases then have the guest's two CPUs to themselves
# (it took 412 s there and twice as long at the start). At equal priority, the suite's load starved
# the guests: PPTP's 4-s mean through the guest fell to 62% of no VPN's, and no VPN's own to 1.52 of
# 2 Mbit/s (eight busy loops beside an idle guest leave both at 96-97%). Four guests at once
# overloaded the 2 cores (load 14: a boot over 120 s, PPTP at half its share of a link, a study past
# its test's time limit); three at once took longer than two (24 min in all once; 18 min against 16
# with today's guests, and 5 tests failed on the load); meanwhile their workers wait.
LONG = ("test_vm_site_to_site.py", "test_vm_remote_access.py", "test_hosts_kernel.py")
LONG_AT_ONCE = 2
LONG_WAIT_S = 1200  # at most, for the ALONE tests (a worker that died with them never says they are done)
# Each guest's nice. Until 2026-11-28 it did nothing for the emulator: qemu runs in a session of its
# own, so in a scheduling group of its own (the kernel's autogroup), where its nice counted only
# against itself; each guest had one group's share of the cores, as much as the rest of the suite
# together. vpnlab now gives the group the caller's nice (run/sessions.py). The guests keep that one
# share (0); the remote-access guest, whose checks are on throughput, gets two (-3). (The hosts' guest,
# which starts last, at -3 took 374 s instead of 431-521, but the suite was not shown shorter: 15 min
# 42 s in the one run at -3, 14 min 47 s to 16 min 33 s in three at 0.) Measured: PPTP through the
# remote-access guest at 2 Mbit/s, beside six busy loops in two other sessions, 4-s means of 1.74 and
# 1.67 Mbit/s before (its boot and study 3.5-4.4 min), 1.83 and 1.84 at -6 (1.5 min); a suite's run once
# left its best 1-s interval at 1.56 (79% of no VPN's, under the test's 80%). At -6 (four shares) the
# tests beside it starved instead: no VPN filled a mesh's links to 57% (its test asks 60%), and
# ocserv's TCP retransmitted 3.3% of its segments.
GUEST_NICE = {"test_vm_remote_access.py": -3}
GUEST_NICE_DEFAULT = 0
# The rest's longest files are handed out first, longest first (by their seconds in a fresh-clone run
# of the suite, 90-300 s each): the suite ends with the last file to end, and the longest, handed out
# last (as collected), ended after the guests (test_tune_live.py, test_vm.py). Like LONG's, they wait
# for the ALONE tests: each ALONE test waits for the tests running to end, and with these among them
# the ALONE tests took 8.5 min instead of 2.
HEAVY = ("test_drivers.py", "test_hosts_seeds.py", "test_cli.py", "test_tune_live.py", "test_faults.py",
         "test_overlay_drivers.py", "test_hosts_workloads.py", "test_report.py", "test_mesh.py",
         "test_cpu_cgroups.py", "test_bad_input.py")


def _in_turn(items: list) -> list:
    """The order tests are handed to workers in (bootstrap.sh keeps xdist to it): LONG's files in
    LONG's order, the ALONE tests, HEAVY's files in HEAVY's order, the rest as collected, each file's
    tests together."""
    collected = {item.path: n for n, item in reversed(list(enumerate(items)))}  # each file's first

    def turn(item) -> tuple[int, int, int]:
        name = item.path.name
        if name in LONG:
            return 0, LONG.index(name), 0
        if _alone(item):
            return 1, 0, collected[item.path]
        return 2, HEAVY.index(name) if name in HEAVY else len(HEAVY), collected[item.path]
    return sorted(items, key=turn)


def pytest_collection_finish(session):
    global _ALONE_EXPECTED, _LONG_COLLECTED
    _ALONE_EXPECTED = sum(map(_alone, session.items))
    _LONG_COLLECTED = [name for name in LONG if any(item.path.name == name for item in session.items)]


_ALONE_EXPECTED = 0  # this session's ALONE tests (every worker collects them all)
_LONG_COLLECTED: list[str] = []  # this session's LONG files, in LONG's order
_LONG_STARTED: set[str] = set()  # the LONG files whose first test this worker has begun


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: waiting for the machine is not the test's time
def pytest_runtest_protocol(item, nextitem):
    with _machine(item):
        return (yield)


@contextlib.contextmanager
def _machine(item):
    """A readers-writer lock over the suite's parallel workers (none without them): a test that needs
    the machine alone waits for those running to finish, and no other starts meanwhile (the gate); a
    LONG or HEAVY one starts once every ALONE test has ended."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    folder = _session_folder()
    done, exclusive = folder / "alone.done", _alone(item)
    if item.path.name in LONG + HEAVY and not exclusive:  # among the ALONE tests, each would hold the next up
        deadline = time.monotonic() + LONG_WAIT_S
        while _lines(done) < _ALONE_EXPECTED and time.monotonic() < deadline:
            time.sleep(1)
    booting = item.path.name in LONG and item.path.name not in _LONG_STARTED  # its first test boots
    _LONG_STARTED.add(item.path.name)
    with _long_slot(folder, item.path.name if booting else None), open(folder / "machine.gate", "a") as gate, \
            open(folder / "machine.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            if exclusive:
                with open(done, "a") as record:
                    record.write(item.nodeid + "\n")


@contextlib.contextmanager
def _long_slot(folder: Path, booting: str | None):
    """One of LONG_AT_ONCE slots, for the test of a LONG file that boots its guest (`booting`, its
    file's name), taken once every LONG file before it has taken one."""
    if booting is None:
        yield
        return
    before = _LONG_COLLECTED[:_LONG_COLLECTED.index(booting)] if booting in _LONG_COLLECTED else []
    deadline = time.monotonic() + LONG_WAIT_S  # a worker that died before its file began never says so
    while not all((folder / f"long.started.{name}").exists() for name in before) and time.monotonic() < deadline:
        time.sleep(1)
    while True:
        for n in range(LONG_AT_ONCE):
            with open(folder / f"long.slot{n}", "a") as slot:
                try:
                    fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                (folder / f"long.started.{booting}").touch()
                with _favoured(GUEST_NICE.get(booting, GUEST_NICE_DEFAULT)):
                    yield
                return
        time.sleep(1)


@contextlib.contextmanager
def _favoured(nice: int):
    """This worker, and what it starts meanwhile (the guest's emulator), at `nice` (as root)."""
    if os.geteuid() != 0:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def _session_folder() -> Path:
    """This test session's folder, shared by its workers (pytest-N)."""
    base = _CONFIG._tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def kill_run(proc: subprocess.Popen) -> None:
    """SIGKILL a vpnlab this test started, telling the session's other tests first: what it leaves
    behind until the next vpnlab command cleans it up (namespaces of a dead run) is this test's, not
    theirs (their checks for leftovers found one once)."""
    (_session_folder() / f"killed.{proc.pid}").write_text(str(os.getpid()))
    proc.kill()
    proc.wait()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# Importing asyncssh looks for an optional library with ctypes.util.find_library, which runs
# ldconfig, then gcc and ld where they are installed: probes, not programs vpnlab needs.
LIBRARY_PROBES = {"ldconfig", "gcc", "ld"}


def _declared() -> set[str]:
    from vpnlab.catalog import declared

    return set(declared(runpy.run_path(str(Path(__file__).parent / "needs.py"))["TOOLS"]))


@pytest.fixture(autouse=True)
def only_declared_programs(tmp_path_factory, monkeypatch):
    """Fails a test whose code, or the vpnlab commands it started, ran a program that neither
    vpnlab's drivers, workloads and testbed nor tests/needs.py declare: a fresh machine would
    not have it (nftables once slipped through that way)."""
    log = tmp_path_factory.mktemp("exec") / "exec.log"
    monkeypatch.setenv("VPNLAB_EXEC_LOG", str(log))
    monkeypatch.setattr(execlog, "log_path", str(log))
    yield
    if not log.exists():
        return
    ran = set()
    for line in log.read_text().splitlines():
        ran |= programs(json.loads(line))
    undeclared = sorted(ran - _declared() - LIBRARY_PROBES)
    assert not undeclared, f"programs run but declared nowhere (add them where they are used, or to tests/needs.py): {undeclared}"


def our_namespaces() -> set[str]:
    """vpnlab's namespaces, except those of another vpnlab that is running now (a second session
    on this machine): only what this test or its children created can be its leftover."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in out.splitlines() if line.startswith("vl")}
    return {n for n in names if not _foreign(n)}


def _descends_from_us(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def _foreign(namespace: str) -> bool:
    """Does this namespace belong to a live vpnlab that this test session did not start?"""
    from vpnlab.testbed.state import CLAIM, PROBE_PREFIX, STATE_ROOT, RunState

    for prefix in (PROBE_PREFIX, "vlh"):  # a capability probe; the fake hosts of tests/hosts_harness.py
        owner = namespace[len(prefix):].split("-", 1)[0]
        if namespace.startswith(prefix) and owner.isdigit():
            return Path(f"/proc/{owner}").exists() and not _descends_from_us(int(owner))
    run_id = namespace[2:].split("-", 1)[0]
    # its record, or the same renamed by the vpnlab command tearing it down (a killed run's, cleaned)
    for record in [STATE_ROOT / run_id, *STATE_ROOT.glob(f"{run_id}{CLAIM}*")]:
        try:
            state = RunState.load(record)
        except (OSError, ValueError, KeyError):
            continue
        if state.owner_alive():
            return not _descends_from_us(state.owner_pid)
        return _killed_by_another_test(state.owner_pid)
    return False


def _killed_by_another_test(owner_pid: int) -> bool:
    killer = _session_folder() / f"killed.{owner_pid}"  # kill_run
    return killer.exists() and killer.read_text() != str(os.getpid())


def orphans_of_other_tests() -> set[int]:
    """Processes of runs another test of this session SIGKILLed (kill_run): orphans until the next
    vpnlab command ends them, and not this test's leftovers (one failed a check for orphans once)."""
    from vpnlab.testbed.state import STATE_ROOT, RunState

    pids = set()
    for record in STATE_ROOT.glob("*/state.json"):  # `<id>` or, being cleaned, `<id>.cleaning-<pid>`
        try:
            state = RunState.load(record.parent)
        except (OSError, ValueError, KeyError):
            continue
        if not state.owner_alive() and _killed_by_another_test(state.owner_pid):
            pids.update(process["pid"] for process in state.processes)
    return pids


def default_namespace_snapshot() -> dict[str, str]:
    """What a run must leave exactly as it found it in the default namespace."""
    commands = {
        "addresses": ["ip", "-d", "addr"],
        "routes": ["ip", "route", "show", "table", "all"],
        "rules": ["ip", "rule"],
        "qdiscs": ["tc", "qdisc"],
        "links": ["ip", "-o", "link"],
        "nft": ["nft", "list", "ruleset"],
    }
    snap = {}
    for name, argv in commands.items():
        proc = subprocess.run(argv, capture_output=True, text=True)
        snap[name] = proc.stdout if proc.returncode == 0 else f"({argv[0]} unavailable)"
    return snap


@pytest.fixture
def no_leftovers():
    """Fails the test if it leaves a namespace of ours or changes the default namespace."""
    before_ns = our_namespaces()
    before = default_namespace_snapshot()
    yield
    left = settled(lambda: our_namespaces() - before_ns)
    assert not left, f"namespaces left behind: {sorted(left)}"
    assert default_namespace_snapshot() == before, "the default namespace changed"


def settled(found, within: float = 30.0):
    """What `found()` returns once it is empty or `within` seconds have passed: with workers in
    parallel, a run another worker's test killed on purpose (a fault) has a dead owner, so its
    namespaces look like anybody's until that test cleans them up a moment later."""
    deadline = time.monotonic() + within
    while (left := found()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture
def state(no_leftovers):
    """A run's state record for a test that builds testbeds itself; torn down after it."""
    from vpnlab.testbed.state import RunState

    st = RunState.create()
    yield st
    st.teardown()


def sample_count(out: Path) -> int:
    """Repetitions stored so far in a results directory (0 before its tables exist)."""
    import sqlite3

    if not (out / "results.sqlite").exists():
        return 0
    db = sqlite3.connect(out / "results.sqlite")
    try:
        return db.execute("SELECT count(*) FROM repetitions").fetchone()[0]
    except sqlite3.OperationalError:  # the run has created the file but not yet its tables
        return 0
    finally:
        db.close()


def default_dispositions():
    """For a child that a test signals: start it as from an interactive shell, whatever
    dispositions the suite itself inherited (a background job ignores SIGINT, nohup SIGHUP)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def run_here(study, out: Path):
    """Run a parsed study in this process, on this machine (none of it may need the VM); its plan."""
    from vpnlab.machines.capabilities import detect
    from vpnlab.plan.scenarios import check_plan, make_plan
    from vpnlab.run.runner import Runner

    plan = make_plan(study)
    caps = detect()
    assert check_plan(plan, caps) == {}
    Runner(plan, out, caps, progress=False).run()
    return plan


def recorded_algorithms(out: Path) -> tuple[dict, list]:
    """What each configuration of a run recorded of its algorithms (declared and negotiated, per layer), by
    label, and the flags of samples whose negotiated algorithms differed from the declared ones."""
    from vpnlab.algorithms import TOOL
    from vpnlab.store import Store

    store = Store.open_dir(out)
    try:
        labels = {s.id: s.vpn_label for s in store.scenarios()}
        recorded = {labels[r["scenario_id"]]: json.loads(r["output"]) for r in store.raw_outputs(TOOL)}
        return recorded, [r.flags for r in store.samples() if "algorithms" in r.flags]
    finally:
        store.close()


@pytest.fixture
def namespace():
    """A network namespace of this test's own run (lo up), removed after it."""
    from vpnlab.testbed.state import RunState

    state = RunState.create()
    name = state.namespace_name("test")
    state.add_namespace(name)
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    yield name
    state.teardown()
