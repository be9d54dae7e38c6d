"""Nested tunnels with real traffic: the automatic inner MTU leaves the WAN without IP fragments and
a wrong one fills it with them (network namespaces). IPComp shrinking text on the WAN needs kernel
ESP, so the VM: test_vm_site_to_site.py measures it in the same boot as its other site-to-site scenarios.

The arithmetic and the options are checked without traffic in test_mtu_ipcomp_units.py."""

import sqlite3

import pytest

from conftest import run_here
from vpnlab.plan.study import parse_study

pytestmark = pytest.mark.integration


def results(folder):
    """(status and failure, notes, {metric: value}) per VPN label."""
    db = sqlite3.connect(folder / "results.sqlite")
    status = {label: f"{st} {failure or ''}" for label, st, failure in
              db.execute("SELECT vpn_label, status, failure FROM scenarios")}
    # a machine with fewer cores than tunnel ends says so (placement.py): expected, not a finding here
    notes = {label: "; ".join(n for n in text.split("; ") if n and not n.startswith("tunnel ends not pinned"))
             for label, text in db.execute("SELECT vpn_label, coalesce(notes, '') FROM scenarios")}
    values: dict = {}
    for label, metric, value in db.execute("SELECT sc.vpn_label, s.metric, avg(s.value) FROM samples s"
                                           " JOIN scenarios sc ON sc.id = s.scenario_id GROUP BY 1, 2"):
        values.setdefault(label, {})[metric] = value
    db.close()
    assert all(s.startswith("done") for s in status.values()), status
    return notes, values


def test_nested_tunnel_with_the_automatic_mtu_sends_no_fragments_and_a_wrong_one_does(tmp_path, no_leftovers):
    study = parse_study("""
name: nested-mtu
topology: site-to-site
repetitions: 1
vpns:
  - {driver: openvpn, inner: {driver: openvpn, options: {port: 1195}}}
  - {driver: openvpn, inner: {driver: openvpn, options: {port: 1195, mtu: 1500}}}
  - {driver: openvpn, inner: {driver: wireguard}}
links: [{rate_mbit: 100}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 0}]
""")
    run_here(study, tmp_path)
    notes, values = results(tmp_path)
    right, wrong = (values["openvpn aes-256-gcm udp in openvpn aes-256-gcm udp"],
                    values["openvpn aes-256-gcm udp mtu-1500 in openvpn aes-256-gcm udp"])
    wireguard = values["wireguard in openvpn aes-256-gcm udp"]
    # the outer OpenVPN carries 1500 - 52 bytes whole; the inner one takes its own 52 from that,
    # WireGuard its 60
    assert right["tunnel_mtu"] == 1448 - 52 and wireguard["tunnel_mtu"] == 1448 - 60
    assert right["wan_fragments"] == 0 and wireguard["wan_fragments"] == 0
    assert right["overhead_bytes"] == right["overhead_model_bytes"] == 104
    # 1500-byte inner packets become 1604-byte outer ones: every one is cut in two on the WAN
    assert wrong["tunnel_mtu"] == 1500
    assert wrong["wan_fragments"] > 1000
    assert wrong["wan_avg_packet_bytes"] < right["wan_avg_packet_bytes"]
    assert "layer 1 (openvpn) has MTU 1500" in notes["openvpn aes-256-gcm udp mtu-1500 in openvpn aes-256-gcm udp"]
    assert notes["openvpn aes-256-gcm udp in openvpn aes-256-gcm udp"] == ""
    db = sqlite3.connect(tmp_path / "results.sqlite")
    flags = dict(db.execute("SELECT sc.vpn_label, r.flags FROM repetitions r JOIN scenarios sc ON sc.id = r.scenario_id"))
    db.close()
    assert "fragmented: " in flags["openvpn aes-256-gcm udp mtu-1500 in openvpn aes-256-gcm udp"]
    assert "fragmented" not in flags["openvpn aes-256-gcm udp in openvpn aes-256-gcm udp"]
    print(f"\nautomatic MTU: {right['throughput_mbps']:.1f} Mbit/s, {right['wan_bytes_per_byte']:.3f} B/B;"
          f" MTU 1500: {wrong['throughput_mbps']:.1f} Mbit/s, {wrong['wan_bytes_per_byte']:.3f} B/B,"
          f" {wrong['wan_fragments']:.0f} fragments")
