"""Each tunnel end's CPU from its own cgroup, with real tunnels and real traffic: the figure is there,
agrees with the clock ticks, the ends sit on the cores recorded, and no cgroup is left behind after
a run, an error, SIGTERM, or a crash cleaned up by `vpnlab clean`."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_dispositions, kill_run, run_here
from vpnlab.run import repetition
from vpnlab.machines.capabilities import detect
from vpnlab.core.errors import TunnelError
from vpnlab.testbed.cgroups import assign, cores, this_machine
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.placement import check_plan
from vpnlab.run.runner import Runner
from vpnlab.store import Store
from vpnlab.plan.study import parse_study
from vpnlab.testbed.state import STATE_ROOT

pytestmark = pytest.mark.integration
VPNLAB = [sys.executable, "-m", "vpnlab"]
WG = "{driver: wireguard, options: {implementation: wireguard-go}}"
STUDY = f"""
name: cgroups
repetitions: 1
topology: site-to-site
vpns:
  - {WG}
  - {{driver: wireguard, options: {{implementation: wireguard-go}}, inner: {{driver: wireguard, options: {{implementation: wireguard-go, port: 51821}}}}}}
links: [{{rate_mbit: 100}}]
workloads: [{{kind: tcp, duration_s: 2, omit_s: 0}}]
"""


def our_cgroups(run_id: str) -> list[Path]:
    parent = this_machine().parent
    return sorted(parent.glob(f"vl{run_id}-*")) if parent else []


def test_each_tunnel_end_is_counted_in_its_own_cgroup_on_its_own_core(tmp_path, no_leftovers):
    accounting = this_machine()
    if accounting.method == "ticks":  # vpnlab's fallback: nothing here to compare the cgroups with
        pytest.skip(f"no cgroup CPU accounting on this machine: {accounting.why_not}")
    plan = run_here(parse_study(STUDY), tmp_path)
    store = Store.open_dir(tmp_path)
    single, nested = plan.scenarios
    records = {sid: json.loads(store.raw_output(sid, 1, "cpu")) for sid in (single.id, nested.id)}
    values = {sid: {s.metric: s.value for s in store.samples() if s.scenario_id == sid and s.repetition == 1}
              for sid in records}
    notes = {sc.id: sc.notes for sc in store.scenarios()}
    assert {sc.id: sc.status for sc in store.scenarios()} == {single.id: "done", nested.id: "done"}
    store.close()
    for sid, record in records.items():
        assert record["method"] == accounting.method
        for side in ("client", "gateway"):
            cgroup_s, ticks_s = record["cgroup_s"][side], record["ticks_s"][side]
            # wireguard-go carried a TCP stream for 2 s: more than two ticks' worth (beside the suite's load
            # it once spent only 0.047 s, its stream starved)
            assert cgroup_s > 0.02, record
            # the same daemons by two clocks: ticks are 10 ms each, read per process
            assert abs(cgroup_s - ticks_s) <= 0.2 * cgroup_s + 0.05, record
            assert values[sid][f"cpu_vpn_{side}_pct"] == pytest.approx(100 * cgroup_s / record["wall_s"])
        for end in record["ends"]:
            assert not Path(end["cgroup"]).exists(), "a tunnel end's cgroup was left behind"
    # one tunnel: two ends, pinned when there are two cores, and the kernel says they are where recorded
    one = records[single.id]
    assert [(e["side"], e["role"]) for e in one["ends"]] == [("client", "gw-a0"), ("gateway", "gw-b0")]
    wanted = assign(2, cores())
    assert one["pinned"] == (wanted is not None) and [e["core"] for e in one["ends"]] == (wanted or [None, None])
    if wanted:
        assert one["observed_cores"] == {"gw-a0": str(wanted[0]), "gw-b0": str(wanted[1])}
    # nested: four ends; on a machine with fewer cores they share them, and the scenario says so
    two = records[nested.id]
    assert len(two["ends"]) == 4 and two["pinned"] == (len(cores()) >= 4)
    if not two["pinned"]:
        assert two["placement"] == f"not pinned: {len(cores())} cores for 4 tunnel ends"
        assert two["placement"] in notes[nested.id]


def test_a_study_that_turns_pinning_off_leaves_its_daemons_on_every_core(tmp_path, no_leftovers):
    study = parse_study(f"name: free\npin_tunnel_ends: false\nvpns: [{WG}]\n"
                        "workloads: [{kind: ping, count: 5, interval_s: 0.02}]\n")
    (scenario,) = run_here(study, tmp_path).scenarios
    store = Store.open_dir(tmp_path)
    record = json.loads(store.raw_output(scenario.id, 1, "cpu"))
    (notes,) = [sc.notes for sc in store.scenarios()]
    store.close()
    assert not record["pinned"] and all(end["core"] is None for end in record["ends"])
    assert record["placement"] == "not pinned: the study turns pinning off (pin_tunnel_ends: false)"
    assert record["placement"] in notes
    # what the kernel says: each end's daemons may run wherever vpnlab itself may
    ours = re.search(r"^Cpus_allowed_list:\s*(\S+)", Path("/proc/self/status").read_text(), re.M).group(1)
    if this_machine().parent is not None:  # read through each end's cgroup
        assert list(record["observed_cores"].values()) == [ours, ours]


def test_cgroup_v2_accounting_on_this_kernel(tmp_path, no_leftovers, monkeypatch):
    """Users' machines have pure cgroup v2. Where this one chose v1 (its controllers are bound there),
    the v2 hierarchy beside it still keeps cpu.stat's usage_usec: the v2 path, run for real there."""
    from vpnlab.testbed import cgroups as placement

    if this_machine().method == "cgroup2":
        pytest.skip("the first test ran cgroup v2 already")
    membership = Path("/proc/self/cgroup").read_text()
    parents = [placement._inside(point, root, placement._own(membership, lambda hid, names: hid == "0"))
               for fstype, point, root, _ in placement._mounts(Path("/proc/self/mountinfo").read_text())
               if fstype == "cgroup2"]
    if not any(parents):
        pytest.skip("no cgroup v2 hierarchy mounted here")
    monkeypatch.setattr(placement, "this_machine", lambda: placement.Accounting("cgroup2", next(filter(None, parents))))
    plan = make_plan(parse_study(f"name: v2\nvpns: [{WG}]\nworkloads: [{{kind: tcp, duration_s: 2, omit_s: 0}}]\n"))
    assert check_plan(plan, detect()) == {}
    Runner(plan, tmp_path, detect(), progress=False).run()
    store = Store.open_dir(tmp_path)
    record = json.loads(store.raw_output(plan.scenarios[0].id, 1, "cpu"))
    store.close()
    assert record["method"] == "cgroup2"
    for side in ("client", "gateway"):
        cgroup_s, ticks_s = record["cgroup_s"][side], record["ticks_s"][side]
        assert cgroup_s > 0.05 and abs(cgroup_s - ticks_s) <= 0.2 * cgroup_s + 0.05, record
    assert not any(Path(end["cgroup"]).exists() for end in record["ends"])


