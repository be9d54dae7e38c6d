"""The WAN proof on a real testbed: a capture that falls behind is waited for, not stopped early."""

import os
import signal
import threading

import dpkt
import pytest

from vpnlab.plan.study import Link
from vpnlab.run import proof
from vpnlab.testbed.node import Node
from vpnlab.testbed.topology import Layout, Testbed

pytestmark = pytest.mark.integration


def test_a_capture_that_fell_behind_is_read_to_the_end(state, tmp_path, monkeypatch):
    """Both captures are stopped (SIGSTOP) while the probes cross and go on a second later, as a
    starved tcpdump would: the kernel holds the probes for them meanwhile. Ended (SIGTERM) before it
    has read them, tcpdump reads one or two and loses the rest (2 of 6 here), and with them, through
    a tunnel, the proof that none crossed in clear."""
    bed = Testbed.build(state, Layout.for_topology("remote-access", 1), Link(), tag="p")
    captures, spawn = [], Node.spawn

    def spawn_noting_captures(node, argv, *args, **kwargs):
        process = spawn(node, argv, *args, **kwargs)
        if argv[0] == "tcpdump":
            captures.append(process)
        return process

    run = bed.source.run

    def probes_while_the_captures_are_stopped(argv, **kwargs):
        if proof.SEND_PROBES not in argv:
            return run(argv, **kwargs)
        for capture in captures:
            os.kill(capture.pid, signal.SIGSTOP)
        done = run(argv, **kwargs)
        resume = threading.Timer(1.0, lambda: [os.kill(c.pid, signal.SIGCONT) for c in captures])
        resume.start()
        return done

    monkeypatch.setattr(Node, "spawn", spawn_noting_captures)
    monkeypatch.setattr(bed.source, "run", probes_while_the_captures_are_stopped)
    result = proof.prove(bed, None, None, tmp_path / "p.pcap")
    assert len(captures) == 2
    assert result.ok and result.marker_in_clear, result.problems
    assert probes_in(tmp_path / "p.pcap") == proof.PROBES


def probes_in(pcap) -> int:
    """The probes a capture holds: UDP datagrams of the probes' size to their port."""
    with open(pcap, "rb") as fh:
        frames = [dpkt.ethernet.Ethernet(frame).data for _, frame in dpkt.pcap.Reader(fh)]
    return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.udp.UDP) and ip.data.dport == proof.PROBE_PORT
               and len(ip.data.data) == proof.PROBE_PAYLOAD for ip in frames)
