"""Real hosts with a full kernel: the hosts lab (tests/hosts_harness.py: namespaces with their own
sshd, real Ansible inventory) built inside one guest of the VM backend, whose Debian kernel has netem,
kernel ESP, PPP and L2TP, and `vpnlab run --inventory` against those hosts in there.

A test file that uses this runs as a program in the guest (`python FILE WORK`, its `__main__` calls
guest_main with its cases): it builds the lab, runs the cases at once, checks each left its hosts clean,
and writes what it saw into WORK for the tests, which run on this machine after the guest has powered
off (boot, a fixture of the file's own). A boot under software emulation costs minutes: one per file.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from declared import programs
from hosts_harness import (Lab, check_seed_store, host_is_clean, leftovers, seed_hosts, stored_scenarios, stored_values,
                           wait_until)
from vpnlab.machines import vm
from vpnlab.plan.study import builtin_studies
from vpnlab.testbed.state import RunState

LAB_SUBNET = "198.19.255"  # the hosts' own network, outside the testbed's addresses (as test_hosts_study)
HOSTS = {"client": "gw-a", "gateway": "gw-b"}
GUEST_LIMIT_S = 1500  # the guest's own time limit once booted: every case of a file, under emulation
RESULTS = "results.json"
EXEC_LOG = "exec.log"  # the programs the guest's Python processes ran (tests/audit), checked here after
# The boot is set up within the first test that asks for it: that test's time limit covers the boot.
TIMEOUT_S = vm.BOOT_TIMEOUT_S + GUEST_LIMIT_S + 60


# -- the guest's side -----------------------------------------------------------------------------

def guest_main(work: Path, cases: dict[str, tuple[str, list[str], tuple[str, ...]]]) -> int:
    """Build the lab, run the cases (name -> a study's text or a built-in study's name, its --set
    assignments and the lab hosts it runs on, none shared) against it at once, tear it down;
    everything seen goes to WORK/results.json. At once: the guest has two CPUs, and a case alone keeps
    about one of them busy."""
    seen: dict = {"cases": {}}
    lab = Lab(names=tuple(name for *_, hosts in cases.values() for name in hosts), subnet=LAB_SUBNET)
    try:
        started = time.monotonic()
        lab.build()
        seen["kernel"] = os.uname().release
        seen["lab_seconds"] = round(time.monotonic() - started, 1)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
            running = {name: pool.submit(_run_case, lab, work, name, *case) for name, case in cases.items()}
            seen["cases"] = {name: future.result() for name, future in running.items()}
    finally:
        lab.teardown()
        seen["leftovers"] = leftovers()
        (work / RESULTS).write_text(json.dumps(seen, indent=1))
    return 0


def _ends(text: str, keep: int = 3000) -> str:
    """The start and the end of a long output: the first error and the last."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}\n[...]\n{text[-keep:]}"


def _run_case(lab, work: Path, name: str, study: str, sets: list[str], hosts: tuple[str, ...]) -> dict:
    """`vpnlab run --inventory` on the lab's `hosts` (as the controller), its store copied into WORK,
    and each of those hosts' state once the run has ended."""
    if study in builtin_studies():
        argv = [study]
    else:
        path = lab.dir / f"{name}.yaml"
        path.write_text(study)
        argv = [path]
    out = lab.dir / name
    started = time.monotonic()
    # the store is what the tests read: no report (its analysis and plots cost half a minute under emulation)
    result = lab.vpnlab("run", *argv, *(a for s in sets for a in ("--set", s)), "--inventory", lab.inventory,
                        "--out", out, "--no-progress", "--no-report", timeout=1200)
    case = {"exit": result.returncode, "stdout": _ends(result.stdout), "stderr": _ends(result.stderr),
            "seconds": round(time.monotonic() - started, 1), "clean": {}}
    if (out / "results.sqlite").exists():
        shutil.copy(out / "results.sqlite", work / f"{name}.sqlite")
    for host in (lab.hosts[name] for name in hosts):
        clean = wait_until(lambda: host_is_clean(host), timeout=10)
        case["clean"][host.name] = True if clean else {"processes": host.processes(), "links": host.links(),
                                                       "run": host.listdir("/run/vpnlab")}
    return case


# -- this machine's side: one boot, then the tests read what the guest saw ------------------------

class GuestRun:
    """What the guest saw: each case's exit, output, time and hosts' state, and its store."""

    def __init__(self, work: Path):
        self.work = work
        self.seen = json.loads((work / RESULTS).read_text())

    def case(self, name: str) -> dict:
        return self.seen["cases"][name]

    def scenarios(self, name: str) -> dict[tuple[str, str], dict]:
        return stored_scenarios(self.work / f"{name}.sqlite")

    def values(self, name: str) -> dict[tuple[str, str, str], list[float]]:
        return stored_values(self.work / f"{name}.sqlite")


def boot(folder: Path, program: Path, drivers: tuple[str, ...]) -> GuestRun:
    """One boot of the VM whose guest runs `program` (a test file, as guest_main), loading the kernel
    modules of `drivers` only (no udev there)."""
    problem = vm.available()
    if problem:
        pytest.fail(f"the VM backend cannot boot here: {problem}")
    work = folder / "work"
    state = RunState.create()
    # HOME as here: the guest's PID 1 has HOME=/, which is read-only there (this machine's root, shared)
    env = {"PYTHONPATH": os.environ["PYTHONPATH"], "VPNLAB_EXEC_LOG": str(work / EXEC_LOG), "HOME": str(Path.home())}
    try:
        vm.Guest(state, work, folder / "console.log", drivers=drivers).run(
            [sys.executable, program, work], GUEST_LIMIT_S, env)
    finally:
        state.teardown()
    assert (work / RESULTS).exists(), (work / "guest.log").read_text(errors="replace")[-4000:]
    run = GuestRun(work)
    print(f"\nlab built in {run.seen['lab_seconds']} s; cases: "
          + ", ".join(f"{name} {case['seconds']} s" for name, case in run.seen["cases"].items()))
    return run


def case_ran(run: GuestRun, name: str, hosts: tuple[str, ...] = tuple(HOSTS.values())) -> dict:
    """The case's record, once its `vpnlab run` succeeded and left its `hosts` clean."""
    case = run.case(name)
    assert case["exit"] == 0, case["stdout"] + case["stderr"]
    assert case["clean"] == dict.fromkeys(hosts, True), case["clean"]
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
    check_seed_store(guest.work / f"{name}.sqlite", seed, cut)
