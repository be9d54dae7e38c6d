"""ping: round-trip time and loss for one payload size (Jaha's RTT by packet size)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from ..core.backend import hang_limit
from ..core.errors import MeasurementError
from ..core.flags import declare as declare_flag
from ..metrics import declare
from ..tools import Tool
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

ALL_LOST = declare_flag("all-lost", "every echo request was lost: no round-trip time")

METRICS = (
    declare("rtt_min_ms", "ms", "smallest round-trip time", False, judged="added", positive=True, producers="ping"),
    declare("rtt_avg_ms", "ms", "mean round-trip time", False, judged="added", graded=True, positive=True, producers="ping"),
    declare("rtt_max_ms", "ms", "largest round-trip time", False, positive=True, producers="ping"),
    declare("rtt_mdev_ms", "ms", "standard deviation of the round-trip time (ping's mdev)", False, producers="ping"),
    declare("ping_loss_pct", "%", "echo requests without a reply", False, judged="points", graded=True, producers="ping"),
)

_LOSS = re.compile(r"(\d+(?:\.\d+)?)% packet loss")
_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


class PingOptions(WorkloadOptions):
    """ICMP echo: round-trip time and loss for one payload size."""

    kind: Literal["ping"] = "ping"
    size: int = Field(56, ge=0, le=65507, description="ICMP payload bytes (ping -s)")
    count: int = Field(20, ge=1, le=100_000)
    interval_s: float = Field(0.2, ge=0.002, le=60)

    @property
    def label(self) -> str:
        return f"ping-{self.size}B"


def parse(output: str) -> dict[str, float]:
    values = {}
    loss = _LOSS.search(output)
    if not loss:
        raise MeasurementError(f"ping gave no statistics: {output.strip()[:200]}")
    values["ping_loss_pct"] = float(loss.group(1))
    rtt = _RTT.search(output)
    if rtt:  # absent when every probe was lost
        for name, text in zip(("rtt_min_ms", "rtt_avg_ms", "rtt_max_ms", "rtt_mdev_ms"), rtt.groups()):
            values[name] = float(text)
    return values


class Ping(WorkloadKind):
    kind = "ping"
    summary = "ICMP echo: size, count, interval_s"
    Options = PingOptions
    tools = (Tool("ping", "iputils-ping", ("ping", "-V")),)
    metrics = METRICS
    primary = "rtt_avg_ms"
    in_mesh = True
    graded = (("rtt_avg_ms", "RTT"),)
    plotted = ("rtt_avg_ms",)

    def estimate_s(self, options: PingOptions, rate_mbit):
        return options.count * options.interval_s + 0.1

    def run(self, options: PingOptions, ctx: WorkloadContext) -> Measurement:
        argv = ["ping", "-n", "-q", "-c", options.count, "-i", options.interval_s, "-s", options.size, "-W", 2,
                ctx.bed.sink_ip]
        proc = ctx.bed.source.run(argv, check=False, timeout=hang_limit(options.count * options.interval_s))
        output = proc.stdout + proc.stderr
        measurement = Measurement(parse(output), output, "ping")
        if "rtt_avg_ms" not in measurement.values:
            measurement.flags.append(ALL_LOST("all echo requests lost"))
        return measurement
