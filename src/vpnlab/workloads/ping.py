"""ping: round-trip time and loss for one payload size."""

from __future__ import annotations

import re

from ..errors import MeasurementError
from ..study import PingWorkload
from .base import Measurement, Metric, WorkloadContext

METRICS = [
    Metric("rtt_min_ms", "ms", "smallest round-trip time", False),
    Metric("rtt_avg_ms", "ms", "mean round-trip time", False),
    Metric("rtt_max_ms", "ms", "largest round-trip time", False),
    Metric("rtt_mdev_ms", "ms", "standard deviation of the round-trip time (ping's mdev)", False),
    Metric("ping_loss_pct", "%", "echo requests without a reply", False),
]

_LOSS = re.compile(r"(\d+(?:\.\d+)?)% packet loss")
_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


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


def run(spec: PingWorkload, ctx: WorkloadContext) -> Measurement:
    argv = ["ping", "-n", "-q", "-c", spec.count, "-i", spec.interval_s, "-s", spec.size, "-W", 2, ctx.bed.sink_ip]
    timeout = spec.count * spec.interval_s + 30
    proc = ctx.bed.source.run(argv, check=False, timeout=timeout)
    output = proc.stdout + proc.stderr
    measurement = Measurement(parse(output), output, "ping")
    if "rtt_avg_ms" not in measurement.values:
        measurement.flags.append("all echo requests lost")
    return measurement
