"""The mesh topology (issue 36): N peers behind their own shaped links to a core, joined by a VPN as a
full mesh or as hub and spoke; workloads between one pair, every pair, or all to one. Real namespaces and
daemons; bad mesh specs refused before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import our_namespaces
from vpnlab.errors import StudyError
from vpnlab.study import Link, parse_study
from vpnlab.testbed.mesh import MeshTestbed, PairView

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
    from vpnlab.plan import make_plan

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
    assert bed.wan_bytes() > 0
    bed.destroy()
    assert not set(names) & our_namespaces()
