"""Real hosts with a full kernel: the hosts lab (tests/hosts_harness.py: namespaces with their own
sshd, real Ansible inventory) built inside one guest of the VM backend, whose Debian kernel has netem,
kernel ESP, PPP and L2TP, and `vpnlab run --inventory` against those hosts from this machine, the
controller, over the guest's network (a tap in a namespace of the test's own, bridged in the guest to
the lab's switch). The controller runs here, not under emulation: in the guest, each `vpnlab run`
spent three and a half minutes on imports, the inventory and the hosts' probe before its first scenario.

A test file that uses this runs as a program in the guest (`python FILE WORK`, its `__main__` calls
guest_main with its cases): it builds the lab, says so in WORK, waits for the cases to end, checks they
left the hosts clean, and writes what it saw into WORK for the tests, which read it after the guest has
powered off (boot, a fixture of the file's own). A boot under software emulation costs minutes: one per file.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import time
from pathlib import Path

import pytest

from declared import programs
from hosts_harness import (Lab, as_controller, check_seed_store, host_is_clean, leftovers, seed_hosts, sh,
                           stored_scenarios, stored_values, wait_until)
from vpnlab.machines import vm
from vpnlab.plan.study import builtin_studies
from vpnlab.testbed.state import RunState

LAB_SUBNET = "198.19.255"  # the hosts' own network, outside the testbed's addresses (as test_hosts_study)
HOSTS = {"client": "gw-a", "gateway": "gw-b"}
GUEST_LIMIT_S = 1500  # the guest's own time limit once booted: every case of a file, under emulation
CASES_LIMIT_S = GUEST_LIMIT_S - 120  # the guest waits this long for the cases, then tears the lab down
LAB_READY, CASES_DONE = "lab.json", "cases.done"  # in WORK: the guest's lab is up; the cases have ended
RESULTS = "results.json"
EXEC_LOG = "exec.log"  # the programs the guest's Python processes ran (tests/audit), checked here after
# The boot is set up within the first test that asks for it: that test's time limit covers the boot.
TIMEOUT_S = vm.BOOT_TIMEOUT_S + GUEST_LIMIT_S + 60
Case = tuple[str, list[str], tuple[str, ...]]  # a study's text or a built-in study's name, its --set assignments, its hosts


# -- the guest's side -----------------------------------------------------------------------------

def guest_main(work: Path, cases: dict[str, Case]) -> int:
    """Build the lab for the hosts of `cases` (none shared), its switch on the guest's network, and
    say so (WORK/lab.json); once the cases have ended (WORK/cases.done), record whether each host was
    left clean and tear the lab down; everything seen goes to WORK/results.json."""
    seen: dict = {}
    lab = Lab(names=tuple(name for *_, hosts in cases.values() for name in hosts), subnet=LAB_SUBNET,
              outside=str(work))
    try:
        started = time.monotonic()
        lab.build()
        sh("ip", "link", "set", "eth0", "netns", lab.switch)  # the host's tap is the controller's port
        sh("ip", "-n", lab.switch, "link", "set", "eth0", "master", "br0", "up")
        seen["kernel"] = os.uname().release
        seen["lab_seconds"] = round(time.monotonic() - started, 1)
        (work / LAB_READY).write_text(json.dumps({"inventory": str(lab.inventory), "home": str(lab.home)}))
        wait_until(lambda: (work / CASES_DONE).exists(), timeout=CASES_LIMIT_S)
        seen["clean"] = {name: True if wait_until(lambda h=host: host_is_clean(h), timeout=10) else
                         {"processes": host.processes(), "links": host.links(), "run": host.listdir("/run/vpnlab")}
                         for name, host in lab.hosts.items()}
    finally:
        lab.teardown()
        seen["leftovers"] = leftovers()
        (work / RESULTS).write_text(json.dumps(seen, indent=1))
    return 0


# -- this machine's side: one boot, the cases run from here, then the tests read what they saw -----

class GuestRun:
    """What the cases and the guest saw: each case's exit, output, time, its hosts' state and its store."""

    def __init__(self, work: Path, cases: dict[str, dict]):
        self.work, self.cases = work, cases
        self.seen = json.loads((work / RESULTS).read_text())

    def case(self, name: str) -> dict:
        return self.cases[name]

    def scenarios(self, name: str) -> dict[tuple[str, str], dict]:
        return stored_scenarios(Path(self.cases[name]["out"]) / "results.sqlite")

    def values(self, name: str) -> dict[tuple[str, str, str], list[float]]:
        return stored_values(Path(self.cases[name]["out"]) / "results.sqlite")


def boot(folder: Path, program: Path, drivers: tuple[str, ...], cases: dict[str, Case]) -> GuestRun:
    """One boot of the VM whose guest runs `program` (a test file, as guest_main), loading the kernel
    modules of `drivers` only (no udev there), and `cases` run from here against its lab at once."""
    problem = vm.available()
    if problem:
        pytest.fail(f"the VM backend cannot boot here: {problem}")
    work = folder / "work"
    work.mkdir(parents=True)
    state = RunState.create()
    # HOME as here: the guest's PID 1 has HOME=/, which is read-only there (this machine's root, shared)
    env = {"PYTHONPATH": os.environ["PYTHONPATH"], "VPNLAB_EXEC_LOG": str(work / EXEC_LOG), "HOME": str(Path.home())}
    try:
        namespace = _tap_namespace(state)
        guest = vm.Guest(state, work, folder / "console.log", drivers=drivers, netns=namespace)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1 + len(cases)) as pool:
            booted = pool.submit(guest.run, [sys.executable, program, work], GUEST_LIMIT_S, env)
            try:
                lab = _lab_when_ready(work, booted)
                running = {name: pool.submit(_run_case, namespace, lab, folder, name, study, sets)
                           for name, (study, sets, _) in cases.items()}
                ran = {name: future.result() for name, future in running.items()}
            finally:
                (work / CASES_DONE).touch()
            booted.result()
    finally:
        state.teardown()
    assert (work / RESULTS).exists(), (work / "guest.log").read_text(errors="replace")[-4000:]
    run = GuestRun(work, ran)
    print(f"\nlab built in {run.seen['lab_seconds']} s; cases: "
          + ", ".join(f"{name} {case['seconds']} s" for name, case in ran.items()))
    return run


def _tap_namespace(state: RunState) -> str:
    """A namespace of the run's own with the controller's port to the guest's lab: the tap vm.TAP, at
    the lab's controller address."""
    name = state.namespace_name("lab")
    state.add_namespace(name)  # recorded first: teardown removes it whatever happens next
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    sh("ip", "-n", name, "tuntap", "add", "dev", vm.TAP, "mode", "tap")
    sh("ip", "-n", name, "addr", "add", f"{LAB_SUBNET}.1/24", "dev", vm.TAP)
    sh("ip", "-n", name, "link", "set", vm.TAP, "up")
    return name


