"""The VM backend and the drivers that need a full kernel: PPTP, L2TP, L2TP/IPsec, libreswan,
kernel ESP with IPComp, netem.

Two boots here check a guest that hangs and one that dies; the unit tests check the pieces that need
no VM. The daemons run in the real VM (software emulation on the development machines) in two
studies of their own files, one boot each, so that the two run side by side:
test_vm_remote_access.py and test_vm_site_to_site.py."""

import sqlite3
import time
from pathlib import Path

import pytest

from vpnlab.machines import vm
from vpnlab.machines.capabilities import detect
from vpnlab.catalog import DRIVERS
from vpnlab.plan.scenarios import make_plan
from vpnlab.run.runner import Runner
from vpnlab.store import Store
from vpnlab.core.errors import StudyError
from vpnlab.plan.study import parse_study

from vm_harness import our_qemus


@pytest.mark.parametrize("driver,options,problem", [
    ("pptp", {}, "profile"),
    ("l2tp", {"ipsec": False}, "profile"),
    ("l2tp", {"esp": "3des-sha1"}, "options.esp"),
])
def test_legacy_protocols_refuse_the_fips_profile(driver, options, problem):
    d = DRIVERS[driver]
    assert d.check(d.Options(**options), "fips").startswith(problem)
    assert d.check(d.Options(**options), "default") is None


def test_stateful_mppe_is_refused_before_anything_runs():
    """Two pppds always settle on stateless MPPE: a study asking for stateful mode would measure
    stateless under its name."""
    with pytest.raises(StudyError, match=r"vpns\[1\]\.options\.stateful: pppd cannot be made to use stateful MPPE"):
        parse_study("name: s\nvpns: [{driver: none}, {driver: pptp, options: {stateful: true}}]\n"
                    "workloads: [{kind: ping}]\n")


def test_legacy_overhead_models():
    pptp, l2tp = DRIVERS["pptp"], DRIVERS["l2tp"]
    # as measured on the WAN for a 1028-byte packet (the integration test checks them again)
    assert pptp.overhead(pptp.Options(), "default", "pptpd", 1028) == 44
    assert l2tp.overhead(l2tp.Options(ipsec=False), "default", "xl2tpd", 1028) == 38
    assert l2tp.overhead(l2tp.Options(), "default", "xl2tpd+esp", 1028) == 84


def test_libreswan_shares_strongswans_esp_names_and_model():
    libreswan, strongswan = DRIVERS["libreswan"], DRIVERS["strongswan"]
    for esp in ("aes128-sha1", "aes256gcm16", "3des-sha1"):
        assert (libreswan.overhead(libreswan.Options(esp=esp), "default", "kernel", 1028)
                == strongswan.overhead(strongswan.Options(esp=esp), "default", "kernel", 1028))
    assert libreswan.check(libreswan.Options(esp="3des-sha1"), "fips").startswith("options.esp")
    assert libreswan.check(libreswan.Options(esp="aes128-sha256"), "fips") is None
    with pytest.raises(ValueError):
        libreswan.Options(esp="aes128-sha512")


def test_libreswan_is_found_installed_or_unpacked(monkeypatch, tmp_path):
    import dataclasses

    from vpnlab import tools
    from vpnlab.tools import unpacked
    monkeypatch.setattr(unpacked, "package_folder", lambda package: tmp_path / "packages" / package)
    declared = DRIVERS["libreswan"].tools[0]
    assert declared.command == "pluto" and declared.private
    tool = dataclasses.replace(declared, command="vpnlab-no-such-pluto", path="/vpnlab-not-installed/ipsec/pluto")
    pluto = tmp_path / "packages" / "libreswan" / "vpnlab-not-installed" / "ipsec" / "pluto"
    assert tools.find(tool) is None
    pluto.parent.mkdir(parents=True)
    pluto.write_text("#!/bin/sh\nexit 127\n")  # as when a library it needs is not installed
    pluto.chmod(0o755)
    assert tools.find(tool) is None
    pluto.write_text("#!/bin/sh\necho Libreswan 4.10\n")
    assert tools.find(tool) == str(pluto)
    asked = dataclasses.replace(tool, version=("pluto", "--version"))
    assert tools.versions({"pluto": (asked, str(pluto))}) == {"pluto": "Libreswan 4.10"}


