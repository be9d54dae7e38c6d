"""What the tcp and udp kinds share: one iperf3 server in the sink, one client run per sample."""

from __future__ import annotations

import json

from ..machines.backend import hang_limit
from ..errors import CommandError, MeasurementError, VpnlabError
from ..tools import Tool
from .base import WorkloadContext

PORT = 5201
TOOLS = (Tool("iperf3", "iperf3", ("iperf3", "--version")),)


def ensure_server(ctx: WorkloadContext) -> None:
    """Start iperf3 -s in the sink once per testbed and wait until it listens."""
    if "iperf3" in ctx.services:
        return
    sink, port = ctx.bed.sink, PORT + ctx.port_offset
    log = ctx.log_dir / "iperf3-server.log"
    proc = sink.spawn(["iperf3", "-s", "-J", "-p", port], log, what="iperf3")  # -J: a client gets its counts as JSON
    ctx.services["iperf3"] = (sink, proc)
    sink.wait_listening(port, proc, log)


def client(ctx: WorkloadContext, args: list, duration: float) -> tuple[dict, str]:
    """Run one iperf3 client for `duration` seconds; its JSON and the raw text."""
    ensure_server(ctx)
    argv = ["iperf3", "-c", ctx.bed.sink_ip, "-p", PORT + ctx.port_offset, "-J", "--connect-timeout", 3000, *args]
    try:
        proc = ctx.bed.source.run(argv, check=False, timeout=hang_limit(duration))
    except CommandError as exc:
        raise VpnlabError(f"iperf3 client hung: {exc}") from exc
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise MeasurementError(f"iperf3 gave no JSON (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout[:300]}")
    if "error" in data:
        raise MeasurementError(f"iperf3: {data['error']}")
    return data, proc.stdout


def interval_series(data: dict) -> list[tuple[float, float]]:
    """(end of interval in s, Mbit/s) for each reporting interval after the warm-up."""
    return [(i["sum"]["end"], i["sum"]["bits_per_second"] / 1e6) for i in data.get("intervals", [])
            if not i["sum"].get("omitted")]


def raw_series(raw: str) -> list[tuple[float, float]]:
    try:
        return interval_series(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return []