def test_no_cgroup_is_left_after_an_error(tmp_path, state, monkeypatch):
    """A repetition that fails once its daemons run (in their cgroups) takes the cgroups away."""
    if this_machine().parent is None:
        pytest.skip(f"no cgroup accounting here: {this_machine().why_not}")
    plan = make_plan(parse_study(f"name: e\nvpns: [{WG}]\nworkloads: [{{kind: ping, count: 2}}]\n"))
    assert check_plan(plan, detect()) == {}
    seen = {}

    def fail(stage, bed, scenario, log_dir):
        seen["procs"] = {end.node.role: (end.group / "cgroup.procs").read_text().split() for end in bed.placement.ends}
        raise TunnelError("injected after the daemons started")
    monkeypatch.setattr(repetition, "prove_and_measure", fail)
    attempt = repetition.run_repetition(plan.scenarios[0], state, tmp_path, arrivals="no background")
    assert attempt.failure == "injected after the daemons started"
    assert all(seen["procs"].values()), seen  # each end's daemon was in its cgroup
    assert our_cgroups(state.run_id) == [] and state.cgroups == []


def _run_until_its_daemons_run(tmp_path: Path, name: str) -> tuple[subprocess.Popen, list[Path], str]:
    study = tmp_path / f"{name}.yaml"
    study.write_text(f"name: {name}\nvpns: [{WG}]\nworkloads: [{{kind: tcp, duration_s: 30}}]\n")
    proc = subprocess.Popen([*VPNLAB, "run", study, "--out", tmp_path / name, "--no-progress", "--backend", "netns"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_dispositions)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for record in STATE_ROOT.glob("*/state.json"):
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            groups = [Path(g) for g in data.get("cgroups", [])]
            if data["owner_pid"] == proc.pid and len(groups) == 2 and all(
                    (g / "cgroup.procs").exists() and (g / "cgroup.procs").read_text().strip() for g in groups):
                return proc, groups, data["run_id"]
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the run's daemons never showed up in their cgroups: {proc.communicate()[1][-2000:]}")


def test_no_cgroup_is_left_after_sigterm_nor_after_a_crash_and_vpnlab_clean(tmp_path, no_leftovers):
    if this_machine().parent is None:
        pytest.skip(f"no cgroup accounting here: {this_machine().why_not}")
    proc, groups, _ = _run_until_its_daemons_run(tmp_path, "term")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert [g for g in groups if g.exists()] == [], "cgroups left after SIGTERM"

    proc, groups, run_id = _run_until_its_daemons_run(tmp_path, "crash")
    kill_run(proc)  # nothing of vpnlab's runs to clean up: its daemons go on in their cgroups
    assert all(g.exists() for g in groups)
    cleaned = subprocess.run([*VPNLAB, "clean"], capture_output=True, text=True, timeout=60)
    # A vpnlab started meanwhile by someone else may be cleaning it (then: "nothing to clean"): until it is done
    deadline = time.monotonic() + 30
    while list(STATE_ROOT.glob(f"{run_id}*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [g for g in groups if g.exists()] == [], "cgroups left after vpnlab clean:\n" + cleaned.stdout
