"""The VM backend and the drivers that need a full kernel: PPTP, L2TP, L2TP/IPsec, libreswan,
kernel ESP with IPComp, netem.

The integration tests boot the real VM (software emulation on the development machines) and run
real daemons in it. A boot and the guest's start cost more than a minute there, so the scenarios
run as two studies, one boot each (remote-access and site-to-site), and several tests read each
study's results; two more boots check a guest that hangs and one that dies. The unit tests check
the pieces that need no VM."""

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from vpnlab.machines import vm
from vpnlab.machines.capabilities import detect
from vpnlab.catalog import DRIVERS
from vpnlab.plan.scenarios import add_vm_twins, make_plan, place
from vpnlab.run.runner import Runner
from vpnlab.store import Store
from vpnlab.plan.study import parse_study
from vpnlab.testbed.state import RunState

from shared_run import held_like_a_test


@pytest.mark.parametrize("driver,options,problem", [
    ("pptp", {}, "profile"),
    ("l2tp", {"ipsec": False}, "profile"),
    ("l2tp", {"esp": "3des-sha1"}, "options.esp"),
])
def test_legacy_protocols_refuse_the_fips_profile(driver, options, problem):
    d = DRIVERS[driver]
    assert d.check(d.Options(**options), "fips").startswith(problem)
    assert d.check(d.Options(**options), "default") is None


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
    from vpnlab.machines import unpacked
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
    assert tools.version(dataclasses.replace(tool, version=("pluto", "--version")), str(pluto)) == "Libreswan 4.10"


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
    from vpnlab.machines import guest
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


def our_qemus(folder: Path) -> set[str]:
    """The emulators running for this test: their command lines name its folder (other sessions
    on this machine boot VMs of their own meanwhile)."""
    out = subprocess.run(["pgrep", "-a", "-f", f"{vm.QEMU} -nodefaults"], capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if str(folder) in line}


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


@pytest.mark.integration
@pytest.mark.parametrize("command,error", [
    (["sleep", "600"], "did not finish within 1 s"),  # a guest that hangs is stopped at its time limit
    (["sh", "-c", "echo c > /proc/sysrq-trigger"], "stopped before the guest finished"),  # a guest that dies
])
def test_a_guest_that_hangs_or_dies_fails_clearly_and_leaves_no_emulator(tmp_path, command, error):
    if vm.available():
        pytest.skip(vm.available())
    state = vm.RunState.create()
    try:
        with pytest.raises(vm.VmError, match=error) as failure:
            vm.Guest(state, tmp_path / "work", tmp_path / "console.log").run(command, 1, {})
    finally:
        state.teardown()
    assert str(tmp_path / "console.log") in str(failure.value)
    assert our_qemus(tmp_path) == set()


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

    def valid_values(self, key: tuple[str, str, str], metric: str) -> list[float]:
        """A metric's values over the valid repetitions of one scenario, from the store itself."""
        store = Store.open_dir(self.folder)
        try:
            sid = next(r.id for r in store.scenarios() if (r.vpn_label, r.link_label, r.workload) == key)
            return store.values(sid, metric)
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
    caps, problems, in_vm = place(plan, "vm")
    assert problems == {}
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


# Remote access, one boot: netem's delay and loss; PPTP, L2TP (with and without IPsec) and libreswan
# through a delayed link; PPTP over a shaped link against no VPN, whose baseline runs here and again
# in the VM (its twin), which grades the VPN. PPTP with MPPE-128 runs only on the shaped link: its
# proof and overhead are checked there (each scenario under emulation costs about half a minute).
REMOTE_ACCESS = """
name: vm-remote-access
repetitions: 1
topology: remote-access
vpns:
  - driver: none
  - driver: pptp
  - {driver: pptp, options: {mppe: "40", stateful: true}}
  - driver: l2tp
  - {driver: l2tp, options: {ipsec: false}}
  - driver: libreswan
links:
  - {name: wan-20ms, delay_ms: 10}
  - {name: wan-loss, loss_pct: 1}
  - {name: 2mbit, rate_mbit: 2}
workloads:
  - {kind: ping, count: 100, interval_s: 0.02}
  - {kind: udp, rate_mbit: 2.8, size: 1400, duration_s: 4}
  - {kind: tcp, duration_s: 4, omit_s: 1, reverse: true}
"""
# The UDP stream is 1000 datagrams (2.8 Mbit/s x 4 s / 1400 B), as many as at 1.12 Mbit/s for 10 s.
REMOTE_ACCESS_KEEP = {
    ("none", "wan-20ms", "ping"), ("none", "wan-loss", "ping"), ("none", "wan-loss", "udp"),
    ("none", "2mbit", "tcp"), ("pptp mppe-128", "2mbit", "tcp"),
    *{(vpn, "wan-20ms", "ping") for vpn in ("pptp mppe-40 stateful", "l2tp/ipsec aes128-sha1", "l2tp",
                                             "libreswan default psk")},
}


