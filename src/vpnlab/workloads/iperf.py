"""iperf3 TCP and UDP: one server in the sink namespace, one client run per sample."""

from __future__ import annotations

import json

from ..errors import CommandError, MeasurementError, VpnlabError
from ..study import TcpWorkload, UdpWorkload
from .base import Measurement, Metric, WorkloadContext

PORT = 5201

TCP_METRICS = [
    Metric("throughput_mbps", "Mbit/s", "goodput at the receiver", True),
    Metric("retransmits", "segments", "TCP retransmissions at the sender", False),
]
UDP_METRICS = [
    Metric("throughput_mbps", "Mbit/s", "datagrams received per second, as Mbit/s", True),
    Metric("udp_sent_mbps", "Mbit/s", "send rate achieved by the sender", True),
    Metric("udp_jitter_ms", "ms", "RFC 3550 interarrival jitter at the receiver", False),
    Metric("udp_loss_pct", "%", "datagrams lost", False),
]


def ensure_server(ctx: WorkloadContext) -> None:
    """Start iperf3 -s in the sink once per testbed and wait until it listens."""
    if "iperf3" in ctx.services:
        return
    sink = ctx.bed.sink
    log = ctx.log_dir / "iperf3-server.log"
    proc = sink.spawn(["iperf3", "-s", "-p", PORT], log, what="iperf3")
    ctx.services["iperf3"] = (sink, proc)
    sink.wait_listening(PORT, proc, log)


def _client(ctx: WorkloadContext, args: list, duration: float) -> tuple[dict, str]:
    ensure_server(ctx)
    argv = ["iperf3", "-c", ctx.bed.sink_ip, "-p", PORT, "-J", "--connect-timeout", 5000, *args]
    try:
        proc = ctx.bed.source.run(argv, check=False, timeout=duration + 60)
    except CommandError as exc:
        raise VpnlabError(f"iperf3 client hung: {exc}") from exc
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise MeasurementError(f"iperf3 gave no JSON (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout[:300]}")
    if "error" in data:
        raise MeasurementError(f"iperf3: {data['error']}")
    return data, proc.stdout


def parse_tcp(data: dict) -> dict[str, float]:
    end = data["end"]
    values = {"throughput_mbps": end["sum_received"]["bits_per_second"] / 1e6}
    if "retransmits" in end.get("sum_sent", {}):
        values["retransmits"] = float(end["sum_sent"]["retransmits"])
    return values


def interval_series(data: dict) -> list[tuple[float, float]]:
    """(end of interval in s, Mbit/s) for each reporting interval, warm-up included (marked omitted)."""
    return [(i["sum"]["end"], i["sum"]["bits_per_second"] / 1e6) for i in data.get("intervals", [])
            if not i["sum"].get("omitted")]


def parse_udp(data: dict) -> dict[str, float]:
    end = data["end"]
    # Since iperf3 3.x the receiver's figures are in sum_received; older ones only have sum.
    received = end.get("sum_received") or end["sum"]
    sent = end.get("sum_sent") or end["sum"]
    summary = end.get("sum") or received
    return {
        "throughput_mbps": received["bits_per_second"] / 1e6,
        "udp_sent_mbps": sent["bits_per_second"] / 1e6,
        "udp_jitter_ms": float(summary.get("jitter_ms", received.get("jitter_ms", 0.0))),
        "udp_loss_pct": float(summary.get("lost_percent", received.get("lost_percent", 0.0))),
    }


RETRANSMIT_FLAG_PCT = 1.0  # above this share of segments, say so: the path is lossy or a queue overflows


def retransmit_flags(data: dict) -> list[str]:
    sent = data["end"].get("sum_sent", {})
    if "retransmits" not in sent or not sent.get("bytes"):
        return []
    segments = sent["bytes"] / 1448
    share = 100 * sent["retransmits"] / segments
    return [f"retransmits {share:.1f}% of segments"] if share > RETRANSMIT_FLAG_PCT else []


def run_tcp(spec: TcpWorkload, ctx: WorkloadContext) -> Measurement:
    args = ["-t", spec.duration_s, "-O", spec.omit_s, "-P", spec.streams]
    if spec.window:
        args += ["-w", spec.window]
    if spec.reverse:
        args.append("-R")
    data, raw = _client(ctx, args, spec.duration_s + spec.omit_s)
    return Measurement(parse_tcp(data), raw, "iperf3", retransmit_flags(data),
                       carried_bytes=data["end"]["sum_received"]["bytes"])


def run_udp(spec: UdpWorkload, ctx: WorkloadContext) -> Measurement:
    args = ["-u", "-b", f"{spec.rate_mbit:g}M", "-l", spec.size, "-t", spec.duration_s]
    if spec.reverse:
        args.append("-R")
    data, raw = _client(ctx, args, spec.duration_s)
    received = data["end"].get("sum_received") or data["end"]["sum"]
    return Measurement(parse_udp(data), raw, "iperf3", carried_bytes=received.get("bytes"))
