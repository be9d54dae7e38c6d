"""tcp: an iperf3 bulk transfer (Jaha's and Narayan's TCP throughput, window and stream sweeps)."""

from __future__ import annotations

import json
import re
import statistics
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from ..core.flags import Flag, declare as declare_flag
from ..metrics import declare
from ..core.schema import SOCKET_BUFFER_MAX, Size, human_size, parse_size, whole_seconds
from . import iperf
from .base import Measurement, SeriesFigure, WorkloadContext, WorkloadKind, WorkloadOptions

RETRANSMIT_FLAG_PCT = 1.0  # above this share of segments, say so: the path is lossy or a queue overflows
SHORT_WINDOW_SHARE = 0.9   # a measured period below this share of -t: the warm-up overran the test's time
MSS = 1448                 # payload of a full segment with timestamps, to turn bytes into segments
WINDOW_OFF = 0.1           # a send window further than this share from the one asked is noted

SND_WND = re.compile(r'"snd_wnd":\s*(\d+)')  # the send window in each interval of iperf3's JSON
WINDOW_NOTE = ("the TCP send window iperf3 got (snd_wnd, median) was not the one asked for: the kernel sizes it "
               "from the socket buffer, so read the window sweep by these")

THROUGHPUT = declare("throughput_mbps", "Mbit/s", "goodput at the receiver (iperf3 sum_received; file bytes over "
                     "transfer time)", True, judged="share", graded=True, positive=True, producers="tcp")
RETRANSMITS = declare("retransmits", "segments", "TCP retransmissions at the sender", False, producers="tcp")


class TcpOptions(WorkloadOptions):
    """iperf3 TCP bulk transfer."""

    ADDED_LATER: ClassVar[dict[str, Any]] = {**WorkloadOptions.ADDED_LATER, "process_per_stream": False}

    kind: Literal["tcp"] = "tcp"
    # float, not int: a scenario's id hashes the dumped options (10.0), and old runs resume by it
    duration_s: float = Field(10, ge=1, le=3600, description="whole seconds (iperf3 -t)")
    omit_s: float = Field(1, ge=0, le=60, description="warm-up seconds left out of the result (iperf3 -O: "
                                                     "whole seconds, at most 60)")
    window: Size | None = Field(None, description="socket buffer (iperf3 -w), at most 64M and this machine's "
                                "net.core.rmem_max and wmem_max")
    streams: int = Field(1, ge=1, le=128)
    process_per_stream: bool = Field(False, description="one iperf3 pair per stream, each on its own port, "
                                     "summed (iperf3 3.12 runs a process's streams on one thread: at capacity "
                                     "that thread is the limit); else one iperf3 with -P")
    reverse: bool = Field(False, description="server sends, client receives")

    @field_validator("duration_s", "omit_s", mode="before")
    @classmethod
    def whole(cls, value):
        return whole_seconds(value)

    @field_validator("window", mode="before")
    @classmethod
    def parse_window(cls, value):
        return None if value is None else parse_size(value)

    @field_validator("window")
    @classmethod
    def window_given(cls, value, info: ValidationInfo):
        """At most what the testbed asks a namespace for; with context {"socket_buffer_max": n}
        (a study loaded to run here), at most what this kernel gives (schema.socket_buffer_limit)."""
        if value is not None and value > SOCKET_BUFFER_MAX:
            raise ValueError(f"{human_size(value)} is more than {human_size(SOCKET_BUFFER_MAX)}, the largest socket "
                             f"buffer the testbed asks a namespace for")
        limit = (info.context or {}).get("socket_buffer_max")
        if value is not None and limit and value > limit:
            raise ValueError(f"{human_size(value)} is more than this machine gives a socket: net.core.rmem_max/"
                             f"wmem_max allow {human_size(limit)} (a network namespace takes the host's limits, "
                             f"and this kernel does not let the testbed raise them there); use at most "
                             f"{human_size(limit)}, or raise both on the host: sysctl -w net.core.rmem_max={value} "
                             f"net.core.wmem_max={value}")
        return value

    @property
    def label(self) -> str:
        parts = ["tcp"]
        if self.window:
            parts.append(f"w{human_size(self.window)}")
        if self.streams > 1:
            parts.append(f"P{self.streams}" + ("x" if self.process_per_stream else ""))
        if self.reverse:
            parts.append("rev")
        return "-".join(parts)


def parse(data: dict) -> dict[str, float]:
    end = data["end"]
    values = {"throughput_mbps": end["sum_received"]["bits_per_second"] / 1e6}
    if "retransmits" in end.get("sum_sent", {}):
        values["retransmits"] = float(end["sum_sent"]["retransmits"])
    return values


RETRANSMITS = declare_flag("retransmits", f"TCP retransmitted more than {RETRANSMIT_FLAG_PCT:g}% of its segments: "
                           "the path is lossy or a queue overflows")
SHORT_WINDOW = declare_flag("short-window", "iperf3 measured a much shorter period than asked (a starved client)")