def test_merge_takes_a_guest_store_once(tmp_path):
    plan = make_plan(parse_study("name: m\nrepetitions: 2\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n"))
    scenario = plan.scenarios[0]
    host, guest = Store(tmp_path / "host.sqlite"), Store(tmp_path / "guest.sqlite")
    run = host.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                         study_name="m", study_text="")
    grun = guest.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                           study_name="m", study_text="")
    for store in (host, guest):
        store.add_scenario(scenario)
    guest.record_repetition(grun, scenario.id, 1, {"rtt_avg_ms": 20.5}, {"ping": "raw"}, ["f"])
    guest.set_status(scenario.id, "running")
    guest.close()
    for _ in range(2):  # merging again (a resumed run) changes nothing
        assert host.merge(tmp_path / "guest.sqlite", run, "measured in a VM") == [scenario.id]
    assert host.values(scenario.id, "rtt_avg_ms") == [20.5]
    assert host.done_repetitions(scenario.id) == {1}
    assert host.raw_output(scenario.id, 1, "ping") == "raw"
    assert host.scenarios()[0].notes == "measured in a VM"


def _store_with_run(path: Path, scenario) -> tuple[Store, int]:
    store = Store(path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="m", study_text="")
    store.add_scenario(scenario)
    return store, run


def test_a_guest_that_did_not_know_the_hosts_repetitions_loses_none_of_its_own(tmp_path):
    """A guest store numbering its repetitions from 1 again (as before guests were handed their
    history) is merged under the next free numbers, samples and raw output with them."""
    scenario = make_plan(parse_study("name: m\nrepetitions: 4\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n")).scenarios[0]
    host, run = _store_with_run(tmp_path / "host.sqlite", scenario)
    guest, grun = _store_with_run(tmp_path / "guest.sqlite", scenario)
    for store, r, who, values in ((host, run, "host", (10.0, 11.0)), (guest, grun, "guest", (20.0, 21.0))):
        for n, value in enumerate(values, 1):
            time.sleep(0.002)  # a repetition is known by its completion time (ms): measurements take longer
            store.record_repetition(r, scenario.id, n, {"rtt_avg_ms": value}, {"ping": f"{who} {n}"}, [])
    guest.set_status(scenario.id, "running")
    guest.close()
    for _ in range(2):  # merging again changes nothing
        host.merge(tmp_path / "guest.sqlite", run, "measured in a VM")
        assert host.values(scenario.id, "rtt_avg_ms") == [10.0, 11.0, 20.0, 21.0]
    assert [host.raw_output(scenario.id, n, "ping") for n in (1, 2, 3, 4)] == ["host 1", "host 2", "guest 1", "guest 2"]


