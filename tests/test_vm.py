"""The VM backend and the drivers that need a full kernel: PPTP, L2TP, L2TP/IPsec, netem.

The integration test boots the real VM (software emulation on the development machines) once
and runs real daemons in it; the unit tests check the pieces that need no VM."""

import sqlite3
import subprocess

import pytest

from vpnlab import vm
from vpnlab.capabilities import detect
from vpnlab.drivers import REGISTRY
from vpnlab.plan import make_plan, place
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
    guest.record_repetition(grun, scenario.id, 1, {"rtt_avg_ms": 20.5}, {"rtt_avg_ms": "ms"}, {"ping": "raw"}, ["f"])
    guest.set_status(scenario.id, "running")
    guest.close()
    for _ in range(2):  # merging again (a resumed run) changes nothing
        assert host.merge(tmp_path / "guest.sqlite", run, "measured in a VM") == [scenario.id]
    assert host.values(scenario.id, "rtt_avg_ms") == [20.5]
    assert host.done_repetitions(scenario.id) == {1}
    assert host.raw_output(scenario.id, 1, "ping") == "raw"
    assert host.scenarios()[0]["notes"] == "measured in a VM"


def test_kvm_is_not_trusted_without_the_cpu_flag(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu vme sse2 aes\n")
    real = vm.Path

    def fake_path(p, *a):
        return cpuinfo if str(p) == "/proc/cpuinfo" else real(p, *a)
    monkeypatch.setattr(vm, "Path", fake_path)
    assert vm.kvm_works() is False


def our_qemus() -> list[str]:
    return subprocess.run(["pgrep", "-a", "-f", f"{vm.QEMU} -nodefaults"], capture_output=True, text=True).stdout.split("\n")[:-1]


@pytest.mark.integration
def test_pptp_l2tp_ipsec_and_netem_in_the_vm(tmp_path, no_leftovers):
    problem = vm.available()
    if problem and "not installed" not in problem:
        pytest.fail(problem)
    study = parse_study("""
name: vm
repetitions: 1
topology: remote-access
vpns:
  - driver: none
  - driver: pptp
  - {driver: pptp, options: {mppe: "40", stateful: true}}
  - driver: l2tp
  - {driver: l2tp, options: {ipsec: false}}
links:
  - {name: wan-20ms, delay_ms: 10}
  - {name: wan-loss, loss_pct: 1}
workloads:
  - {kind: ping, count: 100, interval_s: 0.02}
  - {kind: udp, rate_mbit: 1.12, size: 1400, duration_s: 10}
""")
    plan = make_plan(study)
    # netem and PPP are what this test is about: keep only the scenarios that say something
    plan.drop({s.index for s in plan.scenarios
               if (s.vpn.driver != "none" and (s.link.name == "wan-loss" or s.workload.kind == "udp"))})
    caps, problems, in_vm = place(plan, "vm")  # the VM even where this kernel could run them
    assert problems == {}
    assert in_vm == {s.id for s in plan.scenarios}
    Runner(plan, tmp_path, caps, progress=False, in_vm=in_vm).run()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = dict(db.execute("SELECT vpn_label || ' ' || link_label || ' ' || workload_label,"
                             " status || ' ' || coalesce(failure, '') FROM scenarios"))
    values = {}
    for vpn, link, workload, metric, value in db.execute(
            "SELECT sc.vpn_label, sc.link_label, sc.workload_label, s.metric, avg(s.value) FROM samples s"
            " JOIN scenarios sc ON sc.id = s.scenario_id GROUP BY 1, 2, 3, 4"):
        values[(vpn, link, workload, metric)] = value
    notes = dict(db.execute("SELECT vpn_label || ' ' || link_label || ' ' || workload_label, notes FROM scenarios"))
    db.close()
    assert all(v.startswith("done") for v in status.values()), status
    assert not our_qemus(), "an emulator was left running"
    # netem: 10 ms each way is a 20 ms round trip; 1% loss one way over 1000 datagrams
    # (an emulated guest adds its own ~0.5-1.5 ms to every round trip: the undelayed link shows it)
    rtt_min = values[("none", "wan-20ms", "ping-56B", "rtt_min_ms")]
    assert abs(rtt_min - 20) <= 1.5, rtt_min
    added = values[("none", "wan-20ms", "ping-56B", "rtt_avg_ms")] - values[("none", "wan-loss", "ping-56B", "rtt_avg_ms")]
    assert abs(added - 20) <= 1.5, added
    loss = values[("none", "wan-loss", "udp-1.12M-1400B", "udp_loss_pct")]
    assert 0.2 <= loss <= 2.2, loss
    # the tunnels: proof passed (status done), overhead as modelled, traffic through
    for label, overhead in (("pptp mppe-128", 44), ("pptp mppe-40 stateful", 44), ("l2tp/ipsec aes128-sha1", 84),
                            ("l2tp", 38)):
        assert values[(label, "wan-20ms", "ping-56B", "overhead_bytes")] == overhead, label
        assert values[(label, "wan-20ms", "ping-56B", "ping_loss_pct")] == 0, label
        assert "measured in a VM" in notes[f"{label} wan-20ms ping-56B"]
    assert "not encrypted" in notes["l2tp wan-20ms ping-56B"]
    assert "not encrypted" not in notes["l2tp/ipsec aes128-sha1 wan-20ms ping-56B"]
    assert list((tmp_path / "logs").glob("vm-run*-console.log"))
