"""path-mtu: the largest packet that crosses the path whole, and whether bulk TCP gets through it.

Two questions of a path whose MTU is narrower somewhere in the middle (a link's `mtu`), maybe
with the ICMP errors that would say so filtered (`icmp: blocked`, a PMTU black hole):

1. The path MTU through the tunnel: pings with DF set (`ping -M do`) from the source to the sink,
   their size found by binary search between 68 bytes and the source's interface MTU. A probe
   fails on an ICMP "fragmentation needed", on the source's own refusal (its interface, or a path
   MTU it learnt), or when no reply comes (tried three times: a lost packet is not a size, and a
   tunnel's ends may each lose one to learn the path's MTU). What comes
   out is a packet size in bytes, IP header included: with no VPN over a path of MTU 1400, 1400.
2. A bulk TCP transfer of `size` bytes from the source to the sink (bulk.py): whether it completes,
   its goodput, and whether it stalled, i.e. went more than `stall_s` without a byte arriving; small
   packets are then pinged: crossing, it is a black hole (flag black-hole); not crossing, the path
   stalled as a whole (flag path-stalled: a tunnel over TCP held up by its own too-big segment).

The WAN observer counts the fragments the path created meanwhile (`wan_fragments`: the two WAN ends'
and the router's, which fragments what has no DF bit).
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Callable, Literal

from pydantic import Field, field_validator, model_validator

from ..core.backend import hang_limit
from ..core.errors import MeasurementError
from ..core.flags import declare as declare_flag
from ..core.schema import Size, human_size, parse_size
from ..metrics import declare
from ..tools import Tool
from . import bulk
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

PORT = 5299
HEADERS = 28          # IPv4 and ICMP echo headers: ping -s takes the payload, the path MTU is the packet's
SMALLEST = 68         # the smallest packet every IPv4 link carries whole (RFC 791)
LARGEST = 65535
PROBE_WAIT_S = 3      # ping -W of the first probe; then 4 round trips of it, at least PROBE_WAIT_MIN_S
PROBE_WAIT_MIN_S = 0.5
# A probe without a reply is sent again, twice: a lost packet is not a size, and discovering a tunnel's
# path MTU can cost a packet each way (the request's outer packet refused by the router teaches the
# client's kernel the MTU, the reply's then teaches the gateway's)
PROBE_TRIES = 3

PRODUCER = "path-mtu"
PATH_MTU = declare("path_mtu_bytes", "B", "largest packet (IP header included) that crossed from the source to the "
                   "sink with DF set: ping -M do, binary search by size", True, positive=True, producers=PRODUCER)
STALLED = declare("bulk_stalled", "0/1", "1 when the bulk TCP transfer went more than stall_s without a byte "
                  "arriving while small packets still crossed (a path MTU black hole)", False, producers=PRODUCER)
COMPLETED = declare("bulk_completed", "0/1", "1 when the bulk TCP transfer delivered all its bytes within "
                    "timeout_s", True, producers=PRODUCER)
GOODPUT = declare("bulk_goodput_mbps", "Mbit/s", "the bulk TCP transfer's bytes at the receiver over the time to "
                  "its last byte (to timeout_s when it did not complete)", True, producers=PRODUCER)
LONGEST_GAP = declare("bulk_longest_gap_s", "s", "the bulk TCP transfer's longest stretch without a byte arriving",
                      False, producers=PRODUCER)

UNSTEADY = declare_flag("path-stalled", "after a probe or the bulk transfer went unanswered not even the smallest "
                        "ping crossed: the path stalled as a whole (a tunnel over TCP whose own stream a too-big "
                        "segment holds up); a path MTU is then no size and is not recorded")
BLACK_HOLE = declare_flag("black-hole", "the bulk TCP transfer stalled while small packets crossed: packets "
                          "bigger than the path's MTU vanish without an ICMP error back (a PMTU black hole)")

_RTT = re.compile(r"time=([\d.]+) ms")
_FAILED_FOR_SIZE = re.compile(r"Frag needed|message too long|mtu ?=", re.IGNORECASE)


class PathMtuOptions(WorkloadOptions):
    """Path MTU by DF pings, then a bulk TCP transfer that completes or stalls."""

    kind: Literal["path-mtu"] = "path-mtu"
    size: Size = Field(4 * 1024 * 1024, description="bytes of the bulk TCP transfer (K, M, G)")
    timeout_s: float = Field(15, ge=1, le=600, description="the bulk transfer's deadline")
    stall_s: float = Field(3, gt=0, le=600, description="longer than this without a byte arriving is a stall")

    @field_validator("size", mode="before")
    @classmethod
    def parse(cls, value):
        return parse_size(value)

    @model_validator(mode="after")
    def stall_within_deadline(self):
        if self.stall_s >= self.timeout_s:
            raise ValueError(f"stall_s ({self.stall_s:g}) must be shorter than timeout_s ({self.timeout_s:g}): "
                             f"a stall is seen within the deadline")
        return self

    @property
    def label(self) -> str:
        return f"path-mtu-{human_size(self.size)}"


def largest_passing(passes: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest size in [low, high] that `passes` (true up to some size, false above it), by binary
    search; None if even `low` does not pass."""
    if high < low or not passes(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if passes(middle):
            low = middle
        else:
            high = middle - 1
    return low


def bulk_values(result: dict, stall_s: float, timeout_s: float) -> dict[str, float]:
    """The bulk transfer's metrics from bulk.py's receiver line."""
    seconds = result["seconds"] if result["complete"] else timeout_s
    return {"bulk_completed": float(result["complete"]),
            "bulk_stalled": float(result["longest_gap_s"] > stall_s),
            "bulk_goodput_mbps": result["bytes"] * 8 / seconds / 1e6 if seconds > 0 else 0.0,
            "bulk_longest_gap_s": result["longest_gap_s"]}


class PathMtu(WorkloadKind):
    kind = "path-mtu"
    summary = "path MTU by DF pings, then bulk TCP that completes or stalls: size, timeout_s, stall_s"
    Options = PathMtuOptions
    tools = (Tool("ping", "iputils-ping", ("ping", "-V")), Tool("python3", "python3", ("python3", "--version")))
    metrics = (PATH_MTU, STALLED, COMPLETED, GOODPUT, LONGEST_GAP)
    primary = "path_mtu_bytes"

    def estimate_s(self, options: PathMtuOptions, rate_mbit):
        return options.timeout_s + 5 * PROBE_WAIT_MIN_S * PROBE_TRIES  # a black hole's probes wait for no reply

    def run(self, options: PathMtuOptions, ctx: WorkloadContext) -> Measurement:
        try:
            mtu, probes = probe_path_mtu(ctx)
        except PathStalled as stalled:
            mtu, probes = None, str(stalled)
        else:
            if mtu is None:
                raise MeasurementError(f"not even a {SMALLEST}-byte ping crossed with DF set:\n{probes}")
        result = transfer(options, ctx)
        values = ({"path_mtu_bytes": float(mtu)} if mtu else {}) | bulk_values(result, options.stall_s,
                                                                                options.timeout_s)
        raw = json.dumps({"probes": probes, "bulk": result})
        measurement = Measurement(values, raw, "path-mtu", carried_bytes=float(result["bytes"]) or None)
        if mtu is None:
            measurement.flags.append(UNSTEADY(probes.splitlines()[-1]))
        if values["bulk_stalled"]:
            stall = f"no byte for {result['longest_gap_s']:.1f} s; {result['bytes']} of {options.size} bytes arrived"
            if small_packets_cross(ctx):
                measurement.flags.append(BLACK_HOLE(stall))
            else:
                measurement.flags.append(UNSTEADY(f"the bulk transfer stalled ({stall}) and then not even a small "
                                                  "ping crossed"))
        return measurement


class PathStalled(Exception):
    """A probe went unanswered and then so did the smallest: the probes' lines, the last saying so."""


def probe_path_mtu(ctx: WorkloadContext) -> tuple[int | None, str]:
    """The largest packet that crosses with DF set, and a line per probe (size, outcome). A size that
    gets no reply is too big only if the smallest still crosses right after it; otherwise the path
    stalled as a whole (PathStalled): then no size is its MTU."""
    source, sink = ctx.bed.source, ctx.bed.sink_ip
    lines: list[str] = []
    wait = [float(PROBE_WAIT_S)]

    def passes(size: int) -> bool:
        for _ in range(PROBE_TRIES):
            argv = ["ping", "-n", "-c", 1, "-W", f"{wait[0]:.2f}", "-M", "do", "-s", size - HEADERS, sink]
            proc = source.run(argv, check=False, timeout=wait[0] + 10)
            said = (proc.stdout + proc.stderr).strip()
            if proc.returncode == 0:
                lines.append(f"{size} passed")
                if size == SMALLEST and (rtt := _RTT.search(said)):
                    wait[0] = min(float(PROBE_WAIT_S), max(PROBE_WAIT_MIN_S, 4 * float(rtt.group(1)) / 1000))
                return True
            refused = _FAILED_FOR_SIZE.search(said)
            lines.append(f"{size} " + (f"refused: {refused.group(0)}" if refused else "no reply"))
            if refused:
                return False
        if size > SMALLEST and not ping(SMALLEST):
            lines.append(f"{SMALLEST} no reply after {size} got none: the path stalled as a whole, not for the size")
            raise PathStalled("\n".join(lines))
        return False

    def ping(size: int) -> bool:
        argv = ["ping", "-n", "-c", 1, "-W", f"{wait[0]:.2f}", "-M", "do", "-s", size - HEADERS, sink]
        return source.run(argv, check=False, timeout=wait[0] + 10).returncode == 0

    return largest_passing(passes, SMALLEST, min(LARGEST, interface_mtu(ctx))), "\n".join(lines)


def interface_mtu(ctx: WorkloadContext) -> int:
    """The MTU of the source's interface towards the sink (the tunnel's, or its link's)."""
    route = json.loads(ctx.bed.source.run(["ip", "-j", "route", "get", ctx.bed.sink_ip]).stdout)[0]
    link = json.loads(ctx.bed.source.run(["ip", "-j", "link", "show", "dev", route["dev"]]).stdout)[0]
    return int(link["mtu"])


def transfer(options: PathMtuOptions, ctx: WorkloadContext) -> dict:
    """One bulk transfer from the source to the sink: the receiver's account of it (bulk.py)."""
    sink, source = ctx.bed.sink, ctx.bed.source
    port = PORT + ctx.port_offset
    program = inspect.getsource(bulk)
    log = ctx.log_dir / "bulk-receiver.log"
    receiver = sink.spawn([sink.python, "-c", program, "receive", port, options.size, options.timeout_s], log,
                          what="python3")
    try:
        sink.wait_listening(port, receiver, log)
        sent = source.run([source.python, "-c", program, "send", ctx.bed.sink_ip, port, options.size,
                           options.timeout_s], check=False, timeout=hang_limit(options.timeout_s + bulk.CONNECT_WAIT_S))
        receiver.wait(timeout=hang_limit(options.timeout_s + bulk.CONNECT_WAIT_S))
    finally:
        sink.stop(receiver)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    if not lines:
        raise MeasurementError(f"the bulk receiver gave no result: {log.read_text(errors='replace')[-300:]}"
                               f" (sender: {sent.stdout.strip()[-200:]})")
    result = json.loads(lines[-1])
    if not result["connected"]:  # not even its handshake crossed: nothing arrived before the deadline
        result |= {"seconds": options.timeout_s, "longest_gap_s": options.timeout_s,
                   "sender": sent.stdout.strip()[-300:]}
    return result


def small_packets_cross(ctx: WorkloadContext) -> bool:
    """Does a small ping still get through (some of three)?"""
    argv = ["ping", "-n", "-q", "-c", 3, "-i", 0.2, "-W", PROBE_WAIT_S, ctx.bed.sink_ip]  # any answered: 0
    return ctx.bed.source.run(argv, check=False, timeout=PROBE_WAIT_S + 10).returncode == 0
