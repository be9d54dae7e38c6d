"""Proof that traffic really went through the tunnel, and its exact overhead.

Before a scenario is measured, the WAN is captured while the source sends the
sink UDP probes of random (incompressible) bytes that start with a per-run marker:
- through a tunnel, the marker must never appear in clear on the WAN and the
  probes must be carried by the tunnel's own outer protocol and port;
- without a VPN the marker must appear (this proves the capture itself works).
Probes of a known inner size give the bytes the tunnel adds per packet, which
is compared with the drivers' encapsulation model. Counting packets on the
wire, not interface counters, keeps TCP retransmissions out of the figure.

Each WAN end records only what it transmits: together that is everything that
crossed the wire. A capture of incoming traffic would also show what kernel IPsec
decrypts, which it hands back through the same interface, in clear.
"""

from __future__ import annotations

import collections
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

from ..core.errors import VpnlabError
from ..core.files import write_own
from ..testbed.idle import wait_asleep
from ..testbed.topology import Testbed

PROBE_PAYLOAD = 1000          # UDP payload bytes: inner IP packet of 1028 bytes
PROBE_INNER_LEN = PROBE_PAYLOAD + 8 + 20
PROBES = 5
PROBE_PORT = 9                # discard: nothing listens, the probes only need to cross
PROBE_GAP_S = 0.05
# A stream may merge probes into one segment: OpenVPN before 2.7.6 keeps Nagle on (a write waits for the
# last one's ACK, which a receiver may delay up to 200 ms), and a daemon that fell behind writes several.
# The second try spaces them wider than that delay, a busy moment and a round trip of a studied link.
WIDE_PROBE_GAP_S = 0.4

# Run by the namespace's python: random payloads, so compression cannot change their size.
SEND_PROBES = """
import os, socket, sys, time
marker, dst, count, size, port = bytes.fromhex(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:6])
gap = float(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(count):
    s.sendto(marker + os.urandom(size - len(marker)), (dst, port))
    time.sleep(gap)
"""


@dataclass
class Proof:
    marker_in_clear: bool
    packets: int                   # IPv4 packets captured on the WAN
    outer_packets: int             # of those, matching the tunnel's outer protocol and port
    overhead_bytes: int | None     # measured outer minus inner IP length of the probes
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _outer_matches(ip: dpkt.ip.IP, outer: tuple[str, int | None]) -> bool:
    proto, port = outer
    layer = ip.data
    if proto == "esp":
        return ip.p == dpkt.ip.IP_PROTO_ESP or (isinstance(layer, dpkt.udp.UDP) and 4500 in (layer.sport, layer.dport))
    if proto == "gre":
        return ip.p == dpkt.ip.IP_PROTO_GRE
    wanted = dpkt.udp.UDP if proto == "udp" else dpkt.tcp.TCP
    return isinstance(layer, wanted) and (port is None or port in (layer.sport, layer.dport))


Channel = tuple[str, int | None]  # ("udp"|"tcp"|"esp"|"gre", port)


def _ends_a_write(ip) -> bool:
    """Could this packet carry one probe whole? In a TCP stream, a daemon that fell behind (a busy
    machine) writes several probes at once: the stream cuts them into full segments, and only a
    write's last segment has PSH. Those full segments are not a probe's length (seen in a suite run:
    SoftEther over TCP measured 472 B of overhead, two full segments against two single probes)."""
    return not isinstance(ip.data, dpkt.tcp.TCP) or bool(ip.data.flags & dpkt.tcp.TH_PUSH)


