"""What is watched beside a workload while it runs, each observer with its own metrics: the
frames and fragments that crossed the WAN (the small-business study read packet sizes, the FAVE
thesis the bytes a 100 MB transfer really cost), and the round trip under load (the small-business
study measured latency during its transfers; Flent's RRUL asks the same question).

An observer starts right before the workload and finishes right after it with its values and its flags
(what a reader must know about them); `observers_for` picks them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..core.flags import Flag, declare as declare_flag
from ..metrics import declare
from ..testbed.router import fragments_created
from .recovery import EventsObserver
from ..testbed.topology import Testbed

FRAGMENTED = declare_flag("fragmented", "IP fragments on the WAN: packets bigger than the path MTU")

_ALL = "tcp, udp, udp_capacity, ping, transfer"
WAN_METRICS = (
    declare("wan_avg_packet_bytes", "B", "mean size of the Ethernet frames that crossed the WAN, both directions (a background's too)",
            None, producers=_ALL),
    declare("wan_packets_per_s", "packets/s", "frames per second on the WAN, both directions (a background's too)", None, producers=_ALL),
    declare("wan_bytes_per_byte", "B/B", "WAN frame bytes, both directions (headers, handshakes, acknowledgements "
            "and retransmissions included), per byte of payload carried (on a link with background, its bytes too)", False, positive=True,
            producers="tcp, udp, transfer"),
    declare("link_utilisation_total_pct", "%", "the WAN's busier direction during the measurement: its frames' bytes "
            "(the workload's, the background's and the tunnel's overhead) as a share of the link rate", None,
            level="background", producers="links with background and a rate"),
    declare("wan_fragments", "count", "IP fragments the two WAN ends (and a router in the middle, for a link's mtu) "
            "created: packets too big for the path MTU",
            False, producers=_ALL),
)
RTT_UNDER_LOAD = declare("rtt_under_load_ms", "ms", "mean round-trip time of pings sent every 0.2 s while the "
                         "workload loads the path (latency under load)", False, judged="added", positive=True,
                         producers="tcp, udp, udp_capacity, transfer")
RTT_UNANSWERED = declare("rtt_under_load_unanswered_pct", "%", "pings sent under load left without a reply "
                         "(up to the last one answered): rtt_under_load_ms is the mean of the others, so a lower "
                         "bound when they are many", False, producers="tcp, udp, udp_capacity, transfer")
PING_INTERVAL_S = 0.2
LOST_AFTER_S = 2  # ping's -W 1, and a second more: no reply by then to any ping is a loss, not a delay
_REPLY = re.compile(r"(?:icmp_)?seq=(\d+) .*?time=([\d.]+) ms")  # iputils; busybox says seq=


class WanObserver:
    """Frames, bytes and fragments at the two ends of the WAN link; with a background, how full
    its busier direction was."""

    def __init__(self, bed: Testbed, link=None):
        self.bed = bed
        self.rate_mbit = link.rate_mbit if link is not None and link.background else None

    def start(self) -> None:
        self._started = time.monotonic()
        self._counters = self.bed.wan_counters()
        self._fragments = self._fragments_created()

    def finish(self, carried_bytes: float | None) -> tuple[dict[str, float], list[Flag]]:
        wall = time.monotonic() - self._started
        after = self.bed.wan_counters()
        frames = sum(after[k] - self._counters[k] for k in ("tx_packets", "rx_packets"))
        frame_bytes = sum(after[k] - self._counters[k] for k in ("tx_bytes", "rx_bytes"))
        fragments = self._fragments_created() - self._fragments
        values = {"wan_packets_per_s": frames / wall, "wan_fragments": float(fragments)}
        if frames:
            values["wan_avg_packet_bytes"] = frame_bytes / frames
        if carried_bytes:
            values["wan_bytes_per_byte"] = frame_bytes / carried_bytes
        if self.rate_mbit:  # on the wire, per direction: the background's downloads and an upload share no queue
            busier = max(after[k] - self._counters[k] for k in ("tx_bytes", "rx_bytes"))
            values["link_utilisation_total_pct"] = 100 * busier * 8 / wall / (self.rate_mbit * 1e6)
        flags = [FRAGMENTED(f"{fragments} IP fragments on the WAN (packets bigger than the path MTU), whose cost "
                            "is in these figures")] if fragments else []
        return values, flags

    def _fragments_created(self) -> int:
        """IP fragments created so far in the two WAN ends' namespaces and, where the link has one, the
        router's in the middle of the WAN, which fragments what is bigger than the path's MTU and has no
        DF bit (/proc/net/snmp)."""
        nodes = getattr(self.bed, "path_nodes", None) or self.bed.wan_nodes
        return sum(fragments_created(node.read_net("snmp")) for node in nodes)


class LoadedRtt:
    """Pings from the source to the sink beside a workload that loads the path."""

    def __init__(self, bed: Testbed, log_dir: Path):
        self.bed, self.log = bed, log_dir / "rtt-under-load.log"

    def start(self) -> None:
        self._proc = self.bed.source.spawn(["ping", "-n", "-i", PING_INTERVAL_S, "-W", 1, self.bed.sink_ip], self.log,
                                           what="ping")
        self._started = time.monotonic()

    def finish(self, carried_bytes: float | None) -> tuple[dict[str, float], list[Flag]]:
        self.bed.source.stop(self._proc)
        return loaded_rtt_values(self.log.read_text(errors="replace"), time.monotonic() - self._started), []


def loaded_rtt_values(ping_output: str, seconds: float) -> dict[str, float]:
    """The mean round trip of the answered pings, and the share of pings up to the last answered one
    that went unanswered (lost in a full queue; the ones after it may still have been under way).
    None answered in `seconds` of pinging: all lost, if that was long enough for one to come back."""
    replies: dict[int, float] = {}
    for seq, ms in _REPLY.findall(ping_output):
        replies.setdefault(int(seq), float(ms))  # a duplicate reply (DUP!) is not another ping
    if not replies:
        return {"rtt_under_load_unanswered_pct": 100.0} if seconds > LOST_AFTER_S else {}
    asked = max(replies) + (0 in replies)  # iputils counts from 1, busybox from 0
    return {"rtt_under_load_ms": sum(replies.values()) / len(replies),
            "rtt_under_load_unanswered_pct": 100 * (asked - len(replies)) / asked}


def observers_for(kind, bed: Testbed, log_dir: Path, link=None, workload=None, tunnels=()) -> list:
    """The observers of a workload on `link` (as run): every one watches the WAN; a kind that loads
    the path also gets its round trip measured meanwhile; a workload with events gets them, and its
    tunnel's recovery measured (recovery.py)."""
    found = [WanObserver(bed, link)]
    if kind.loads_path:
        found.append(LoadedRtt(bed, log_dir))
    if workload is not None and workload.events:
        found.append(EventsObserver(bed, log_dir, workload.events, tunnels))
    return found
