"""The current Nebula, built from its Go module (nebula and nebula-cert), beside Debian's 1.6.1, through
the runner: a study on an unshaped link runs both, each carries real traffic encrypted across the WAN
(the probes as Nebula messages, the overhead on the model), and the run records which build it measured.
The ratio of their goodputs is printed."""


import dpkt
import pytest

from conftest import run_here
from side_by_side import build_as_bootstrap_does, check_mesh_of_both, mesh_study, said_side_by_side, stored_side_by_side
from vpnlab.drivers.nebula import CURRENT, CURRENT_BUILD, CURRENT_CERT_BUILD, HEADER, PROGRAMS
from vpnlab.plan.study import parse_study
from vpnlab.run import proof
from vpnlab.tools import gobuild

pytestmark = pytest.mark.integration

STUDY = """
name: nebula-current-beside-debian
topology: remote-access
repetitions: 2
vpns:
  - {driver: nebula, options: {implementation: nebula}}
  - {driver: nebula, options: {implementation: nebula-current}}
links: [{}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 1}]
"""
MESSAGE = b"\x11\x00"  # Nebula's header: version 1, type 1 (a message), subtype 0


@pytest.fixture(scope="module")
def built():
    """Both commands' builds, as bootstrap.sh makes them (kept in vpnlab's cache: built once, reused)."""
    build_as_bootstrap_does()
    records = [gobuild.recorded(build, command)
               for build, command in ((CURRENT_BUILD, CURRENT), (CURRENT_CERT_BUILD, PROGRAMS[CURRENT][1]))]
    assert [(r["path"], r["version"]) for r in records] == [(CURRENT_BUILD.package, "v1.11.1"),
                                                            (CURRENT_CERT_BUILD.package, "v1.11.1")]
    return records[0]


def sealed_probes(pcap) -> int:
    """The probes a WAN capture holds as Nebula sealed them: UDP to its port, a message of the probe's
    size and the header and tag."""
    with open(pcap, "rb") as fh:
        frames = [dpkt.ethernet.Ethernet(frame).data for _, frame in dpkt.pcap.Reader(fh)]
    return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.udp.UDP) and 4242 in (ip.data.sport, ip.data.dport)
               and ip.data.data[:2] == MESSAGE and len(ip.data.data) == HEADER - 28 + proof.PROBE_INNER_LEN
               for ip in frames)


def test_the_current_build_and_debians_side_by_side_on_an_unshaped_link(built, tmp_path, no_leftovers, capsys):
    run_here(parse_study(STUDY), tmp_path)
    scenarios, values, versions = stored_side_by_side(tmp_path, {"nebula", CURRENT})
    goodput = {}
    for name, sc in scenarios.items():
        mine = {metric: each[-1] for metric, each in values[name].items()}
        assert mine["overhead_bytes"] == mine["overhead_model_bytes"] == HEADER == 60, name
        goodput[name] = values[name]["throughput_mbps"]
        # each repetition carried traffic; the speeds depend on the suite's load (their ratio is printed, not asserted)
        assert len(goodput[name]) == 2 and min(goodput[name]) > 1, (name, goodput[name])
        # every repetition's WAN capture: the probes crossed as Nebula messages (the proof: never in clear)
        pcaps = sorted((tmp_path / "logs" / sc["id"]).glob("rep*/proof.pcap"))
        assert len(pcaps) == 2, pcaps
        assert [sealed_probes(p) for p in pcaps] == [proof.PROBES] * 2, name
        logs = "".join(p.read_text() for p in (tmp_path / "logs" / sc["id"]).rglob("*nebula-client*.log"))
        assert ("build=1.11.1" in logs) == (name == CURRENT), name  # the daemon that ran says which it is
    # the run names the builds it measured: the module at its pinned version, and its Go
    assert versions[CURRENT] == versions[PROGRAMS[CURRENT][1]] == gobuild.describe(built)
    assert f"{CURRENT_BUILD.module} v1.11.1" in versions[CURRENT] and built["go"] in versions[CURRENT]
    assert CURRENT_BUILD.module not in versions["nebula"] and "1.6.1" in versions["nebula"]
    with capsys.disabled():
        ratio = said_side_by_side("nebula", CURRENT, versions, goodput, 3)


def test_both_join_a_mesh_of_three_and_carry_every_pair(built, tmp_path, no_leftovers):
    """Both versions as a full mesh of three peers: every pair's TCP through it, the measured pair's
    overhead on each version's model."""
    run_here(parse_study(mesh_study("nebula", ("nebula", CURRENT))), tmp_path)
    check_mesh_of_both(tmp_path, {"nebula", CURRENT})
