"""reach: after an idle spell, does a packet from the far side reach the client, and how soon?

A client behind a NAT (a link's `nat: masquerade`) can be reached from the far side only through a
mapping the NAT still holds: one its own packets opened, kept alive by what it sends (a VPN's
keepalives). After `idle_s` in which the workload sends nothing (warm-up pings opened the path), the sink
pings the client's address as the far side sees it (its address on its route to the sink: inside the
tunnel where there is one) every `interval_s`, until one is answered or `wait_s` passed. No VPN behind a
NAT is never reachable so (the NAT forwards nothing unasked); a VPN is, if its mapping outlived the idle
spell, or once its own traffic opened a new one within `wait_s`.
"""

from __future__ import annotations

import json
import re
import time
from typing import Literal

from pydantic import Field

from ..core.backend import hang_limit
from ..metrics import declare
from ..tools import Tool
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

PRODUCER = "reach"
REACHABLE = declare("far_reachable", "0/1", "1 when a ping from the far side (the sink) reached the client within "
                    "wait_s after idle_s without traffic", True, producers=PRODUCER)
REACH_S = declare("far_reach_s", "s", "from the far side's first ping after the idle spell until the first that "
                  "reached the client (ping's sequence number times interval_s)", False, producers=PRODUCER)

_SEQ = re.compile(r"icmp_seq=(\d+) .*time=")


class ReachOptions(WorkloadOptions):
    """Idle, then ping the client from the far side."""

    kind: Literal["reach"] = "reach"
    idle_s: float = Field(60, ge=0, le=3600, description="seconds without traffic before the far side pings")
    wait_s: float = Field(5, gt=0, le=600, description="how long the far side keeps pinging for a reply")
    interval_s: float = Field(0.05, ge=0.01, le=1, description="between the far side's pings")

    @property
    def label(self) -> str:
        return f"reach-after-{self.idle_s:g}s"


def first_reach_s(ping_output: str, interval_s: float) -> float | None:
    """Seconds from the first ping to the first answered one (iputils counts from 1); None: none answered."""
    seqs = [int(seq) for seq in _SEQ.findall(ping_output)]
    return (min(seqs) - 1) * interval_s if seqs else None


def client_address(ctx: WorkloadContext) -> str:
    """The source's address on its route to the sink: what the far side sees of it, in the tunnel or not."""
    route = json.loads(ctx.bed.source.run(["ip", "-j", "route", "get", ctx.bed.sink_ip]).stdout)[0]
    return route["prefsrc"]


class Reach(WorkloadKind):
    kind = "reach"
    summary = "after idle_s without traffic, ping the client from the far side: idle_s, wait_s, interval_s"
    Options = ReachOptions
    tools = (Tool("ping", "iputils-ping", ("ping", "-V")), Tool("ip", "iproute2", ("ip", "-V")))
    metrics = (REACHABLE, REACH_S)
    primary = "far_reachable"

    def estimate_s(self, options: ReachOptions, rate_mbit):
        return options.idle_s + options.wait_s

    def run(self, options: ReachOptions, ctx: WorkloadContext) -> Measurement:
        address = client_address(ctx)
        time.sleep(options.idle_s)
        argv = ["ping", "-n", "-c", 1, "-i", options.interval_s, "-w", f"{options.wait_s:g}", address]
        proc = ctx.bed.sink.run(argv, check=False, timeout=hang_limit(options.wait_s))
        output = proc.stdout + proc.stderr
        seconds = first_reach_s(output, options.interval_s)
        values = {"far_reachable": float(seconds is not None)} | ({"far_reach_s": seconds} if seconds is not None else {})
        return Measurement(values, f"ping {address} after {options.idle_s:g} s idle\n{output}", "ping")