def test_a_resumed_guest_goes_on_from_the_repetitions_the_host_has(tmp_path):
    """The host hands the guest the job's history; the guest's Runner (here on the host, with real
    pings in namespaces) measures only the repetitions still missing, and the merge adds just those."""
    plan = make_plan(parse_study("name: m\nrepetitions: 3\nvpns: [{driver: none}]\n"
                                 "workloads: [{kind: ping, count: 3, interval_s: 0.05}]\n"))
    scenario = plan.scenarios[0]
    host, run = _store_with_run(tmp_path / "host.sqlite", scenario)
    for n in (1, 2):
        host.record_repetition(run, scenario.id, n, {"rtt_avg_ms": 5.0 + n}, {"ping": f"host {n}"}, [], n, 0)
    guest_dir = tmp_path / "vm" / vm.RESULTS
    host.hand_over(guest_dir / "results.sqlite", [scenario.id])
    with sqlite3.connect(guest_dir / "results.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # a 9p share has no WAL
    Runner(plan, guest_dir, detect(), progress=False).run()
    host.merge(guest_dir / "results.sqlite", run, "measured in a VM")
    assert host.done_repetitions(scenario.id) == {1, 2, 3}
    values = host.values(scenario.id, "rtt_avg_ms")
    assert values[:2] == [6.0, 7.0] and 0 < values[2] < 5  # the host's two, and one real ping through veth
    assert host.raw_output(scenario.id, 1, "ping") == "host 1"


def test_a_guest_runs_a_scenario_as_far_as_the_host_wants_with_stein_weighing_finished_peers(tmp_path):
    """The host's wireguard scenario is measured to Stein's total (a wide pilot: the cap); its compared
    no-VPN scenario has a tight pilot of its own. Both go to the guest (guest.main, here on the host,
    real pings in namespaces), which runs no VPN to the wireguard total, as the host wants: a guest
    that knew only no VPN stopped at its pilot and the host then failed it as unfinished."""
    from vpnlab.run import guest
    from vpnlab.store import DB_NAME

    study = ("name: m\nrepetitions: {min: 3, max: 5, ci_target_pct: 1}\nvpns: [{driver: none}, {driver: wireguard}]\n"
             "workloads: [{kind: ping, count: 3, interval_s: 0.05}]\n")
    plan = make_plan(parse_study(study))
    plain, wireguard = sorted(plan.scenarios, key=lambda s: bool(s.vpn.layers))
    host = Store.open_dir(tmp_path)
    run = host.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                         study_name="m", study_text=study)
    for scenario in plan.scenarios:
        host.add_scenario(scenario, "vm")
    for n, value in enumerate((5.0, 10.0, 20.0, 9.0, 11.0), 1):
        host.record_repetition(run, wireguard.id, n, {"rtt_avg_ms": value}, {}, [], n, 0)
    host.set_status(wireguard.id, "done")
    for n, value in enumerate((0.05, 0.05001, 0.05), 1):  # alone, its pilot would stop it here
        host.record_repetition(run, plain.id, n, {"rtt_avg_ms": value}, {}, [], n, 1)
    runner = Runner(plan, tmp_path, detect(), progress=False, in_vm={plain.id, wireguard.id})
    assert runner._left(host, plain) == 2
    work = tmp_path / "vm"
    runner._hand_to_guest(host, work)
    assert guest.main(work) == 0
    host.merge(work / vm.RESULTS / DB_NAME, run, "measured in a VM")
    assert len(host.done_repetitions(plain.id)) == 5 and runner._left(host, plain) == 0
    assert len(host.done_repetitions(wireguard.id)) == 5  # not run again
    assert {s.id: s.status for s in host.scenarios()} == {plain.id: "done", wireguard.id: "done"}


def test_a_scenario_measured_to_its_rule_by_an_interrupted_sitting_is_settled_on_resume(tmp_path):
    """A guest killed between a round's last repetition and its settling leaves 'running' behind; the
    resumed run has nothing to measure for it and marks it done, so the report and its
    recommendations count it."""
    plan = make_plan(parse_study("name: m\nrepetitions: 2\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n"))
    scenario = plan.scenarios[0]
    store, run = _store_with_run(tmp_path / "results.sqlite", scenario)
    for n in (1, 2):
        store.record_repetition(run, scenario.id, n, {"rtt_avg_ms": 0.05}, {}, [], n, 0)
    store.set_status(scenario.id, "running")
    store.close()
    assert Runner(plan, tmp_path, detect(), progress=False).run() == "completed"
    store = Store.open_dir(tmp_path)
    assert store.status(scenario.id) == "done" and store.done_repetitions(scenario.id) == {1, 2}
    store.close()


