"""udp: iperf3 at a fixed send rate (Jaha's UDP throughput, jitter and loss)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..metrics import declare
from ..core.schema import Size, parse_size, whole_seconds
from . import iperf
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

THROUGHPUT = declare("throughput_mbps", "Mbit/s", "goodput at the receiver (iperf3 sum_received; file bytes over "
                     "transfer time)", True, judged="share", graded=True, positive=True, producers="udp")
SENT = declare("udp_sent_mbps", "Mbit/s", "send rate achieved", True, positive=True, producers="udp")
OFFERED = declare("udp_offered_mbps", "Mbit/s", "send rate asked of iperf3: the study's, or its share of a link "
                  "slowed for emulation", None, positive=True, producers="udp")
JITTER = declare("udp_jitter_ms", "ms", "RFC 3550 interarrival jitter at the receiver", False, judged="added",
                 graded=True, producers="udp")
LOSS = declare("udp_loss_pct", "%", "datagrams sent that never arrived (those after the last one received too)",
               False, judged="points", graded=True, producers="udp")


# iperf3 3.12 -u -l: "block size invalid (minimum = 16 bytes, maximum = 65507 bytes)" (its
# sequence number and timestamp; the largest IPv4 UDP payload)
MIN_SIZE, MAX_SIZE = 16, 65507


def datagram_size(value) -> int:
    size = parse_size(value)
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"iperf3 sends UDP payloads of {MIN_SIZE} to {MAX_SIZE} bytes (-l), got {size}")
    return size


class UdpOptions(WorkloadOptions):
    """iperf3 UDP at a fixed send rate."""

    kind: Literal["udp"] = "udp"
    rate_mbit: float = Field(10, gt=0, le=100_000)
    size: Size = Field(1400, ge=MIN_SIZE, le=MAX_SIZE, description="datagram payload bytes (iperf3 -l)")
    duration_s: float = Field(5, ge=1, le=3600, description="whole seconds (iperf3 -t)")  # float: see TcpOptions
    reverse: bool = False

    @field_validator("size", mode="before")
    @classmethod
    def parse_datagram_size(cls, value):
        return datagram_size(value)

    @field_validator("duration_s", mode="before")
    @classmethod
    def whole(cls, value):
        return whole_seconds(value)

    @property
    def label(self) -> str:
        return f"udp-{self.rate_mbit:g}M-{self.size}B" + ("-rev" if self.reverse else "")


def parse(data: dict) -> dict[str, float]:
    end = data["end"]
    # Since iperf3 3.x the receiver's figures are in sum_received; older ones only have sum.
    received = end.get("sum_received") or end["sum"]
    sent = end.get("sum_sent") or end["sum"]
    summary = end.get("sum") or received
    return {
        "throughput_mbps": received["bits_per_second"] / 1e6,
        "udp_sent_mbps": sent["bits_per_second"] / 1e6,
        "udp_jitter_ms": float(summary.get("jitter_ms", received.get("jitter_ms", 0.0))),
        "udp_loss_pct": loss_pct(end),
    }


def loss_pct(end: dict) -> float:
    """% of the datagrams sent that never arrived (sent, with -R too, is the sending side's count). Not
    iperf3's lost_percent: it counts only the gaps below the highest sequence number received, so the
    datagrams lost after the last one that arrived (a tunnel that stalls, a queue dropped at the end) go
    uncounted. Datagrams the receiver had not yet read when the test ended count as lost too (2 of 5356
    at 15 Mbit/s through tbf here; more from a receiver the CPU starves). Whole-run counts: with -O (not
    passed here) each side would restart its own at its own time."""
    sent, received = end.get("sum_sent", {}), end.get("sum_received", {})
    if not sent.get("packets") or "lost_packets" not in received:  # older iperf3: only its own figure
        summary = end.get("sum") or received
        return float(summary.get("lost_percent", received.get("lost_percent", 0.0)))
    # the receiver's packets are the highest sequence number it saw, its lost_packets the gaps below it
    arrived = received["packets"] - received["lost_packets"]
    return 100 * (sent["packets"] - arrived) / sent["packets"]


class Udp(WorkloadKind):
    kind = "udp"
    summary = "iperf3 UDP at a fixed send rate: rate_mbit, size, duration_s, reverse"
    Options = UdpOptions
    tools = iperf.TOOLS
    metrics = (THROUGHPUT, SENT, OFFERED, JITTER, LOSS)
    primary = "throughput_mbps"
    in_mesh = True
    loads_path = True
    graded = (("throughput_mbps", "UDP throughput"), ("udp_jitter_ms", "jitter"), ("udp_loss_pct", "loss"))
    plotted = ("throughput_mbps", "udp_jitter_ms", "udp_loss_pct")

    def slowed(self, options: UdpOptions, factor: float) -> UdpOptions:
        return options.model_copy(update={"rate_mbit": options.rate_mbit / factor})  # the same share of the link

    def estimate_s(self, options: UdpOptions, rate_mbit):
        return options.duration_s + 0.5

    def prepare(self, options: UdpOptions, ctx: WorkloadContext) -> None:
        iperf.ensure_server(ctx)

    def run(self, options: UdpOptions, ctx: WorkloadContext) -> Measurement:
        args = ["-u", "-b", f"{options.rate_mbit:g}M", "-l", options.size, "-t", options.duration_s]
        if options.reverse:
            args.append("-R")
        data, raw = iperf.client(ctx, args, options.duration_s)
        received = data["end"].get("sum_received") or data["end"]["sum"]
        values = parse(data) | {"udp_offered_mbps": options.rate_mbit}
        return Measurement(values, raw, "iperf3", carried_bytes=received.get("bytes"))
