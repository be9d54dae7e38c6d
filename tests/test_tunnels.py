"""Real namespaces, real WireGuard, real traffic, checked on the WAN."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import our_namespaces
from vpnlab.machines.capabilities import detect
from vpnlab.catalog import DRIVERS
from vpnlab.drivers.base import TunnelEnv
from vpnlab.run.proof import PROBE_INNER_LEN, prove
from vpnlab.plan.study import Link
from vpnlab.testbed.topology import Layout, Testbed

pytestmark = pytest.mark.integration


def build(state, topology, layers, link=Link(rate_mbit=100)):
    return Testbed.build(state, Layout.for_topology(topology, layers), link, tag="t")


def wireguard_up(state, bed, layer, tmp_path, port=51820):
    driver = DRIVERS["wireguard"]
    options = driver.Options(port=port)
    impl = driver.resolve(options, detect()).name
    left, right = bed.tunnel_sites(layer)
    return driver.up(left, right, options, "default", TunnelEnv(state, layer, tmp_path, impl))


def iperf_through(bed, seconds=2):
    server = bed.sink.spawn(["iperf3", "-s", "-1"], bed.state.directory / "iperf.log", what="iperf3")
    bed.sink.wait_listening(5201, server, bed.state.directory / "iperf.log")
    result = json.loads(bed.source.run(["iperf3", "-c", bed.sink_ip, "-t", seconds, "-J"]).stdout)
    server.wait(timeout=10)
    return result["end"]["sum_received"]["bytes"]


@pytest.mark.parametrize("topology", ["remote-access", "site-to-site"])
def test_baseline_routes_end_to_end_and_is_seen_in_clear(state, topology, tmp_path):
    bed = build(state, topology, 0)
    bed.source.run(["ping", "-c", "1", "-W", "2", bed.sink_ip])
    qdisc = bed.wan_nodes[0].run(["tc", "qdisc", "show", "dev", f"l{bed.layout.wan}"]).stdout
    assert "tbf" in qdisc and "rate 100Mbit" in qdisc
    proof = prove(bed, None, None, tmp_path / "p.pcap")
    assert proof.ok and proof.marker_in_clear
    bed.destroy()
    assert not any(ns.startswith(f"vl{state.run_id}") for ns in our_namespaces())


@pytest.mark.parametrize("topology", ["remote-access", "site-to-site"])
def test_wireguard_carries_traffic_encrypted(state, topology, tmp_path):
    bed = build(state, topology, 1)
    tunnel = wireguard_up(state, bed, 0, tmp_path)
    bed.source.run(["ping", "-c", "3", "-i", "0.1", "-W", "2", bed.sink_ip])
    before = bed.wan_counters()
    carried = iperf_through(bed)
    after = bed.wan_counters()
    assert carried > 1_000_000
    # everything the transfer moved crossed the WAN (plus encapsulation)
    assert after["tx_bytes"] - before["tx_bytes"] + after["rx_bytes"] - before["rx_bytes"] > carried
    proof = prove(bed, tunnel.channels, bed.tunnel_sites(0)[0].underlay_ip, tmp_path / "p.pcap")
    assert proof.ok, proof.problems
    assert not proof.marker_in_clear and proof.outer_packets == proof.packets > 0
    driver = DRIVERS["wireguard"]
    assert proof.overhead_bytes == driver.overhead(driver.Options(), "default", tunnel.env.implementation, PROBE_INNER_LEN) == 60 + 12
    tunnel.down()


def test_proof_catches_traffic_that_bypasses_the_tunnel(state, tmp_path):
    bed = build(state, "site-to-site", 1)
    tunnel = wireguard_up(state, bed, 0, tmp_path)
    left, right = bed.tunnel_sites(0)
    # Send host-b's network along the plain chain instead of into the tunnel.
    left.node.ip(f"route replace {right.subnets[0]} via {right.underlay_ip}")
    proof = prove(bed, tunnel.channels, left.underlay_ip, tmp_path / "p.pcap")
    assert not proof.ok
    assert any("in clear" in p for p in proof.problems)
    tunnel.down()


def test_nested_wireguard_in_wireguard(state, tmp_path):
    bed = build(state, "site-to-site", 2)
    outer = wireguard_up(state, bed, 0, tmp_path, port=51820)
    inner = wireguard_up(state, bed, 1, tmp_path, port=51821)
    assert iperf_through(bed, 1) > 100_000
    proof = prove(bed, outer.channels, bed.tunnel_sites(0)[0].underlay_ip, tmp_path / "p.pcap")
    assert proof.ok, proof.problems
    driver, options = DRIVERS["wireguard"], DRIVERS["wireguard"].Options()
    inner_ovh = driver.overhead(options, "default", inner.env.implementation, PROBE_INNER_LEN)
    assert proof.overhead_bytes == inner_ovh + driver.overhead(options, "default", outer.env.implementation, PROBE_INNER_LEN + inner_ovh)
    inner.down()
    outer.down()


def test_keys_are_private_and_removed(state, tmp_path):
    bed = build(state, "remote-access", 1)
    tunnel = wireguard_up(state, bed, 0, tmp_path)
    folder = state.secrets_dir / tunnel.env.name  # its folder on the namespace nodes: this machine's
    keys = list(folder.iterdir())
    assert len(keys) == 2 and all(k.stat().st_mode & 0o777 == 0o600 for k in keys)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert state.secrets_dir.stat().st_mode & 0o777 == 0o700
    tunnel.down()
    assert not folder.exists()
    directory = state.directory
    state.teardown()
    assert not directory.exists()


def test_teardown_kills_daemons_and_removes_sockets(state, tmp_path):
    bed = build(state, "remote-access", 1)
    tunnel = wireguard_up(state, bed, 0, tmp_path)
    pids = [proc.pid for _, proc, _ in tunnel.processes]
    sockets = [Path(path) for _, path in tunnel.left_behind]
    assert sockets
    state.teardown()  # as after an exception: no tunnel.down()
    for pid in pids:
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
    assert not any(s.exists() for s in sockets)
