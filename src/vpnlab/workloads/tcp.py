"""tcp: an iperf3 bulk transfer (Jaha's and Narayan's TCP throughput, window and stream sweeps)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..metrics import declare
from ..schema import Size, human_size, parse_size
from . import iperf
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

RETRANSMIT_FLAG_PCT = 1.0  # above this share of segments, say so: the path is lossy or a queue overflows
MSS = 1448                 # payload of a full segment with timestamps, to turn bytes into segments

THROUGHPUT = declare("throughput_mbps", "Mbit/s", "goodput at the receiver (iperf3 sum_received; file bytes over "
                     "transfer time)", True, judged="share", graded=True, positive=True, producers="tcp")
RETRANSMITS = declare("retransmits", "segments", "TCP retransmissions at the sender", False, producers="tcp")


class TcpOptions(WorkloadOptions):
    """iperf3 TCP bulk transfer."""

    kind: Literal["tcp"] = "tcp"
    duration_s: float = Field(10, gt=0, le=3600)
    omit_s: float = Field(1, ge=0, le=600, description="warm-up seconds left out of the result")
    window: Size | None = Field(None, description="socket buffer (iperf3 -w); the namespace limits are raised to allow it")
    streams: int = Field(1, ge=1, le=128)
    reverse: bool = Field(False, description="server sends, client receives")

    @field_validator("window", mode="before")
    @classmethod
    def parse_window(cls, value):
        return None if value is None else parse_size(value)

    @property
    def label(self) -> str:
        parts = ["tcp"]
        if self.window:
            parts.append(f"w{human_size(self.window)}")
        if self.streams > 1:
            parts.append(f"P{self.streams}")
        if self.reverse:
            parts.append("rev")
        return "-".join(parts)


def parse(data: dict) -> dict[str, float]:
    end = data["end"]
    values = {"throughput_mbps": end["sum_received"]["bits_per_second"] / 1e6}
    if "retransmits" in end.get("sum_sent", {}):
        values["retransmits"] = float(end["sum_sent"]["retransmits"])
    return values


def retransmit_flags(data: dict) -> list[str]:
    sent = data["end"].get("sum_sent", {})
    if "retransmits" not in sent or not sent.get("bytes"):
        return []
    share = 100 * sent["retransmits"] / (sent["bytes"] / MSS)
    return [f"retransmits {share:.1f}% of segments"] if share > RETRANSMIT_FLAG_PCT else []


class Tcp(WorkloadKind):
    kind = "tcp"
    summary = "iperf3 TCP bulk transfer: duration_s, omit_s, window, streams, reverse"
    Options = TcpOptions
    tools = iperf.TOOLS
    metrics = (THROUGHPUT, RETRANSMITS)
    primary = "throughput_mbps"
    loads_path = True
    graded = (("throughput_mbps", "TCP throughput"),)
    plotted = ("throughput_mbps", "cpu_vpn_gateway_pct", "cpu_s_per_gb")
    series_tool = "iperf3"                 # the FAVE thesis read twenty 10-s intervals

    def estimate_s(self, options: TcpOptions, rate_mbit):
        return options.duration_s + options.omit_s + 0.5

    def run(self, options: TcpOptions, ctx: WorkloadContext) -> Measurement:
        args = ["-t", options.duration_s, "-O", options.omit_s, "-P", options.streams]
        if options.window:
            args += ["-w", options.window]
        if options.reverse:
            args.append("-R")
        data, raw = iperf.client(ctx, args, options.duration_s + options.omit_s)
        return Measurement(parse(data), raw, "iperf3", retransmit_flags(data),
                           carried_bytes=data["end"]["sum_received"]["bytes"])

    def series(self, raw: str):
        return iperf.raw_series(raw)
