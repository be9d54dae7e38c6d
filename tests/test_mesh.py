"""The mesh topology (issue 36): N peers behind their own shaped links to a core, joined by a VPN as a
full mesh or as hub and spoke; workloads between one pair, every pair, or all to one. Real namespaces and
daemons; bad mesh specs refused before anything starts."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from conftest import our_namespaces, run_here
from vpnlab.report import export
from vpnlab.analyse.analysed import Analysed
from vpnlab.catalog import KINDS
from vpnlab.core.errors import StudyError
from vpnlab.run.mesh_run import add_link_shares, combine, pairs_of
from vpnlab.run.tunnels import answer_deadline
from vpnlab.plan.scenarios import make_plan
from vpnlab.report.html import build, render
from vpnlab.store import Store
from vpnlab.plan.study import Link, parse_study
from vpnlab.testbed import netns
from vpnlab.testbed.mesh import MeshTestbed, PairView
from vpnlab.workloads.base import Measurement

MESH = "name: m\ntopology: mesh\npeers: 3\nvpns: [{driver: none}, {driver: wireguard}]\nworkloads: [{kind: ping}]\n"


@pytest.mark.parametrize("text,expect", [
    (MESH.replace("peers: 3", "peers: 9"), "peers: Input should be less than or equal to 8"),
    (MESH.replace("peers: 3", "peers: 2"), "peers: Input should be greater than or equal to 3"),
    (MESH.replace("peers: 3\n", ""), "peers: topology 'mesh' needs how many peers (3 to 8)"),
    (MESH.replace("topology: mesh\n", ""), "peers: only for topology 'mesh'"),
    (MESH.replace("{driver: wireguard}", "{driver: ocserv}"), "vpns[1].driver: 'ocserv' cannot join a mesh"),
    (MESH.replace("{driver: wireguard}", "{driver: wireguard, inner: {driver: wireguard}}"),
     "vpns[1].inner: a mesh has one tunnel layer"),
    (MESH.replace("topology: mesh\npeers: 3\n", "").replace("{kind: ping}", "{kind: ping, pairs: all}"),
     "workloads[0].pairs: only for topology 'mesh'"),
    (MESH.replace("{kind: ping}", "{kind: ping, pairs: some}"), "workloads[0].pairs: Input should be 'one'"),
    (MESH.replace("{driver: wireguard}", "{driver: openvpn, options: {port: 65535}}"),
     "vpns[1].options.port: a hub listens on 2 ports from it, past 65535"),
    (MESH.replace("{kind: ping}", "{kind: transfer}"), "workloads[0].kind: a mesh runs tcp, ping, udp, not transfer"),
])
def test_bad_mesh_specs_are_refused_naming_the_field(text, expect):
    with pytest.raises(StudyError) as caught:
        parse_study(text)
    assert expect in str(caught.value)


def test_bad_mesh_spec_exits_2_through_the_cli(tmp_path):
    study = tmp_path / "bad.yaml"
    study.write_text(MESH.replace("peers: 3", "peers: 12"))
    proc = subprocess.run([sys.executable, "-m", "vpnlab", "run", str(study), "--dry-run"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "peers" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_mesh_study_plans_its_peers_and_pairs_into_the_scenario_id():

    one, five = (make_plan(parse_study(MESH.replace("peers: 3", f"peers: {n}"))) for n in (3, 5))
    assert one.scenarios[0].peers == 3 and five.scenarios[0].peers == 5
    assert one.scenarios[0].id != five.scenarios[0].id
    both = make_plan(parse_study(MESH.replace("{kind: ping}", "{kind: ping}, {kind: ping, pairs: all}")))
    assert [s.workload.full_label for s in both.scenarios[:2]] == ["ping-56B", "ping-56B-pairs-all"]
    chain = make_plan(parse_study(MESH.replace("topology: mesh\npeers: 3\n", "")))
    assert "mesh" not in chain.scenarios[0].key and "pairs" not in chain.scenarios[0].key["workload"]


@pytest.mark.integration
def test_every_peer_reaches_every_other_through_the_core_on_shaped_links(state):
    bed = MeshTestbed.build(state, 3, Link(rate_mbit=100), tag="t")
    names = [node.namespace for node in bed.nodes]
    for a in range(3):
        for b in range(3):
            if a != b:
                view = PairView(bed, a, b, None)
                view.source.run(["ping", "-c", "1", "-W", "2", view.sink_ip])
    for peer in bed.peers:
        assert "rate 100Mbit" in peer.run(["tc", "qdisc", "show", "dev", "w0"]).stdout
    assert "rate 100Mbit" in bed.core.run(["tc", "qdisc", "show", "dev", "p2"]).stdout
    assert bed.wan_sent_bytes() > 0
    bed.destroy()
    assert not set(names) & our_namespaces()


def stored(out, sql, *args):

    db = sqlite3.connect(out / "results.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


ALL_TO_ALL = """\
name: mesh-all
topology: mesh
peers: 3
idle_window_s: 2
repetitions: 1
order: listed
vpns: [{driver: none}, VPN]
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 2, omit_s: 0, pairs: all}]
"""


@pytest.mark.integration
@pytest.mark.parametrize("vpn", ["{driver: wireguard}", "{driver: nebula}"])
def test_all_to_all_tcp_through_a_mesh_stores_every_pair(no_leftovers, tmp_path, vpn):


    plan = run_here(parse_study(ALL_TO_ALL.replace("VPN", vpn)), tmp_path)
    assert stored(tmp_path, "SELECT failure FROM repetitions") == [(None,), (None,)]
    for scenario in plan.scenarios:
        (raw,), = stored(tmp_path, "SELECT output FROM raw_outputs WHERE scenario_id = ? AND tool = 'pairs'",
                         scenario.id)
        pairs = json.loads(raw)
        assert sorted(pairs) == ["0->1", "0->2", "1->0", "1->2", "2->0", "2->1"]
        values = dict(stored(tmp_path, "SELECT metric, value FROM samples WHERE scenario_id = ?", scenario.id))
        each = [p["throughput_mbps"] for p in pairs.values()]
        assert min(each) > 1 and values["throughput_mbps"] == pytest.approx(sum(each))
        assert values["worst_pair_throughput_mbps"] == min(each)
        assert values["throughput_mbps"] < 2 * 3 * 50  # each link carries at most its rate each way
        for label, own in pairs.items():  # a peer's link carries the 2 flows it sends, the 2 it receives
            a, b = label.split("->")
            up = sum(p["throughput_mbps"] for k, p in pairs.items() if k.startswith(f"{a}->"))
            down = sum(p["throughput_mbps"] for k, p in pairs.items() if k.endswith(f"->{b}"))
            assert own["link_utilisation_pct"] == pytest.approx(100 * max(up, down) / 50)
        assert values["link_utilisation_pct"] == min(p["link_utilisation_pct"] for p in pairs.values())
        if not scenario.vpn.layers:
            # no VPN all but fills them: 80-95% in 2 s from a cold start, 55% beside the suite's VMs
            assert values["link_utilisation_pct"] > 40
        if scenario.vpn.layers:
            assert values["join_s"] > 0  # stored; a join that never ends fails at the set-up timeout
            # measured on the pair's WAN links, where the proof of tunnel found nothing in clear
            assert values["overhead_bytes"] == values["overhead_model_bytes"]
            assert 0 <= values["idle_control_bytes_per_s"] < 5000  # keepalives and look-ups, not a flood
        else:
            assert "join_s" not in values
            assert values["idle_control_bytes_per_s"] == 0  # bare IPv4 links are silent (IPv6 start-up is off)


TO_ONE = ALL_TO_ALL.replace("vpns: [{driver: none}, VPN]", "vpns: [VPN]").replace(
    "{kind: tcp, duration_s: 2, omit_s: 0, pairs: all}", "{kind: ping, count: 10, interval_s: 0.05, pairs: to-one}")


@pytest.mark.integration
@pytest.mark.parametrize("vpn", ["{driver: tinc}", "{driver: openvpn}", "{driver: yggdrasil}", "{driver: softether}"],
                         ids=["tinc-meta", "openvpn-hub", "yggdrasil", "softether-hub"])
def test_tinc_yggdrasil_and_hub_and_spoke_vpns_join_every_peer(no_leftovers, tmp_path, vpn):


    plan = run_here(parse_study(TO_ONE.replace("VPN", vpn)), tmp_path)
    assert stored(tmp_path, "SELECT failure FROM repetitions") == [(None,)]
    (raw,), = stored(tmp_path, "SELECT output FROM raw_outputs WHERE tool = 'pairs'")
    pairs = json.loads(raw)
    # a peer that has not joined loses every ping; under the suite's load SoftEther's hub (a switch in
    # userspace) lost 1 of 10 once
    assert sorted(pairs) == ["1->0", "2->0"] and all(p["ping_loss_pct"] <= 10 for p in pairs.values()), pairs
    values = dict(stored(tmp_path, "SELECT metric, value FROM samples"))
    assert values["worst_pair_rtt_avg_ms"] == max(p["rtt_avg_ms"] for p in pairs.values())
    assert values["overhead_bytes"] == values["overhead_model_bytes"] and values["join_s"] > 0
    assert plan.scenarios[0].topology == "mesh"


def test_the_export_carries_each_pair_beside_the_sample(tmp_path):
    """The long export's rows for a mesh sample: the sample's own (pair blank) and each pair's from its raw `pairs`;
    a failed repetition's pairs stay out as its samples do."""

    plan = make_plan(parse_study(MESH.replace("{kind: ping}", "{kind: tcp, pairs: to-one}")))
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={}, study_name="m",
                          study_text=MESH)
    scenario = plan.scenarios[1]
    store.add_scenario(scenario)
    pairs = {"1->0": {"throughput_mbps": 40.0}, "2->0": {"throughput_mbps": 30.0}}
    store.record_repetition(run, scenario.id, 1, {"throughput_mbps": 70.0, "worst_pair_throughput_mbps": 30.0},
                            {"pairs": json.dumps(pairs)}, [], 1, 0)
    store.record_repetition(run, scenario.id, 2, {}, {"pairs": json.dumps(pairs)}, [], 2, 0, failure="died")
    out = io.StringIO()
    export.write(Analysed.of(store), "csv", out, "samples")
    found = sorted((r["repetition"], r["pair"], r["metric"], float(r["value"])) for r in csv.DictReader(io.StringIO(
        out.getvalue())))
    assert found == [("1", "", "throughput_mbps", 70.0), ("1", "", "worst_pair_throughput_mbps", 30.0),
                     ("1", "1->0", "throughput_mbps", 40.0), ("1", "2->0", "throughput_mbps", 30.0)]
    store.finish_run(run, "completed")
    store.close()

    report = build(tmp_path)  # the report's table of pairs: the worst first
    assert [(m["workload"], m["pairs"]) for m in report.mesh_pairs] == [("tcp-pairs-to-one", "2->0 30, 1->0 40")]
    assert "Mesh: each pair" in render(tmp_path) and "2-&gt;0 30, 1-&gt;0 40" in render(tmp_path)