def _key(scenario) -> tuple[str, str, str]:
    return scenario.vpn_label, scenario.link.label, scenario.workload.kind


@pytest.fixture(scope="module")
def remote_access(tmp_path_factory):
    return run_in_vm(REMOTE_ACCESS, tmp_path_factory.mktemp("vm-remote-access"),
                     keep=lambda s: _key(s) in REMOTE_ACCESS_KEEP,
                     host=lambda s: _key(s) == ("none", "2mbit", "tcp"), beside=True)


@pytest.mark.integration
def test_netem_delays_and_loses_in_the_vm(remote_access):
    values = remote_access.values
    # netem: 10 ms each way is a 20 ms round trip; 1% loss one way over 1000 datagrams
    # (an emulated guest adds its own ~0.5-1.5 ms to every round trip: the undelayed link shows it)
    rtt_min = values[("none", "wan-20ms", "ping", "rtt_min_ms")]
    assert abs(rtt_min - 20) <= 1.5, rtt_min
    added = values[("none", "wan-20ms", "ping", "rtt_avg_ms")] - values[("none", "wan-loss", "ping", "rtt_avg_ms")]
    assert abs(added - 20) <= 1.5, added
    loss = values[("none", "wan-loss", "udp", "udp_loss_pct")]
    assert 0.2 <= loss <= 2.2, loss


@pytest.mark.integration
def test_pptp_l2tp_ipsec_and_libreswan_in_the_vm(remote_access):
    values, notes = remote_access.values, remote_access.notes
    libreswan = DRIVERS["libreswan"]
    # the tunnels: proof passed (status done), overhead as modelled, traffic through; libreswan's
    # overhead for a 84-byte packet also tells which ESP proposal it negotiated by default
    default_esp = libreswan.overhead(libreswan.Options(), "default", "kernel", 84)
    for key, overhead in ((("pptp mppe-128", "2mbit", "tcp"), 44), (("pptp mppe-40 stateful", "wan-20ms", "ping"), 44),
                          (("l2tp/ipsec aes128-sha1", "wan-20ms", "ping"), 84), (("l2tp", "wan-20ms", "ping"), 38),
                          (("libreswan default psk", "wan-20ms", "ping"), default_esp)):
        label = key[0]
        measured = values[(*key, "overhead_bytes")]
        # PPTP's GRE acknowledgement (4 bytes) rides nearly every packet, not all (pptp.py's model)
        assert measured == overhead or (label.startswith("pptp") and measured == overhead - 4), (label, measured)
        if key[2] == "ping":
            assert values[(*key, "ping_loss_pct")] == 0, label
        else:  # over the 2 Mbit/s link (its share of no VPN's goodput: the next test)
            assert values[(*key, "throughput_mbps")] > 1, label
        assert "measured in a VM" in notes[key]
    assert "not encrypted" in notes[("l2tp", "wan-20ms", "ping")]
    assert "not encrypted" not in notes[("l2tp/ipsec aes128-sha1", "wan-20ms", "ping")]


