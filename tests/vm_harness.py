"""One study's scenarios in one boot of the VM backend, and what they recorded: the shared part of
the files that boot the VM for a study (test_vm_remote_access.py, test_vm_site_to_site.py)."""

import sqlite3
import subprocess
from pathlib import Path

import pytest

from vpnlab.machines import vm
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.placement import add_vm_twins, place
from vpnlab.plan.study import parse_study
from vpnlab.run.runner import Runner
from vpnlab.store import Store
from vpnlab.workloads.iperf import raw_series
from vpnlab.testbed.state import RunState

from shared_run import held_like_a_test


def our_qemus(folder: Path) -> set[str]:
    """The emulators running for this test: their command lines name its folder (other sessions
    on this machine boot VMs of their own meanwhile)."""
    out = subprocess.run(["pgrep", "-a", "-f", f"{vm.QEMU} -nodefaults"], capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if str(folder) in line}



class VmRun:
    """One study's run with its VM scenarios in one boot: every scenario's status, notes and
    where it was measured, and each metric's mean, keyed by VPN label, link label and workload kind."""

    def __init__(self, folder: Path, plan):
        self.folder, self.plan = folder, plan
        db = sqlite3.connect(folder / "results.sqlite")
        label = "vpn_label, link_label, workload"
        self.status = {row[:3]: f"{row[3]} {row[4] or ''}".strip()
                       for row in db.execute(f"SELECT {label}, status, failure FROM scenarios")}
        self.notes = {row[:3]: row[3] or "" for row in db.execute(f"SELECT {label}, notes FROM scenarios")}
        self.measured_in = {row[:3]: row[3] for row in db.execute(f"SELECT {label}, measured_in FROM scenarios")}
        self.vm_flags = [row[0] for row in db.execute("SELECT r.flags FROM repetitions r JOIN scenarios sc"
                                                      " ON sc.id = r.scenario_id WHERE sc.measured_in = 'vm'")]
        self.values = {}
        for vpn, link, workload, metric, value in db.execute(
                "SELECT sc.vpn_label, sc.link_label, sc.workload, s.metric, avg(s.value) FROM samples s"
                " JOIN scenarios sc ON sc.id = s.scenario_id GROUP BY 1, 2, 3, 4"):
            self.values[(vpn, link, workload, metric)] = value
        db.close()

    def intervals(self, key: tuple[str, str, str]) -> list[float]:
        """Mbit/s in each of iperf3's 1-s intervals (after the warm-up) of a scenario's first repetition."""
        return self._read(key, lambda store, sid: [mbps for _, mbps in
                                                   raw_series(store.raw_output(sid, 1, "iperf3") or "")])

    def _read(self, key: tuple[str, str, str], read):
        """`read(store, scenario id)` of the scenario keyed (VPN label, link label, workload kind)."""
        store = Store.open_dir(self.folder)
        try:
            return read(store, next(r.id for r in store.scenarios() if (r.vpn_label, r.link_label, r.workload) == key))
        finally:
            store.close()


def run_in_vm(study_text: str, folder: Path, keep, host=lambda scenario: False, beside=False) -> VmRun:
    """Run the scenarios of a study that `keep` selects in the VM (even where this kernel could
    run them), except those `host` selects, which run here, each with its twin in the VM: one boot.
    `beside`: with the record of another live vpnlab run on the machine all along."""
    problem = vm.available()
    if problem and "not installed" not in problem:
        pytest.fail(problem)
    plan = make_plan(parse_study(study_text))
    plan.drop({s.index for s in plan.scenarios if not keep(s)})
    placed = place(plan, "vm")
    caps, in_vm = placed.caps, placed.in_vm
    assert placed.cannot == {}
    assert in_vm == {s.id for s in plan.scenarios}
    here = {s.id for s in plan.scenarios if host(s)}
    in_vm -= here
    twins = add_vm_twins(plan, in_vm)  # as `auto` does when only the VPN needs the VM
    assert len(twins) == len(here)
    with held_like_a_test(folder / "checks"):
        other = RunState.create() if beside else None
        try:
            Runner(plan, folder / "out", caps, progress=False, in_vm=in_vm | twins).run()
        finally:
            if other:
                other.teardown()
    run = VmRun(folder / "out", plan)
    assert all(v.startswith("done") for v in run.status.values()), run.status
    assert our_qemus(folder) == set(), "an emulator was left running"
    assert len(list((folder / "out" / "logs").glob("vm-run*-console.log"))) == 1  # one boot for the study
    return run