def test_a_report_shows_tcp_between_one_pair_beside_all_to_all(tmp_path):
    """One pair (stored without `pairs`, as before the mesh) and all pairs of the same kind make a
    categorical sweep over `pairs`: grouped bars, one per pairs, 'one' among them; and the mesh's table."""
    text = MESH.replace("{kind: ping}", "{kind: tcp}, {kind: tcp, pairs: all}")
    plan = make_plan(parse_study(text))
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={}, study_name="m",
                          study_text=text)
    for scenario in plan.scenarios:
        store.add_scenario(scenario)
        for repetition, value in enumerate((40.0, 42.0, 41.0), 1):
            store.record_repetition(run, scenario.id, repetition, {"throughput_mbps": value}, {}, [], repetition, 0)
        store.set_status(scenario.id, "done")
    store.finish_run(run, "completed")
    store.close()
    report = build(tmp_path)
    assert "throughput_mbps by pairs - tcp on unshaped" in [f.title for f in report.figures]
    # the mesh's own table: each scenario's figures, a VPN's against no VPN's (here the same: 100%)
    assert report.mesh_metrics == ["throughput_mbps"]
    cells = {(m["vpn"], m["workload"]): m["cells"][0] for m in report.mesh_rows}
    assert cells[("none", "tcp-pairs-all")].startswith("n = 3: 41") and "vs no VPN" not in cells[("none", "tcp")]
    assert "vs no VPN 100%" in cells[("wireguard", "tcp-pairs-all")], cells
    assert "Mesh: each VPN against no VPN" in render(tmp_path)


