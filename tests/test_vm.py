"""The VM backend and the drivers that need a full kernel: PPTP, L2TP, L2TP/IPsec, netem.

The integration test boots the real VM (software emulation on the development machines) once
and runs real daemons in it; the unit tests check the pieces that need no VM."""

import json
import sqlite3
import subprocess

import pytest

from vpnlab import vm
from vpnlab.capabilities import detect
from vpnlab.drivers import REGISTRY
from vpnlab.plan import check_plan, make_plan, place
from vpnlab.runner import Runner
from vpnlab.store import Store
from vpnlab.study import parse_study


@pytest.mark.parametrize("driver,options,problem", [
    ("pptp", {}, "profile"),
    ("l2tp", {"ipsec": False}, "profile"),
    ("l2tp", {"esp": "3des-sha1"}, "options.esp"),
])
def test_legacy_protocols_refuse_the_fips_profile(driver, options, problem):
    d = REGISTRY[driver]
    assert d.check(d.Options(**options), "fips").startswith(problem)
    assert d.check(d.Options(**options), "default") is None


def test_legacy_overhead_models():
    pptp, l2tp = REGISTRY["pptp"], REGISTRY["l2tp"]
    # as measured on the WAN for a 1028-byte packet (the integration test checks them again)
    assert pptp.overhead(pptp.Options(), "default", "pptpd", 1028) == 44
    assert l2tp.overhead(l2tp.Options(ipsec=False), "default", "xl2tpd", 1028) == 38
    assert l2tp.overhead(l2tp.Options(), "default", "xl2tpd+esp", 1028) == 84


def test_libreswan_shares_strongswans_esp_names_and_model():
    libreswan, strongswan = REGISTRY["libreswan"], REGISTRY["strongswan"]
    for esp in ("aes128-sha1", "aes256gcm16", "3des-sha1"):
        assert (libreswan.overhead(libreswan.Options(esp=esp), "default", "kernel", 1028)
                == strongswan.overhead(strongswan.Options(esp=esp), "default", "kernel", 1028))
    assert libreswan.check(libreswan.Options(esp="3des-sha1"), "fips").startswith("options.esp")
    assert libreswan.check(libreswan.Options(esp="aes128-sha256"), "fips") is None
    with pytest.raises(ValueError):
        libreswan.Options(esp="aes128-sha512")


def test_libreswan_is_found_installed_or_unpacked(monkeypatch, tmp_path):
    import dataclasses

    from vpnlab import tools, unpacked
    monkeypatch.setattr(unpacked, "package_folder", lambda package: tmp_path / "packages" / package)
    declared = REGISTRY["libreswan"].tools[0]
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


