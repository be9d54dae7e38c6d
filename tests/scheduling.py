"""How the suite's tests share the machine (a pytest plugin, loaded by conftest.py): the order
tests are handed to xdist's workers, the tests that need the machine alone, and the VM guests'
slots and priority. Why each number is what it is: tests/README.md. (PYTEST_DONT_REWRITE: conftest.py
imports it before pytest loads it as a plugin; it asserts nothing.)"""

import contextlib
import fcntl
import os
import time
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

_CONFIG: pytest.Config | None = None


def pytest_configure(config):
    global _CONFIG
    _CONFIG = config


def pytest_collection_modifyitems(config, items):
    items[:] = _in_turn(items)


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
    "test_transfer.py::test_compression_helps_only_text":
        "more than 21 Mbit/s of text through compression on a 20 Mbit/s link",
    "test_background.py::test_every_protocol_crosses_the_tunnel_and_takes_its_share_of_the_link":
        "the link over 80% full with the background's traffic",
    "test_observers.py::test_latency_under_load_and_bytes_on_the_wire": "a round trip under load over 3 x the idle one",
    "test_udp_capacity.py::test_on_a_tbf_shaped_link_the_capacity_is_the_links_rate":
        "UDP capacity within 7% of a 40 Mbit/s link: a probe that lost 1% to the suite's load ended it at 13.5",
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


# Each boots the VM and runs a study there for minutes: handed out first, started once the ALONE
# tests are done, LONG_AT_ONCE at a time, in this order.
LONG = ("test_vm_remote_access.py", "test_hosts_kernel.py", "test_vm_site_to_site.py")
LONG_AT_ONCE = 2
LONG_WAIT_S = 1200  # at most, for the ALONE tests (a worker that died with them never says they are done)
# Each guest's nice (its emulator's scheduling group takes the caller's nice: core/sessions.py).
GUEST_NICE = {"test_vm_remote_access.py": -3}
GUEST_NICE_DEFAULT = 0
# The longest other files, handed out first, longest first, once the ALONE tests are done.
# Then those that ended last when handed out as collected, most CPU first: the suite's last minute
# had one file left running on the two cores.
# test_tune_field_live.py stays away from test_tune_live.py's start: in the suite run that started them
# together (2026-12-07) the latter's first look dropped nothing, most likely its bytes per byte blurred by
# the second race on the two cores (alone, it dropped four candidates at p < 0.0005).
HEAVY = ("test_drivers.py", "test_hosts_seeds.py", "test_cli.py", "test_tune_live.py",
         "test_faults.py", "test_overlay_drivers.py", "test_hosts_workloads.py", "test_report.py",
         "test_tune_field_live.py", "test_mesh.py",
         "test_cpu_cgroups.py", "test_bad_input.py",
         "test_stats_comparisons.py", "test_yggdrasil_current.py", "test_hosts.py", "test_damaged_store.py",
         "test_nebula_current.py", "test_wireguard_current.py", "test_vm.py", "test_tailscale.py",
         "test_findings.py", "test_tune_race.py", "test_overlay_drivers_b.py", "test_hosts_study.py",
         "test_safety.py", "test_results_dir.py", "test_transfer.py", "test_ppp_ocserv_nodes.py")


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
    folder = session_folder()
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


def session_folder() -> Path:
    """This test session's folder, shared by its workers (pytest-N)."""
    base = _CONFIG._tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0