@pytest.mark.integration
def test_a_peer_daemon_killed_mid_measurement_fails_the_repetition(no_leftovers, tmp_path):
    """Peer 2's nebula, killed while peer 1 sends to it, fails the repetition with the daemon's exit."""

    before = our_namespaces()
    study = ALL_TO_ALL.replace("vpns: [{driver: none}, VPN]", "vpns: [{driver: nebula}]").replace(
        "pairs: all", "pairs: one").replace("duration_s: 2", "duration_s: 4")
    killed = []

    def command(pid: int) -> str:
        try:
            return open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            return ""  # ended meanwhile (a ping of the set-up): it once ended this thread, and nothing was killed

    def kill_when_measuring():
        deadline = time.monotonic() + 300  # a loaded suite takes long to bring up three peers
        while not killed and time.monotonic() < deadline:
            peers = {ns.rsplit("-", 1)[-1]: ns for ns in our_namespaces() - before}
            if "iperf3" in map(command, netns.pids(peers.get("0peer1", ""))):
                time.sleep(1)
                for pid in netns.pids(peers["0peer2"]):
                    if command(pid) == "nebula":
                        subprocess.run(["kill", str(pid)])
                        killed.append(pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_measuring)
    killer.start()
    run_here(parse_study(study), tmp_path)
    killer.join()
    assert killed
    (failure,), (again,) = stored(tmp_path, "SELECT failure FROM repetitions ORDER BY repetition")
    assert failure.startswith("the tunnel died during the measurement: l0-nebula-peer2 exited"), failure
    assert again is None  # the runner measured it again, on a mesh of its own


