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
    "tcp": WorkloadKind("tcp", iperf.run_tcp, iperf.TCP_METRICS, lambda w: w.duration_s + w.omit_s + 0.5),
    "udp": WorkloadKind("udp", iperf.run_udp, iperf.UDP_METRICS, lambda w: w.duration_s + 0.5),
    "ping": WorkloadKind("ping", ping.run, ping.METRICS, lambda w: w.count * w.interval_s + 0.1),
    # rough: a file at 10 MB/s, plus the connection
    "transfer": WorkloadKind("transfer", transfer.run, transfer.METRICS, lambda w: w.size / 10e6 + 1),
}

__all__ = ["REGISTRY", "WorkloadKind", "WorkloadContext", "Measurement", "Metric"]