@pytest.mark.integration
def test_what_a_guest_measured_while_another_run_went_on_is_flagged(remote_access, site_to_site):
    """A guest cannot see other runs (its /run is its own): the host watches the boot and flags
    what the guest measured meanwhile. Another run's record was there through the whole
    remote-access study and never during the site-to-site one."""
    from vpnlab.plan.judging import disturbed

    assert remote_access.vm_flags and all(disturbed(flags) for flags in remote_access.vm_flags)
    assert site_to_site.vm_flags and not any(disturbed(flags) for flags in site_to_site.vm_flags)


# PPTP over a shaped link: TCP through it carries about what the link carries.
#
# A 2 Mbit/s tbf drops packets whenever TCP overfills its queue. By default pptp-linux then holds
# every GRE packet that follows a lost one for 0.3 s, in case the missing one arrives late, and TCP
# sees each hold as a stall: 1.20 Mbit/s towards the client against no VPN's 1.86 (65%). The driver
# passes them on at once (`pptp --nobuffer`, as RFC 2637 4.4 allows): 1.80 and 1.85 Mbit/s, 98% of
# no VPN (VM with software emulation, 2 repetitions of 4 s each, on a machine with a load of 5-7).
#
# The flow runs from the gateway to the client (`reverse`): that way the receiving GRE end is the
# client's, which the driver controls. The other way it is pptpd's, whose 0.3 s hold is a constant
# of PoPToP 1.4.0 with no switch (0.1-0.9 Mbit/s that way before and after): not asserted here.
#
# Before the fix PPTP got at most 67% of no VPN this way (4 samples, with and without 10 ms of
# delay), after it at least 86% (97-98% without delay): 80% tells the two apart and leaves 17
# points for a busy machine, also from one 4-second sample each. PPTP's own ceiling here is 1348
# of 1458 bytes per frame against no VPN's 1448 of 1514, 97%.
SHARE = 0.8


@pytest.mark.integration
def test_pptp_carries_tcp_over_a_shaped_link_about_as_well_as_no_vpn(remote_access):
    goodput = {}
    for key in (("pptp mppe-128", "2mbit", "tcp"), ("none (in the VM)", "2mbit", "tcp")):
        values = remote_access.valid_values(key, "throughput_mbps")
        assert len(values) == 1, (key, values)
        goodput[key[0]] = values[0]
    none, pptp = goodput["none (in the VM)"], goodput["pptp mppe-128"]
    assert none > 1.6, goodput  # the link itself: 95.7% of 2 Mbit/s less what the emulator costs
    assert pptp >= SHARE * none, goodput


@pytest.mark.integration
def test_a_vpn_measured_in_the_vm_is_graded_against_no_vpn_measured_there(remote_access):
    from vpnlab.analyse.analysis import summarise

    base, vpn, twin = ("none", "2mbit", "tcp"), ("pptp mppe-128", "2mbit", "tcp"), ("none (in the VM)", "2mbit", "tcp")
    assert {k: (remote_access.status[k], remote_access.measured_in[k]) for k in (base, vpn, twin)} == {
        base: ("done", "host"), vpn: ("done", "vm"), twin: ("done", "vm")}
    store = Store.open_dir(remote_access.folder)
    try:
        rows = {(r.vpn_label, r.link_label, r.workload): r.id for r in store.scenarios()}
        goodput = next(s for s in summarise(store)[rows[vpn]] if s.metric == "throughput_mbps")
        value = {k: store.values(rows[k], "throughput_mbps")[0] for k in (base, vpn, twin)}  # one each
    finally:
        store.close()
    # throughput is judged as a share of no VPN: the one measured in the VM, not the one measured here
    assert goodput.relative == pytest.approx(100 * value[vpn] / value[twin])
    assert goodput.relative != pytest.approx(100 * value[vpn] / value[base])