def test_kvm_is_not_trusted_without_the_cpu_flag(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu vme sse2 aes\n")
    real = vm.Path

    def fake_path(p, *a):
        return cpuinfo if str(p) == "/proc/cpuinfo" else real(p, *a)
    monkeypatch.setattr(vm, "Path", fake_path)
    assert vm.kvm_works() is False


def test_a_vm_that_cannot_start_fails_clearly_and_leaves_no_emulator(monkeypatch, tmp_path):
    if vm.available():
        pytest.skip(vm.available())
    real = vm.find_kernel()
    garbage = tmp_path / "vmlinuz-garbage"
    garbage.write_bytes(b"not a kernel" * 100)
    monkeypatch.setattr(vm, "find_kernel", lambda: vm.Kernel(real.version, garbage, real.modules, "test"))
    monkeypatch.setattr(vm, "kvm_works", lambda: False)
    state = vm.RunState.create()
    try:
        with pytest.raises(vm.VmError, match="stopped before the guest finished"):
            vm.Guest(state, tmp_path / "work", tmp_path / "console.log").run(["true"], 30, {})
    finally:
        state.teardown()
    assert our_qemus(tmp_path) == set()


def test_a_guest_whose_done_line_the_kernel_broke_is_done_by_its_exit_file(tmp_path):
    """CI's console once read "vpnlab-guest: do[  465.157077] sysrq: Power Off\\nne": the kernel's
    message as the guest powers off, printed into the middle of DONE. The exit file the guest wrote
    before it says the command ended; without it, the guest did not finish."""
    guest = vm.Guest(None, tmp_path, tmp_path / "console.log")
    broken = "vpnlab-guest: exit 0\nvpnlab-guest: do[  465.157077] sysrq: Power Off\nne\n"
    assert not guest._finished(broken)
    (tmp_path / vm.EXIT_FILE).write_text("0\n")
    assert guest._finished(broken)
    assert guest._finished(vm.DONE) and vm.DONE not in broken


@pytest.mark.integration
@pytest.mark.parametrize("command,error", [
    (["sleep", "600"], "did not finish within 1 s"),  # a guest that hangs is stopped at its time limit
    (["sh", "-c", "echo c > /proc/sysrq-trigger"], "stopped before the guest finished"),  # a guest that dies
])
def test_a_guest_that_hangs_or_dies_fails_clearly_and_leaves_no_emulator(tmp_path, command, error):
    if vm.available():
        pytest.skip(vm.available())
    state = vm.RunState.create()
    guest = vm.Guest(state, tmp_path / "work", tmp_path / "console.log")
    try:
        with pytest.raises(vm.VmError, match=error) as failure:
            guest.run(command, 1, {})
    finally:
        state.teardown()
    assert str(tmp_path / "console.log") in str(failure.value)
    assert our_qemus(tmp_path) == set()
    # it had booted with its vCPUs: under software emulation one for every two cores here (vm.tcg_cpus)
    assert guest.vcpus == (2 if guest.accel == "kvm" else min(2, vm.tcg_cpus()))
    assert f"{vm.READY} kernel " in (console := (tmp_path / "console.log").read_text()), console
    assert f", {guest.vcpus} cpus" in console, console


def test_under_software_emulation_a_guest_has_one_vcpu_for_every_two_cores(monkeypatch):
    for cores, vcpus in ((1, 1), (2, 1), (3, 1), (4, 2), (16, 8)):
        monkeypatch.setattr(vm.os, "sched_getaffinity", lambda _, n=cores: set(range(n)))
        assert vm.tcg_cpus() == vcpus


def test_a_vpnlab_living_in_tmp_is_kept_through_the_guests_empty_tmp(tmp_path, monkeypatch):
    """A clone in /tmp (CI's, a user's) would be hidden by the tmpfs the guest mounts there: the folder
    it runs from is bind-mounted aside before and moved back after."""
    if not tmp_path.is_relative_to("/tmp"):
        pytest.skip("the test's folder is not under /tmp")
    home = Path("/tmp") / tmp_path.relative_to("/tmp").parts[0]
    monkeypatch.chdir(tmp_path)
    kept = vm._keep_through_tmpfs()
    assert f"mount --bind '{home}' /run/vpnlab-held/" in kept["hold"]
    assert "mount --move /run/vpnlab-held/" in kept["restore"] and f"'{home}'" in kept["restore"]