def test_kvm_is_not_trusted_without_the_cpu_flag(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu vme sse2 aes\n")
    real = vm.Path

    def fake_path(p, *a):
        return cpuinfo if str(p) == "/proc/cpuinfo" else real(p, *a)
    monkeypatch.setattr(vm, "Path", fake_path)
    assert vm.kvm_works() is False


def our_qemus() -> set[str]:
    return set(subprocess.run(["pgrep", "-a", "-f", f"{vm.QEMU} -nodefaults"], capture_output=True, text=True).stdout.split("\n")[:-1])


def test_a_vm_that_cannot_start_fails_clearly_and_leaves_no_emulator(monkeypatch, tmp_path):
    if vm.available():
        pytest.skip(vm.available())
    real = vm.find_kernel()
    garbage = tmp_path / "vmlinuz-garbage"
    garbage.write_bytes(b"not a kernel" * 100)
    monkeypatch.setattr(vm, "find_kernel", lambda: vm.Kernel(real.version, garbage, real.modules, "test"))
    monkeypatch.setattr(vm, "kvm_works", lambda: False)
    before = our_qemus()
    state = vm.RunState.create()
    try:
        with pytest.raises(vm.VmError, match="stopped before the guest finished"):
            vm.Guest(state, tmp_path / "work", tmp_path / "console.log").run(["true"], 30, {})
    finally:
        state.teardown()
    assert our_qemus() <= before


@pytest.mark.integration
@pytest.mark.parametrize("command,error", [
    (["sleep", "600"], "did not finish within 1 s"),  # a guest that hangs is stopped at its time limit
    (["sh", "-c", "echo c > /proc/sysrq-trigger"], "stopped before the guest finished"),  # a guest that dies
])
def test_a_guest_that_hangs_or_dies_fails_clearly_and_leaves_no_emulator(tmp_path, command, error):
    if vm.available():
        pytest.skip(vm.available())
    before = our_qemus()
    state = vm.RunState.create()
    try:
        with pytest.raises(vm.VmError, match=error) as failure:
            vm.Guest(state, tmp_path / "work", tmp_path / "console.log").run(command, 1, {})
    finally:
        state.teardown()
    assert str(tmp_path / "console.log") in str(failure.value)
    assert our_qemus() <= before


def run_in_vm(study_text: str, folder, drop=lambda scenario: False):
    """Run a study's scenarios in the VM (even where this kernel could run them); the status,
    mean value of each metric and notes of each scenario, keyed by its labels."""
    problem = vm.available()
    if problem and "not installed" not in problem:
        pytest.fail(problem)
    before = our_qemus()
    plan = make_plan(parse_study(study_text))
    plan.drop({s.index for s in plan.scenarios if drop(s)})
    caps, problems, in_vm = place(plan, "vm")
    assert problems == {}
    assert in_vm == {s.id for s in plan.scenarios}
    Runner(plan, folder, caps, progress=False, in_vm=in_vm).run()
    db = sqlite3.connect(folder / "results.sqlite")
    label = "vpn_label || ' ' || link_label || ' ' || workload_label"
    status = dict(db.execute(f"SELECT {label}, status || ' ' || coalesce(failure, '') FROM scenarios"))
    notes = dict(db.execute(f"SELECT {label}, notes FROM scenarios"))
    values = {}
    for vpn, link, workload, metric, value in db.execute(
            "SELECT sc.vpn_label, sc.link_label, sc.workload_label, s.metric, avg(s.value) FROM samples s"
            " JOIN scenarios sc ON sc.id = s.scenario_id GROUP BY 1, 2, 3, 4"):
        values[(vpn, link, workload, metric)] = value
    db.close()
    assert all(v.startswith("done") for v in status.values()), status
    assert our_qemus() <= before, "an emulator was left running"
    assert list((folder / "logs").glob("vm-run*-console.log"))
    return values, notes


@pytest.mark.integration
def test_pptp_l2tp_ipsec_libreswan_and_netem_in_the_vm(tmp_path, no_leftovers):
    libreswan = REGISTRY["libreswan"]
    values, notes = run_in_vm("""
name: vm
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
workloads:
  - {kind: ping, count: 100, interval_s: 0.02}
  - {kind: udp, rate_mbit: 1.12, size: 1400, duration_s: 10}
""", tmp_path, drop=lambda s: s.vpn.driver != "none" and (s.link.name == "wan-loss" or s.workload.kind == "udp"))
    # netem: 10 ms each way is a 20 ms round trip; 1% loss one way over 1000 datagrams
    # (an emulated guest adds its own ~0.5-1.5 ms to every round trip: the undelayed link shows it)
    rtt_min = values[("none", "wan-20ms", "ping-56B", "rtt_min_ms")]
    assert abs(rtt_min - 20) <= 1.5, rtt_min
    added = values[("none", "wan-20ms", "ping-56B", "rtt_avg_ms")] - values[("none", "wan-loss", "ping-56B", "rtt_avg_ms")]
    assert abs(added - 20) <= 1.5, added
    loss = values[("none", "wan-loss", "udp-1.12M-1400B", "udp_loss_pct")]
    assert 0.2 <= loss <= 2.2, loss
    # the tunnels: proof passed (status done), overhead as modelled, traffic through; libreswan's
    # overhead for a 84-byte packet also tells which ESP proposal it negotiated by default
    default_esp = libreswan.overhead(libreswan.Options(), "default", "kernel", 84)
    for label, overhead in (("pptp mppe-128", 44), ("pptp mppe-40 stateful", 44), ("l2tp/ipsec aes128-sha1", 84),
                            ("l2tp", 38), ("libreswan default psk", default_esp)):
        assert values[(label, "wan-20ms", "ping-56B", "overhead_bytes")] == overhead, label
        assert values[(label, "wan-20ms", "ping-56B", "ping_loss_pct")] == 0, label
        assert "measured in a VM" in notes[f"{label} wan-20ms ping-56B"]
    assert "not encrypted" in notes["l2tp wan-20ms ping-56B"]
    assert "not encrypted" not in notes["l2tp/ipsec aes128-sha1 wan-20ms ping-56B"]


@pytest.mark.integration
def test_site_to_site_legacy_tunnels_and_two_ipsec_implementations_in_the_vm(tmp_path, no_leftovers):
    values, notes = run_in_vm("""
name: vm-site-to-site
repetitions: 1
topology: site-to-site
vpns:
  - driver: pptp
  - driver: l2tp
  - {driver: libreswan, options: {auth: cert, esp: aes128-sha256}}
  - {driver: strongswan, options: {implementation: kernel, auth: cert, esp: aes128-sha256}}
workloads:
  - {kind: ping, count: 20, interval_s: 0.05}
""", tmp_path)
    strongswan = REGISTRY["strongswan"]
    ipsec = strongswan.overhead(strongswan.Options(esp="aes128-sha256"), "default", "kernel", 84)
    for label, overhead in (("pptp mppe-128", 44), ("l2tp/ipsec aes128-sha1", 84),
                            ("libreswan aes128-sha256 cert", ipsec), ("strongswan aes128-sha256 cert kernel", ipsec)):
        assert values[(label, "unshaped", "ping-56B", "overhead_bytes")] == overhead, label
        assert values[(label, "unshaped", "ping-56B", "ping_loss_pct")] == 0, label


@pytest.mark.integration
def test_a_vpn_measured_in_the_vm_is_graded_against_no_vpn_measured_there(tmp_path, no_leftovers):
    from vpnlab.analysis import summarise
    from vpnlab.plan import add_vm_twins

    if vm.available():
        pytest.skip(vm.available())
    plan = make_plan(parse_study("""
name: twins
repetitions: 2
vpns: [{driver: none}, {driver: wireguard}]
workloads: [{kind: ping, count: 20, interval_s: 0.05}]
"""))
    base, vpn = plan.scenarios
    in_vm = {vpn.id} | add_vm_twins(plan, {vpn.id})  # as `auto` does when only the VPN needs the VM
    twin = plan.scenarios[-1]
    caps = detect()
    assert check_plan(plan, caps) == {}
    Runner(plan, tmp_path, caps, progress=False, in_vm=in_vm).run()
    store = Store.open_dir(tmp_path)
    rows = {r.id: r for r in store.scenarios()}
    assert {sid: (r.status, r.measured_in) for sid, r in rows.items()} == {
        base.id: ("done", "host"), vpn.id: ("done", "vm"), twin.id: ("done", "vm")}
    assert rows[twin.id].vpn_label == "none (in the VM)"
    rtt = {sid: next(s for s in sums if s.metric == "rtt_avg_ms") for sid, sums in summarise(store).items()}
    assert rtt[vpn.id].relative == pytest.approx(rtt[vpn.id].geometric_mean / rtt[twin.id].geometric_mean)
    cpu = json.loads(store.raw_output(vpn.id, 1, "cpu"))  # the guest's own cgroup v2 and its two CPUs
    assert cpu["method"] == "cgroup2" and cpu["pinned"], cpu  # (kernel WireGuard there: no daemon to see)
    store.close()