def analyse(pcaps: list[Path], marker: bytes, channels: list[Channel] | None, src_ip: str,
            encrypted: bool = True) -> Proof:
    """Read the WAN captures. `channels` are the tunnel's own, its data channel first; None for no VPN.
    Through a tunnel that does not encrypt (plain L2TP) the marker must be seen, but only inside
    the tunnel's data channel."""
    packets = outer_packets = 0
    in_clear = inside_readable = False
    lengths: collections.Counter[int] = collections.Counter()
    for frame in _frames(pcaps):
        eth = dpkt.ethernet.Ethernet(frame)
        if not isinstance(eth.data, dpkt.ip.IP):
            continue  # ARP and the like
        ip = eth.data
        packets += 1
        seen = marker in bytes(ip)
        if seen and channels and not encrypted and _outer_matches(ip, channels[0]):
            inside_readable = True
        else:
            in_clear = in_clear or seen
        if channels and any(_outer_matches(ip, c) for c in channels):
            outer_packets += 1
            if _outer_matches(ip, channels[0]) and ip.src == _ip_bytes(src_ip) and ip.len > PROBE_INNER_LEN \
                    and _ends_a_write(ip):
                lengths[ip.len] += 1
    overhead = None
    if lengths:
        length, count = lengths.most_common(1)[0]
        if count >= 2 or channels[0][0] != "tcp":  # in a stream, a length seen once may be a merged write's tail
            overhead = length - PROBE_INNER_LEN
    proof = Proof(in_clear, packets, outer_packets, overhead)
    if channels is None:
        if not in_clear:
            proof.problems.append("the marker sent without a VPN was not seen on the WAN: the capture does not work, "
                                  "or fell behind (a busy machine: tcpdump stopped before it had read every packet)")
    else:
        if in_clear:
            proof.problems.append("the marker crossed the WAN in clear: traffic bypassed the tunnel")
        if not encrypted and not inside_readable:
            proof.problems.append("the tunnel does not encrypt, yet the marker was not seen inside it")
        if outer_packets == 0:
            proto, port = channels[0]
            proof.problems.append(f"no packets of the tunnel's outer protocol ({proto} {port or ''}) on the WAN")
        elif outer_packets < packets:
            proof.problems.append(f"{packets - outer_packets} of {packets} WAN packets were not the tunnel's")
    return proof


def _frames(pcaps: list[Path]):
    for pcap in pcaps:
        with open(pcap, "rb") as fh:
            for _, frame in dpkt.pcap.Reader(fh):
                yield frame


def _ip_bytes(text: str) -> bytes:
    return bytes(int(part) for part in text.split("."))


def prove(bed: Testbed, channels: list[Channel] | None, underlay_src: str | None, pcap: Path,
          encrypted: bool = True, gap_s: float = PROBE_GAP_S) -> Proof:
    """Capture what both WAN ends transmit while the source sends marked probes towards the
    sink; the left end's capture is `pcap`, the right end's sits next to it. Each is written on its
    node (a real host does not have this machine's folders) and copied here once stopped."""
    marker = secrets.token_bytes(16)
    pcaps = [pcap, pcap.with_name(pcap.stem + "-right.pcap")]
    there = [str(node.scratch() / path.name) for node, path in zip(bed.wan_nodes, pcaps)]
    captures = []
    try:
        for side, (node, path) in enumerate(zip(bed.wan_nodes, pcaps)):
            log = path.with_suffix(".log")
            argv = ["tcpdump", "-i", bed.wan_device(side), "-Q", "out", "-n", "-U", "--immediate-mode", "-s", "0",
                    "-Z", "root", "-w", there[side], *bed.wan_filter(side)]
            captures.append((node, node.spawn(argv, log, what="tcpdump"), log))
        for node, capture, log in captures:
            deadline = time.monotonic() + 10
            while "listening on" not in log.read_text(errors="replace"):
                if capture.poll() is not None or time.monotonic() > deadline:
                    raise VpnlabError(f"tcpdump did not start on the WAN: {log.read_text(errors='replace').strip()}")
                time.sleep(0.05)
        idle = [wait_asleep(node, capture, LEARN_S) for node, capture, _ in captures]
        bed.source.run([bed.source.python, "-c", SEND_PROBES, marker.hex(), bed.sink_ip, PROBES, PROBE_PAYLOAD,
                        PROBE_PORT, gap_s], timeout=30)
        time.sleep(0.1)  # let the last probes and their answers reach the captures
        behind = [side for side, ((node, capture, _), call) in enumerate(zip(captures, idle))
                  if call is not None and wait_asleep(node, capture, CATCH_UP_S, call) is None]
    finally:
        for node, capture, _ in captures:
            node.stop(capture)
    for node, path, remote in zip(bed.wan_nodes, pcaps, there):
        write_own(path, node.read_file(remote))  # never through a link planted in the results directory
        node.remove_file(remote)
    proof = analyse(pcaps, marker, channels, underlay_src or bed.address(0, 0), encrypted)
    proof.problems += [f"the {('left', 'right')[side]} WAN end's capture had not read every packet when it was "
                       f"stopped (a busy machine for {CATCH_UP_S:.0f} s, or it ended): the proof would be incomplete"
                       for side in behind]
    return proof


# A capture has read every packet the kernel gave it once it sleeps again in the system call it
# sleeps in when idle (libpcap's poll): a packet for it wakes it at once, so asleep there it has none
# left. Stopped before that, tcpdump loses what it had not read (a busy machine: 3 of 6 once). Where
# that call cannot be learnt (no /proc/<pid>/syscall), the captures are stopped as they are.
LEARN_S, CATCH_UP_S = 2, 10
