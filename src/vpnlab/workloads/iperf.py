"""What the tcp and udp kinds share: one iperf3 server in the sink, one client run per sample."""

from __future__ import annotations

import json
import time

from ..core.backend import hang_limit
from ..core.errors import CommandError, MeasurementError, VpnlabError
from ..tools import Tool
from .base import WorkloadContext

PORT = 5201
STREAM_PORT_STEP = 100  # stream i's server: PORT + port_offset + i * STREAM_PORT_STEP (a mesh's pairs: offsets 0-99)
TOOLS = (Tool("iperf3", "iperf3", ("iperf3", "--version")),)


def port(ctx: WorkloadContext, stream: int = 0) -> int:
    return PORT + ctx.port_offset + stream * STREAM_PORT_STEP


def ensure_server(ctx: WorkloadContext, stream: int = 0) -> None:
    """Start iperf3 -s in the sink once per testbed (and stream) and wait until it listens."""
    name = "iperf3" if not stream else f"iperf3-{stream}"
    if name in ctx.services:
        return
    sink, listen = ctx.bed.sink, port(ctx, stream)
    log = ctx.log_dir / f"{name}-server.log"
    proc = sink.spawn(["iperf3", "-s", "-J", "-p", listen], log, what="iperf3")  # -J: a client gets its counts as JSON
    ctx.services[name] = (sink, proc)
    sink.wait_listening(listen, proc, log)


def _argv(ctx: WorkloadContext, args: list, stream: int = 0) -> list:
    return ["iperf3", "-c", ctx.bed.sink_ip, "-p", port(ctx, stream), "-J", "--connect-timeout", 3000, *args]


def client(ctx: WorkloadContext, args: list, duration: float) -> tuple[dict, str]:
    """Run one iperf3 client for `duration` seconds; its JSON and the raw text."""
    ensure_server(ctx)
    try:
        proc = ctx.bed.source.run(_argv(ctx, args), check=False, timeout=hang_limit(duration))
    except CommandError as exc:
        raise VpnlabError(f"iperf3 client hung: {exc}") from exc
    return _json(proc.stdout, f"exit {proc.returncode}: {proc.stderr.strip() or proc.stdout[:300]}"), proc.stdout


def clients(ctx: WorkloadContext, args: list, duration: float, count: int) -> list[dict]:
    """`count` iperf3 clients at once, each to a server of its own (iperf3 3.12 runs every stream of one
    process on one thread: at a VPN's capacity that thread, not the VPN, would be the limit); their JSON."""
    for stream in range(count):
        ensure_server(ctx, stream)
    logs = [ctx.log_dir / f"iperf3-client-{stream}.log" for stream in range(count)]
    procs = [ctx.bed.source.spawn(_argv(ctx, args, stream), log, what="iperf3") for stream, log in enumerate(logs)]
    deadline = time.monotonic() + hang_limit(duration)
    while any(proc.poll() is None for proc in procs):
        if time.monotonic() > deadline:
            for proc in procs:
                ctx.bed.source.stop(proc)
            raise VpnlabError(f"an iperf3 client of {count} hung past {hang_limit(duration):.0f} s")
        time.sleep(0.1)
    return [_json(log.read_text(errors="replace"), f"stream {n}: {log}") for n, log in enumerate(logs)]


def _json(text: str, where: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise MeasurementError(f"iperf3 gave no JSON ({where})") from None
    if "error" in data:
        raise MeasurementError(f"iperf3: {data['error']}")
    return data


def merged(streams: list[dict]) -> dict:
    """One iperf3 JSON of streams run at once as separate processes: totals and intervals summed (by
    interval index: they started together), periods the shortest, the rest the first stream's."""
    first = streams[0]
    out = {**first, "end": {side: _summed([s["end"].get(side, {}) for s in streams])
                            for side in ("sum_sent", "sum_received") if side in first["end"]},
           "intervals": [{"sum": _summed([i["sum"] for i in group])}
                         for group in zip(*(s.get("intervals", []) for s in streams))],
           "streams_as_processes": [s["end"].get("sum_received", {}).get("bits_per_second") for s in streams]}
    if all("server_output_json" in s for s in streams):
        out["server_output_json"] = merged([s["server_output_json"] for s in streams])
    return out


def _summed(parts: list[dict]) -> dict:
    first = parts[0]
    out = {k: sum(p.get(k, 0) for p in parts) for k in ("bytes", "bits_per_second", "retransmits") if k in first}
    out["seconds"] = min(p.get("seconds", 0) for p in parts)
    return {**first, **out}


def interval_series(data: dict) -> list[tuple[float, float]]:
    """(end of interval in s, Mbit/s) for each reporting interval after the warm-up."""
    return [(i["sum"]["end"], i["sum"]["bits_per_second"] / 1e6) for i in data.get("intervals", [])
            if not i["sum"].get("omitted")]


def raw_series(raw: str) -> list[tuple[float, float]]:
    try:
        return interval_series(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return []
