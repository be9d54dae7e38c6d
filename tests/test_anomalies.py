"""Regression tests for the explained anomalies (issue 15, section 6): real tunnels, real traffic.

- ocserv over DTLS: openconnect sends over its TLS channel whatever its UDP socket cannot take at
  once. Its socket buffer is MTU x --queue-len, and the WAN's bottleneck queue sits in the client's
  own namespace here, so with the default queue length a third of the packets took the TLS path,
  arrived out of order, and TCP retransmitted 15-25% of its segments.
- OpenVPN set-up: the client started before the server's socket existed (a 2 s handshake retry),
  point-to-point mode brings the tunnel up only on a whole-second timer tick, and a TCP server in
  that mode looks for its connection once a second. Client/server mode does neither.
"""

import json
import re
import time

import pytest

from vpnlab.machines.capabilities import detect
from vpnlab.catalog import DRIVERS
from vpnlab.drivers.base import TunnelEnv
from vpnlab.plan.study import Link
from vpnlab.testbed.topology import Layout, Testbed
from vpnlab.run.tunnels import first_packet

pytestmark = pytest.mark.integration


def up(state, tmp_path, driver_name, rate_mbit, **options):
    link = Link(rate_mbit=rate_mbit)
    bed = Testbed.build(state, Layout.for_topology("remote-access", 1), link, tag="a")
    driver = DRIVERS[driver_name]
    opts = driver.Options(**options)
    left, right = bed.tunnel_sites(0)
    started = time.monotonic()
    tunnel = driver.up(left, right, opts, "default", TunnelEnv(state, 0, tmp_path, driver.resolve(opts, detect()).name))
    while not first_packet(bed, link):
        assert time.monotonic() - started < 30, "no packet got through the tunnel"
    return bed, tunnel, time.monotonic() - started


def tls_bytes_sent(bed) -> int:
    """Bytes the client has sent on its TLS (CSTP) connection to the gateway."""
    out = bed.source.run(["ss", "-Htin", "( dport = :443 )"]).stdout
    return sum(int(n) for n in re.findall(r"bytes_sent:(\d+)", out))


def test_ocserv_dtls_data_stays_on_dtls_through_a_shaped_link(state, tmp_path):
    bed, tunnel, _ = up(state, tmp_path, "ocserv", 50, transport="dtls")
    server = bed.sink.spawn(["iperf3", "-s", "-1"], tmp_path / "iperf.log", what="iperf3")
    bed.sink.wait_listening(5201, server, tmp_path / "iperf.log")
    before = tls_bytes_sent(bed)
    result = json.loads(bed.source.run(["iperf3", "-c", bed.sink_ip, "-t", "3", "-J"]).stdout)["end"]
    over_tls = tls_bytes_sent(bed) - before
    server.wait(timeout=10)
    sent = result["sum_sent"]
    # Before the fix: 30-50% of the bytes over TLS, 15-25% of the segments retransmitted (after it,
    # 1.03% once, under the suite's load at its start)
    assert over_tls < 0.01 * sent["bytes"], f"{over_tls} of {sent['bytes']} bytes took the TLS channel"
    assert sent["retransmits"] < 0.03 * sent["bytes"] / 1448, f"{sent['retransmits']} segments retransmitted"
    tunnel.down()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_openvpn_carries_its_first_packet_at_once(state, tmp_path, transport, monkeypatch):
    from vpnlab.drivers import openvpn

    pki_done = []
    make_pki = openvpn.make_pki

    def timed_make_pki(*args):  # the per-tunnel PKI is made before the daemons start
        pki = make_pki(*args)
        pki_done.append(time.monotonic())
        return pki

    monkeypatch.setattr(openvpn, "make_pki", timed_make_pki)
    _, tunnel, seconds = up(state, tmp_path, "openvpn", 100, transport=transport)
    daemons = time.monotonic() - pki_done[0]  # from starting the daemons to the first packet
    client_log = next(log for _, _, log in tunnel.processes if "client" in log.name).read_text()
    assert "ECONNREFUSED" not in client_log, "the client started before the server listened"
    # Before the fix: 1.3 s over UDP (3.5 s when the client started first), 2.1 s over TCP; after it
    # 0.2-0.6 s, up to 0.6 on a machine busy with the suite's VMs: 1.0 still tells the two apart.
    assert daemons < 1.0, f"{daemons:.2f} s from the daemons' start to the first packet ({seconds:.2f} s in all)"
    tunnel.down()
