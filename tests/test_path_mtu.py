"""A path's MTU and filtered ICMP (issue 47) on real namespaces with real traffic: the router in the
middle of the WAN enforces the link's MTU, its filter really drops the ICMP error the kernel sends
(a DF packet above the MTU gets none back), and a VPN's behaviour under it is stored as a sample."""

import sqlite3

import pytest

from conftest import run_here
from vpnlab.catalog import DRIVERS
from vpnlab.plan.study import Link, parse_study
from vpnlab.testbed.topology import Layout, Testbed
from vpnlab.workloads.base import WorkloadContext
from vpnlab.workloads.path_mtu import PathMtu, PathMtuOptions, probe_path_mtu

pytestmark = pytest.mark.integration

SHORT = PathMtuOptions(size=1024 * 1024, timeout_s=4, stall_s=2)


def nstat(node) -> dict[str, int]:
    """The namespace's absolute SNMP counters (nstat -a: since it was made, nothing reset)."""
    out = node.run(["nstat", "-a", "-s", "-z"]).stdout
    return {fields[0]: int(fields[1]) for fields in (line.split() for line in out.splitlines()[1:]) if len(fields) > 1}


@pytest.mark.parametrize("mtu, topology", [(1400, "remote-access"), (1280, "site-to-site")])
def test_no_vpn_path_mtu_is_the_links(state, tmp_path, mtu, topology):
    bed = Testbed.build(state, Layout.for_topology(topology, 0), Link(mtu=mtu), tag="p")
    try:
        found, probes = probe_path_mtu(WorkloadContext(bed, tmp_path))
        assert found == mtu, probes
        # set in the middle of the WAN: the ends' own interfaces keep the veth's 1500
        for node in bed.wan_nodes:
            assert f"mtu 1500 " in node.run(["ip", "link", "show", f"l{bed.layout.wan}"]).stdout
    finally:
        bed.destroy()
    assert bed.router is None and not any(name.endswith("prouter") for name in state.namespaces)


def test_without_a_path_setting_the_wan_has_no_router(state):
    bed = Testbed.build(state, Layout.for_topology("remote-access", 0), Link(rate_mbit=50), tag="q")
    try:
        assert bed.router is None and len(state.namespaces) == 3
        assert "link-netns" in bed.nodes[0].run(["ip", "-d", "link", "show", "l0"]).stdout
        assert bed.nodes[1].namespace in bed.nodes[0].run(["ip", "link", "show", "l0"]).stdout
    finally:
        bed.destroy()


@pytest.mark.parametrize("icmp", ["allowed", "blocked"])
def test_a_df_packet_above_the_mtu_gets_an_icmp_error_back_only_when_allowed(state, tmp_path, icmp):
    """The fault injected for real: the router's kernel makes the ICMP "fragmentation needed" either way
    (IcmpOutDestUnreachs), its nftables rule drops it when blocked (the rule's counter), and the sender
    gets it (IcmpInDestUnreachs, ping's "Frag needed") only when allowed; a packet at the MTU crosses."""
    bed = Testbed.build(state, Layout.for_topology("remote-access", 0), Link(mtu=1400, icmp=icmp), tag="i")
    try:
        client, sink = bed.source, bed.sink_ip
        assert client.run(["ping", "-n", "-c", 1, "-W", 2, "-M", "do", "-s", 1400 - 28, sink], check=False).returncode == 0
        before, router_before = nstat(client), nstat(bed.router)
        big = client.run(["ping", "-n", "-c", 1, "-W", 1, "-M", "do", "-s", 1401 - 28, sink], check=False)
        after, router_after = nstat(client), nstat(bed.router)
        assert big.returncode != 0  # too big either way
        made = router_after.get("IcmpOutDestUnreachs", 0) - router_before.get("IcmpOutDestUnreachs", 0)
        got = after.get("IcmpInDestUnreachs", 0) - before.get("IcmpInDestUnreachs", 0)
        assert made == 1
        if icmp == "blocked":
            assert (got, bed.dropped_icmp()) == (0, 1), big.stdout
            assert "Frag needed" not in big.stdout
        else:
            assert (got, bed.dropped_icmp()) == (1, 0), big.stdout
            assert "Frag needed and DF set (mtu = 1400)" in big.stdout
    finally:
        bed.destroy()


def test_no_vpn_bulk_tcp_stalls_in_the_black_hole_and_completes_without_it(state, tmp_path):
    kind = PathMtu()
    results = {}
    for icmp in ("allowed", "blocked"):
        bed = Testbed.build(state, Layout.for_topology("remote-access", 0), Link(mtu=1400, icmp=icmp), tag=icmp[0])
        try:
            results[icmp] = kind.run(SHORT, WorkloadContext(bed, tmp_path))
        finally:
            bed.destroy()
    allowed, blocked = results["allowed"].values, results["blocked"].values
    assert allowed["path_mtu_bytes"] == blocked["path_mtu_bytes"] == 1400
    assert (allowed["bulk_completed"], allowed["bulk_stalled"]) == (1, 0)
    assert (blocked["bulk_completed"], blocked["bulk_stalled"], blocked["bulk_goodput_mbps"]) == (0, 1, 0)
    assert [f.kind for f in results["blocked"].flags] == ["black-hole"] and not results["allowed"].flags


def test_wireguard_under_blocked_icmp_is_stored_as_a_sample(tmp_path, no_leftovers):
    """WireGuard's outer packets carry DF (Linux's default for a UDP socket), so with the ICMP filtered its
    path MTU is the largest inner packet whose encapsulation (+60, padded to 16) fits 1400 bytes, and bulk
    TCP in its 1420-byte MTU stalls."""
    study = parse_study("""
name: path-mtu-wireguard
repetitions: 1
vpns: [{driver: wireguard}]
links: [{mtu: 1400, icmp: blocked}]
workloads: [{kind: path-mtu, size: 1M, timeout_s: 4, stall_s: 2}]
""")
    plan = run_here(study, tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = db.execute("SELECT status, failure FROM scenarios").fetchall()
    values = dict(db.execute("SELECT metric, value FROM samples"))
    flags = db.execute("SELECT flags FROM repetitions").fetchall()
    db.close()
    assert status == [("done", None)] or status[0][0] == "done", status
    scenario = plan.scenarios[0]
    wireguard = DRIVERS["wireguard"]
    # the drivers' encapsulation arithmetic: the largest inner packet whose outer one fits the path's 1400
    expected = max(size for size in range(68, 1421)
                   if size + wireguard.overhead(scenario.vpn.options, "default", scenario.implementations[0], size) <= 1400)
    assert expected == 1328
    assert values["path_mtu_bytes"] == expected
    assert (values["bulk_stalled"], values["bulk_completed"]) == (1, 0)
    assert values["tunnel_mtu"] == 1420
    assert "black-hole" in str(flags)
