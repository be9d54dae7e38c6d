"""The WAN captures a proof reads (run/proof.analyse), from real captures kept in tests/data."""

from pathlib import Path

from vpnlab.catalog import DRIVERS
from vpnlab.run.proof import PROBE_INNER_LEN, analyse

DATA = Path(__file__).parent / "data"
ABSENT_MARKER = bytes(16)  # these captures' marker is not kept: only the lengths are read here


def test_probes_a_busy_tcp_tunnel_wrote_at_once_do_not_count_as_one_probes_length():
    """SoftEther over TCP in a suite run: the daemon fell behind and wrote the first three probes at
    once (two full 1448-byte segments and a tail), then two alone; the overhead is the lone ones'."""
    folder = DATA / "proof-softether-tcp-merged"
    proof = analyse([folder / "proof.pcap", folder / "proof-right.pcap"], ABSENT_MARKER, [("tcp", 443)],
                    "198.19.0.1")
    softether = DRIVERS["softether"]
    options = softether.Options(transport="tcp")
    assert proof.overhead_bytes == softether.overhead(options, "default", "", PROBE_INNER_LEN) == 96
    assert not proof.marker_in_clear and proof.outer_packets > 0


def test_a_capture_without_the_marker_says_it_may_have_fallen_behind():
    """Without a VPN the marker must be on the WAN. In jaha-2014's run in the emulated guest, tcpdump was
    stopped with packets its filter had taken still unread (3 captured of 6): the reason names that too."""
    folder = DATA / "proof-softether-tcp-merged"
    proof = analyse([folder / "proof.pcap", folder / "proof-right.pcap"], ABSENT_MARKER, None, "198.19.0.1")
    assert not proof.ok and proof.problems == [
        "the marker sent without a VPN was not seen on the WAN: the capture does not work, "
        "or fell behind (a busy machine: tcpdump stopped before it had read every packet)"]