def test_pairs_and_how_their_values_combine():

    assert pairs_of("one", 4) == [(1, 2)] and pairs_of("to-one", 4) == [(1, 0), (2, 0), (3, 0)]
    assert len(pairs_of("all", 5)) == 20 and (0, 0) not in pairs_of("all", 5)
    tcp = {"1->0": Measurement({"throughput_mbps": 40.0, "retransmits": 3.0}),
           "2->0": Measurement({"throughput_mbps": 30.0, "retransmits": 1.0})}
    values, raw = combine(KINDS["tcp"], tcp)
    assert values == {"throughput_mbps": 70.0, "retransmits": 4.0, "worst_pair_throughput_mbps": 30.0}
    ping = {"1->0": Measurement({"rtt_avg_ms": 20.0, "ping_loss_pct": 0.0}),
            "2->0": Measurement({"rtt_avg_ms": 30.0, "ping_loss_pct": 10.0})}
    values, _ = combine(KINDS["ping"], ping)
    assert values == {"rtt_avg_ms": 25.0, "ping_loss_pct": 5.0, "worst_pair_rtt_avg_ms": 30.0}
    assert "worst_pair_rtt_avg_ms" not in combine(KINDS["ping"], {"1->2": ping["1->0"]})[0]


def test_a_pair_uses_the_share_of_its_busier_link_and_the_mesh_its_least_pair():
    views = [PairView(None, a, b, None) for a, b in pairs_of("to-one", 3)]  # 1->0 and 2->0 share peer 0's link
    tcp = {"1->0": Measurement({"throughput_mbps": 6.0}), "2->0": Measurement({"throughput_mbps": 3.0})}
    add_link_shares(tcp, views, 10)
    assert [tcp[v.label].values["link_utilisation_pct"] for v in views] == [90.0, 90.0]  # down into peer 0: 9 of 10
    one = {"1->0": Measurement({"throughput_mbps": 6.0}), "2->1": Measurement({"throughput_mbps": 3.0})}
    add_link_shares(one, [PairView(None, 1, 0, None), PairView(None, 2, 1, None)], 10)
    assert one["1->0"].values["link_utilisation_pct"] == 60.0 and one["2->1"].values["link_utilisation_pct"] == 30.0
    assert combine(KINDS["tcp"], one)[0]["link_utilisation_pct"] == 30.0  # the least pair, not the mean
    unshaped = {"1->0": Measurement({"throughput_mbps": 6.0})}
    add_link_shares(unshaped, views[:1], None)
    assert "link_utilisation_pct" not in unshaped["1->0"].values


def test_pings_wait_for_a_reply_as_long_as_the_link_takes():

    assert answer_deadline(Link()) == 1 and answer_deadline(Link(delay_ms=100, jitter_ms=20)) == 2
    assert answer_deadline(Link(delay_ms=1000)) == 5