# Site to site, one boot: PPTP, L2TP/IPsec and two IPsec implementations with certificates; IPComp,
# which needs kernel ESP (strongSwan's libipsec cannot do it), shrinking text on the WAN.
SITE_TO_SITE = """
name: vm-site-to-site
repetitions: 1
topology: site-to-site
vpns:
  - driver: pptp
  - driver: l2tp
  - {driver: libreswan, options: {auth: cert, esp: aes128-sha256}}
  - {driver: strongswan, options: {implementation: kernel, auth: cert, esp: aes128-sha256}}
  - {driver: strongswan, options: {esp: aes128-sha256, compression: ["off", "on"]}}
  - {driver: libreswan, options: {esp: aes128-sha256, compression: on}}
workloads:
  - {kind: ping, count: 20, interval_s: 0.05}
  - {kind: transfer, protocol: http, data: text, size: 2M}
"""
IPCOMP_TEST = {"strongswan aes128-sha256 psk", "strongswan aes128-sha256 psk ipcomp", "libreswan aes128-sha256 psk ipcomp"}


@pytest.fixture(scope="module")
def site_to_site(tmp_path_factory):
    return run_in_vm(SITE_TO_SITE, tmp_path_factory.mktemp("vm-site-to-site"),
                     keep=lambda s: (s.vpn_label in IPCOMP_TEST) == (s.workload.kind == "transfer"))


@pytest.mark.integration
def test_site_to_site_legacy_tunnels_and_two_ipsec_implementations_in_the_vm(site_to_site):
    values = site_to_site.values
    strongswan = DRIVERS["strongswan"]
    ipsec = strongswan.overhead(strongswan.Options(esp="aes128-sha256"), "default", "kernel", 84)
    for label, overhead in (("pptp mppe-128", 44), ("l2tp/ipsec aes128-sha1", 84),
                            ("libreswan aes128-sha256 cert", ipsec), ("strongswan aes128-sha256 cert kernel", ipsec)):
        measured = values[(label, "unshaped", "ping", "overhead_bytes")]
        # PPTP's GRE acknowledgement (4 bytes) rides nearly every packet, not all (pptp.py's model)
        assert measured == overhead or (label.startswith("pptp") and measured == overhead - 4), (label, measured)
        assert values[(label, "unshaped", "ping", "ping_loss_pct")] == 0, label


@pytest.mark.integration
def test_ipcomp_shrinks_text_on_the_wan_in_the_vm(site_to_site):
    """IPComp needs kernel ESP (strongSwan's libipsec cannot do it): here that means the VM."""
    metrics = {}
    for (vpn, _, workload, metric), value in site_to_site.values.items():
        if workload == "transfer":
            metrics.setdefault(vpn, {})[metric] = value
    off = metrics["strongswan aes128-sha256 psk"]
    on = {"strongswan": metrics["strongswan aes128-sha256 psk ipcomp"],
          "libreswan": metrics["libreswan aes128-sha256 psk ipcomp"]}
    # without compression every payload byte costs more than a byte on the wire; text compresses
    # to about half with DEFLATE, so with IPComp it costs less than one
    assert off["wan_bytes_per_byte"] > 1
    for name, measured in on.items():
        assert measured["wan_bytes_per_byte"] < 0.9 * off["wan_bytes_per_byte"], name
        # the proof's random probe is incompressible: sent as it is, the overhead is plain ESP's
        assert measured["overhead_bytes"] == measured["overhead_model_bytes"] == off["overhead_bytes"], name
    print(f"\nbytes per byte, text: off {off['wan_bytes_per_byte']:.3f},"
          + ", ".join(f" {n} on {m['wan_bytes_per_byte']:.3f}" for n, m in on.items()))


def test_a_vpnlab_living_in_tmp_is_kept_through_the_guests_empty_tmp(tmp_path, monkeypatch):
    """A clone in /tmp (CI's, a user's) would be hidden by the tmpfs the guest mounts there: the folder
    it runs from is bind-mounted aside before and moved back after."""
    if not tmp_path.is_relative_to("/tmp"):
        pytest.skip("the test's folder is not under /tmp")
    home = Path("/tmp") / tmp_path.relative_to("/tmp").parts[0]
    monkeypatch.chdir(tmp_path)
    kept = vm._keep_through_tmpfs()
    assert f"mount --bind '{home}' /run/vpnlab-held/" in kept["hold"]
    assert f"mount --move /run/vpnlab-held/" in kept["restore"] and f"'{home}'" in kept["restore"]
