"""The registry of workloads: kind -> how to run it, what it measures, how long it takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import iperf, ping, transfer
from .base import Measurement, Metric, WorkloadContext


@dataclass(frozen=True)
class WorkloadKind:
    kind: str
    run: Callable[..., Measurement]
    metrics: list[Metric]
    estimate_s: Callable[..., float]


REGISTRY: dict[str, WorkloadKind] = {
    "tcp": WorkloadKind("tcp", iperf.run_tcp, iperf.TCP_METRICS, lambda w, link: w.duration_s + w.omit_s + 0.5),
    "udp": WorkloadKind("udp", iperf.run_udp, iperf.UDP_METRICS, lambda w, link: w.duration_s + 0.5),
    "ping": WorkloadKind("ping", ping.run, ping.METRICS, lambda w, link: w.count * w.interval_s + 0.1),
    # the file at 90% of the link rate (unshaped: 10 MB/s, a userspace tunnel's pace), plus the connection
    "transfer": WorkloadKind("transfer", transfer.run, transfer.METRICS,
                             lambda w, link: w.size * 8 / ((link.rate_mbit or 80) * 0.9e6) + 1),
}

__all__ = ["REGISTRY", "WorkloadKind", "WorkloadContext", "Measurement", "Metric"]
