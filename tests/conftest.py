import compileall
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from declared import programs
from scheduling import session_folder

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


pytest_plugins = ("scheduling",)  # how the tests share the machine's two cores: tests/README.md


def pytest_configure(config):
    """The suite starts hundreds of vpnlab commands: each imports vpnlab and the audit compiled rather
    than compiling them anew, also where PYTHONDONTWRITEBYTECODE keeps Python from saving what it
    compiles (once, before any worker starts)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import vpnlab

        for folder in (Path(vpnlab.__file__).parent, AUDIT):
            compileall.compile_dir(folder, quiet=2)


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration tests build namespaces and need root")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def kill_run(proc: subprocess.Popen) -> None:
    """SIGKILL a vpnlab this test started, telling the session's other tests first: what it leaves
    behind until the next vpnlab command cleans it up (namespaces of a dead run) is this test's, not
    theirs (their checks for leftovers found one once)."""
    (session_folder() / f"killed.{proc.pid}").write_text(str(os.getpid()))
    proc.kill()
    proc.wait()


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
    killer = session_folder() / f"killed.{owner_pid}"  # kill_run
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
    """Valid repetitions stored so far in a results directory (0 before its tables exist): as a resume
    counts them, not a repetition stored as failed (under load, a run's first can fail and be run again)."""
    import sqlite3

    if not (out / "results.sqlite").exists():
        return 0
    db = sqlite3.connect(out / "results.sqlite")
    try:
        return db.execute("SELECT count(*) FROM repetitions WHERE COALESCE(failure, '') = ''").fetchone()[0]
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
    from vpnlab.plan.scenarios import make_plan
    from vpnlab.plan.placement import check_plan
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
        return recorded, [r.flags for r in store.samples() if any(f.kind == "algorithms-differ" for f in r.flags)]
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