def _lab_when_ready(work: Path, booted: concurrent.futures.Future) -> dict:
    """The guest's lab (its inventory and the controller's home), once it is up."""
    while not (work / LAB_READY).exists():
        if booted.done():
            booted.result()  # its error, if any
            raise AssertionError(f"the guest ended without its lab: {(work / 'guest.log').read_text(errors='replace')[-4000:]}")
        time.sleep(0.5)
    return json.loads((work / LAB_READY).read_text())


def _run_case(namespace: str, lab: dict, folder: Path, name: str, study: str, sets: list[str]) -> dict:
    """`vpnlab run --inventory` on the guest's lab as its controller, from here: its exit, output and time."""
    if study in builtin_studies():
        argv = [study]
    else:
        path = folder / f"{name}.yaml"
        path.write_text(study)
        argv = [path]
    out = folder / name
    started = time.monotonic()
    # the store is what the tests read: no report
    result = sh(*as_controller(namespace, Path(lab["home"]), sys.executable, "-m", "vpnlab", "run", *argv,
                               *(a for s in sets for a in ("--set", s)), "--inventory", lab["inventory"],
                               "--out", out, "--no-progress", "--no-report"), check=False, timeout=1200)
    return {"exit": result.returncode, "stdout": _ends(result.stdout), "stderr": _ends(result.stderr),
            "seconds": round(time.monotonic() - started, 1), "out": str(out)}


def _ends(text: str, keep: int = 3000) -> str:
    """The start and the end of a long output: the first error and the last."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}\n[...]\n{text[-keep:]}"


def case_ran(run: GuestRun, name: str, hosts: tuple[str, ...] = tuple(HOSTS.values())) -> dict:
    """The case's record, once its `vpnlab run` succeeded and left its `hosts` clean."""
    case = run.case(name)
    assert case["exit"] == 0, case["stdout"] + case["stderr"]
    clean = {host: run.seen["clean"][host] for host in hosts}
    assert clean == dict.fromkeys(hosts, True), clean
    return case


def check_guest_left_nothing(guest: GuestRun) -> None:
    """A distribution kernel, not this machine's; every namespace and process of the lab gone; only
    declared programs run in the guest too."""
    assert guest.seen["kernel"] != os.uname().release
    assert guest.seen["leftovers"] == []
    assert (guest.work / "guest.exit").read_text().strip() == "0", (guest.work / "guest.log").read_text()[-4000:]
    ran_there = (guest.work / EXEC_LOG).read_text()
    assert {"sshd", "ip"} <= set().union(*map(programs, map(json.loads, ran_there.splitlines())))
    # the suite's own check (conftest.only_declared_programs) reads this test's log after it
    with open(os.environ["VPNLAB_EXEC_LOG"], "a") as log:
        log.write(ran_there)


def check_seed_ran(guest: GuestRun, seed: str, cut: dict) -> None:
    """A shortened seed's case (hosts_harness.seed_cut): run and its hosts left clean, its store as
    hosts_harness.check_seed_store wants it."""
    name = f"seed-{seed}"
    case_ran(guest, name, tuple(seed_hosts(seed, cut).values()))
    check_seed_store(Path(guest.case(name)["out"]) / "results.sqlite", seed, cut)
