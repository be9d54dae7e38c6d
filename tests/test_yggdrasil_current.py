"""The current Yggdrasil (0.5), built from its Go module with vpnlab's stand-in for the one dependency the
Go module proxy refuses, beside 0.4.7 (the release Debian 12 ships, built from its module too), through
the runner: a study on an unshaped link runs both with the driver's one configuration, each carries real
traffic encrypted across the WAN (TLS records of the probes' size on the peering, the overhead on each
version's model), each node's address and subnet in the benchmarking range (the builds' edit; as
released they are in 200::/7), and the run records which build it measured. The ratio of their goodputs
is printed."""

import ipaddress
import re


import dpkt
import pytest

from conftest import run_here
from side_by_side import build_as_bootstrap_does, check_mesh_of_both, mesh_study, said_side_by_side, stored_side_by_side
from vpnlab.drivers.yggdrasil import CTL_BUILD, CURRENT, CURRENT_BUILD, RELEASE_BUILD, Yggdrasil
from vpnlab.plan.study import parse_study
from vpnlab.run import proof
from vpnlab.tools import gobuild

pytestmark = pytest.mark.integration

STUDY = """
name: yggdrasil-current-beside-0.4.7
topology: remote-access
repetitions: 2
vpns:
  - {driver: yggdrasil, options: {implementation: yggdrasil}}
  - {driver: yggdrasil, options: {implementation: yggdrasil-current}}
links: [{}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 1}]
"""
OUTER = 20 + 32  # IPv4 and TCP with timestamps, around the TLS record on the peering
APPLICATION_DATA = b"\x17\x03\x03"  # a TLS 1.3 record as it travels (type application data, legacy version)


@pytest.fixture(scope="module")
def built():
    """The daemons' and yggdrasilctl's builds, as bootstrap.sh makes them (kept in vpnlab's cache)."""
    build_as_bootstrap_does()
    record = gobuild.recorded(CURRENT_BUILD, CURRENT)
    assert (record["version"], record["stand_ins"]) == ("v0.5.14", ["suah.dev/protect"])
    assert gobuild.recorded(CTL_BUILD, "yggdrasilctl-current")["path"] == CTL_BUILD.package
    assert gobuild.recorded(RELEASE_BUILD, "yggdrasil")["edited"] == ["src/address/address.go"]
    return record


BENCHMARKING = ipaddress.ip_network("2001:2::/48")


def node_networks(logs: str) -> list:
    """The addresses and subnets the nodes say they took ('Your IPv6 address is ...', '... subnet is ...')."""
    return [ipaddress.ip_network(found, strict=False)
            for found in re.findall(r"Your IPv6 (?:address|subnet) is (\S+)", logs)]


def sealed_probes(pcap, size: int) -> int:
    """The probes a WAN capture holds as the peering's TLS sealed them: TCP segments to or from its port
    that are one application-data record of the probe's size as the model has it."""
    with open(pcap, "rb") as fh:
        frames = [dpkt.ethernet.Ethernet(frame).data for _, frame in dpkt.pcap.Reader(fh)]
    return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) and 12345 in (ip.data.sport, ip.data.dport)
               and ip.data.data[:3] == APPLICATION_DATA and len(ip.data.data) == size - OUTER for ip in frames)


def test_the_current_build_and_0_4_7_side_by_side_on_an_unshaped_link(built, tmp_path, no_leftovers, capsys):
    run_here(parse_study(STUDY), tmp_path)
    scenarios, values, versions = stored_side_by_side(tmp_path, {"yggdrasil", CURRENT})
    goodput = {}
    for name, sc in scenarios.items():
        mine = {metric: each[-1] for metric, each in values[name].items()}
        model = Yggdrasil().overhead(Yggdrasil.Options(), "default", name, proof.PROBE_INNER_LEN)
        assert mine["overhead_bytes"] == mine["overhead_model_bytes"] == model == {CURRENT: 268}.get(name, 266), name
        goodput[name] = values[name]["throughput_mbps"]
        # each repetition carried traffic; the speeds depend on the suite's load (their ratio is printed, not asserted)
        assert len(goodput[name]) == 2 and min(goodput[name]) > 1, (name, goodput[name])
        # every repetition's WAN capture: the probes crossed as TLS records of their size (the proof: never in
        # clear); the peering is TCP, which may put several probes in one segment (a busy machine): at least two
        # crossed alone, as the proof asks of a stream, and when none did it probed again, spaced (proof-spaced.pcap)
        pcaps = [rep / "proof-spaced.pcap" if (rep / "proof-spaced.pcap").exists() else rep / "proof.pcap"
                 for rep in sorted((tmp_path / "logs" / sc["id"]).glob("rep*"))]
        counts = [sealed_probes(p, proof.PROBE_INNER_LEN + model) for p in pcaps]
        assert len(counts) == 2 and all(2 <= n <= proof.PROBES for n in counts), (name, counts)
        logs = "".join(p.read_text() for p in (tmp_path / "logs" / sc["id"]).rglob("*yggdrasil-*.log"))
        # what each says on connecting: 0.4 names the protocol there, 0.5 the direction alone
        assert ("Connected inbound: " in logs) == (name == CURRENT) and "TLS listener started" in logs, name
        # both nodes of every repetition: an address and a subnet each, in the benchmarking range
        networks = node_networks(logs)
        assert len(networks) >= 4 and all(n.subnet_of(BENCHMARKING) for n in networks), (name, networks)
    # the run names the build it measured: the module at its pinned version, its Go, the stand-in
    assert versions[CURRENT] == gobuild.describe(built)
    assert f"{CURRENT_BUILD.module} v0.5.14" in versions[CURRENT] and built["go"] in versions[CURRENT]
    assert "suah.dev/protect replaced by vpnlab's stand-in" in versions[CURRENT]
    assert f"{RELEASE_BUILD.module} v0.4.7" in versions["yggdrasil"] and "address.go edited by vpnlab" in versions["yggdrasil"]
    with capsys.disabled():
        ratio = said_side_by_side("yggdrasil", CURRENT, versions, goodput, 3)


def test_both_join_a_mesh_of_three_and_carry_every_pair(built, tmp_path, no_leftovers):
    """Both versions as a full mesh of three peers: every pair's TCP through it, the measured pair's
    overhead on each version's model."""
    run_here(parse_study(mesh_study("yggdrasil", ("yggdrasil", CURRENT))), tmp_path)
    check_mesh_of_both(tmp_path, {"yggdrasil", CURRENT})
