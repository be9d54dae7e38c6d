"""Nebula and tinc, the overlay VPNs of issue 36: real daemons in namespaces, real TCP through them,
checked on the WAN (encrypted, the modelled overhead), their secrets private and gone with them;
their options, models and parsers without traffic."""

import stat
import subprocess

import pytest

from conftest import DATA
from test_tunnels import build, iperf_through
from vpnlab.algorithms import AEAD, mismatches
from vpnlab.capabilities import detect
from vpnlab.drivers import REGISTRY
from vpnlab.drivers.base import TunnelEnv
from vpnlab.drivers.nebula import parse_nebula_log
from vpnlab.drivers.tinc import compressed_size, parse_node_dump
from vpnlab.proof import PROBE_INNER_LEN, prove

CONFIGS = [
    ("nebula", {}), ("nebula", {"cipher": "chachapoly"}),
    ("tinc", {}), ("tinc", {"cipher": "aes-128-cbc", "digest": "sha512", "mac_length": 16}),
    ("tinc", {"cipher": "camellia-256-cbc", "compression": 9}), ("tinc", {"compression": 10}),
    ("tinc", {"compression": 11}),
]


def tunnel_up(state, bed, name, options, tmp_path):
    driver = REGISTRY[name]
    opts = driver.Options(**options)
    impl = driver.resolve(opts, detect()).name
    left, right = bed.tunnel_sites(0)
    return driver, opts, driver.up(left, right, opts, "default", TunnelEnv(state, 0, tmp_path, impl))


@pytest.mark.integration
@pytest.mark.parametrize("topology", ["remote-access", "site-to-site"])
@pytest.mark.parametrize("name,options", CONFIGS[:3], ids=["nebula-aes", "nebula-chachapoly", "tinc"])
def test_tcp_crosses_the_wan_encrypted_with_the_modelled_overhead(state, tmp_path, name, options, topology):
    bed = build(state, topology, 1)
    driver, opts, tunnel = tunnel_up(state, bed, name, options, tmp_path)
    assert iperf_through(bed) > 1_000_000
    proof = prove(bed, tunnel.channels, bed.tunnel_sites(0)[0].underlay_ip, tmp_path / "p.pcap")
    assert proof.ok, proof.problems
    assert not proof.marker_in_clear and proof.outer_packets == proof.packets > 0
    assert proof.overhead_bytes == driver.overhead(opts, "default", tunnel.env.implementation, PROBE_INNER_LEN) == 60
    negotiated = driver.negotiated(tunnel, opts, "default")
    assert negotiated and not mismatches(driver.algorithms(opts, "default"), negotiated), negotiated
    secrets = [p for p in tunnel.env.secrets.rglob("*") if p.is_file() and p.suffix != ".pid"]  # tincd's own pid file
    assert secrets and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secrets), secrets
    pids = [proc.pid for _, proc, _ in tunnel.processes]
    tunnel.down()
    assert not tunnel.env.secrets.exists()
    assert all(subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0 for pid in pids)


@pytest.mark.integration
@pytest.mark.parametrize("name,options", CONFIGS[3:], ids=["tinc-aes128-sha512", "tinc-camellia-zlib9",
                                                           "tinc-lzo-fast", "tinc-lzo-best"])
def test_tinc_options_change_the_wire_as_modelled(state, tmp_path, name, options):
    bed = build(state, "site-to-site", 1)
    driver, opts, tunnel = tunnel_up(state, bed, name, options, tmp_path)
    proof = prove(bed, tunnel.channels, bed.tunnel_sites(0)[0].underlay_ip, tmp_path / "p.pcap")
    assert proof.ok, proof.problems
    assert proof.overhead_bytes == driver.overhead(opts, "default", tunnel.env.implementation, PROBE_INNER_LEN)
    negotiated = driver.negotiated(tunnel, opts, "default")
    assert negotiated and not mismatches(driver.algorithms(opts, "default"), negotiated), negotiated
    tunnel.down()