def retransmit_flags(data: dict) -> list[Flag]:
    sent = data["end"].get("sum_sent", {})
    if "retransmits" not in sent or not sent.get("bytes"):
        return []
    share = 100 * sent["retransmits"] / (sent["bytes"] / MSS)
    return [RETRANSMITS(f"{share:.1f}% of segments")] if share > RETRANSMIT_FLAG_PCT else []


def short_window_flags(data: dict) -> list[Flag]:
    """iperf3 stops -t + -O seconds after it starts, whenever its warm-up ended: a warm-up stretched by a
    starved client leaves a measured period (either side's; the shorter) far below the one asked."""
    asked, periods = _test_start(data).get("duration"), _measured_periods(data)
    if not asked or not periods or min(periods) >= SHORT_WINDOW_SHARE * asked:
        return []
    found = f"iperf3 measured {min(periods):.1f} s of the {asked:g} s asked"
    omit, took = _test_start(data).get("omit"), warm_up_s(data)
    if omit and took:
        return [SHORT_WINDOW(f"{found} (its {omit:g} s warm-up took {took:.1f} s): throughput is over a short, late window")]
    return [SHORT_WINDOW(f"{found}: throughput is over a short window")]


def warm_up_s(data: dict) -> float:
    """When the last warm-up interval ended, by the client's clock (its counters restart right after)."""
    return max((i["sum"]["end"] for i in _warm_up(data)), default=0.0)


def carried_bytes(data: dict) -> float:
    """What the receiver got over the whole run, its warm-up included, by its own count and clock:
    the sender's count holds what still sat in its socket buffer at the end (no-VPN WAN bytes per byte
    read 0.91), and the server's measured total beside the client's warm-up counted the stretch between
    the two warm-ups twice when the client's ran late. The server's count comes with its JSON
    (--get-server-output; its own -J); without it, that sum is the estimate."""
    receiver = data if _test_start(data).get("reverse") else data.get("server_output_json") or {}
    warm_up = _warm_up(receiver if receiver.get("intervals") else data)
    return data["end"]["sum_received"]["bytes"] + sum(i["sum"]["bytes"] for i in warm_up)


def _test_start(data: dict) -> dict:
    return data.get("start", {}).get("test_start", {})


def _measured_periods(data: dict) -> list[float]:
    return [data["end"][side]["seconds"] for side in ("sum_sent", "sum_received") if side in data["end"]]


def _warm_up(data: dict) -> list[dict]:
    return [i for i in data.get("intervals", []) if i["sum"].get("omitted")]


class Tcp(WorkloadKind):
    kind = "tcp"
    summary = "iperf3 TCP bulk transfer: duration_s, omit_s, window, streams, reverse"
    Options = TcpOptions
    tools = iperf.TOOLS
    metrics = (THROUGHPUT, RETRANSMITS)
    primary = "throughput_mbps"
    in_mesh = True
    loads_path = True
    graded = (("throughput_mbps", "TCP throughput"),)
    # (not cpu_vpn_gateway_pct: a daemon's own CPU, 0% where the kernel carries the data, as ESP does)
    plotted = ("throughput_mbps", "cpu_s_per_gb")
    series_tool = "iperf3"                 # the FAVE thesis read twenty 10-s intervals
    series_figure = SeriesFigure("throughput by interval", "seconds into the transfer", "Mbit/s",
                                 "mean over repetitions of each 1-second iperf3 interval")

    def estimate_s(self, options: TcpOptions, rate_mbit):
        return options.duration_s + options.omit_s + 0.5

    def prepare(self, options: TcpOptions, ctx: WorkloadContext) -> None:
        for stream in range(options.streams if options.process_per_stream else 1):
            iperf.ensure_server(ctx, stream)

    def run(self, options: TcpOptions, ctx: WorkloadContext) -> Measurement:
        apart = options.process_per_stream and options.streams > 1
        args = ["-t", options.duration_s, "-O", options.omit_s, "-P", 1 if apart else options.streams,
                "--get-server-output"]
        if options.window:
            args += ["-w", options.window]
        if options.reverse:
            args.append("-R")
        duration = options.duration_s + options.omit_s
        if apart:
            data = iperf.merged(iperf.clients(ctx, args, duration, options.streams))
            raw = json.dumps(data)
        else:
            data, raw = iperf.client(ctx, args, duration)
        flags = retransmit_flags(data) + short_window_flags(data)
        return Measurement(parse(data), raw, "iperf3", flags, carried_bytes=carried_bytes(data))

    def series(self, raw: str):
        return iperf.raw_series(raw)

    def notes(self, options: TcpOptions, raw: list[str]) -> list[tuple[str, str]]:
        """The send window iperf3 reported (snd_wnd, median over every interval of every repetition),
        when more than WINDOW_OFF from the window asked: the kernel sizes it from the socket buffer."""
        got = [int(v) for text in raw for v in SND_WND.findall(text)]
        if not options.window or not got or abs(statistics.median(got) / options.window - 1) <= WINDOW_OFF:
            return []
        return [(WINDOW_NOTE, f"{statistics.median(got):.0f} B for {options.window} B asked")]
