"""Events during a workload and what the tunnel did after each (a workload's `events:`).

Beside the workload, a paced probe stream (ping every PROBE_INTERVAL_S from the source to the sink,
through the tunnel where there is one, each reply timestamped: `ping -D`) runs from the workload's start,
and a timer thread makes each event happen at its moment (testbed/faults.py). After the workload the
stream goes on until traffic flowed again after every event, or RECOVERY_WAIT_S after the last one:
vpnlab never restarts a daemon during a measurement, so a tunnel that does not come back by itself is a
result (`recovered` 0), not a failure.

Per event, from the probes: the time until traffic flowed again, the arrival of the first reply to a
probe sent after the path was whole again (an outage's end; an address change or NAT rebind's moment)
less that moment, and the probes lost from the event's start until then. The reply's arrival, not the
probe's send time: a tunnel carried over TCP holds the probes of an outage and the next ones until its
connection retransmits, and delivers them late, all answered. A probe's send time is its reply's
arrival less its round trip; an unanswered probe's is interpolated from its answered neighbours (ping
sends them evenly).
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.flags import Flag, declare as declare_flag
from ..metrics import declare
from ..testbed.topology import Testbed

PROBE_INTERVAL_S = 0.02
RECOVERY_WAIT_S = 10.0       # after the last event's end: how long a tunnel is given to come back by itself
POLL_S = 0.1
PRODUCER = "a workload's events"
REKEY_WINDOW_S = (1.0, 5.0)  # the rekey gap is looked for from this long before a rekey until this long after
PREFIX = {"link_down_s": "outage", "address_change": "address_change", "nat_rebind": "nat_rebind", "rekey": "rekey"}
WHAT = {"outage": "the end of a WAN outage (link_down_s)", "address_change": "the client's WAN address changed "
        "(address_change)", "nat_rebind": "the NAT forgot its mappings (nat_rebind)",
        "rekey": "the VPN was made to rekey (rekey)"}

METRICS = tuple(m for prefix, what in WHAT.items() for m in (
    declare(f"{prefix}_recovery_s", "s", f"from the moment {what} until a probe through the tunnel got through "
            "again (the arrival of the first reply to a probe sent after it; the longest over the sample's events)",
            False, producers=PRODUCER),
    declare(f"{prefix}_lost_probes", "count", f"probes (every {PROBE_INTERVAL_S * 1000:g} ms) lost from the event's "
            "start until traffic flowed again after it (the most over the sample's events)", False,
            producers=PRODUCER))) + (
    declare("recovered", "0/1", "1 when traffic through the tunnel came back by itself after every event within "
            f"{RECOVERY_WAIT_S:g} s of its end (vpnlab restarts no daemon)", True, producers=PRODUCER),
    declare("rekey_gap_s", "s", "the longest stretch between two replies' arrivals, less the stream's pace, from "
            f"{REKEY_WINDOW_S[0]:g} s before a forced rekey until {REKEY_WINDOW_S[1]:g} s after it (the longest over "
            "the sample's rekeys): what the rekey interrupted", False, producers=PRODUCER))
SURVIVED = declare("workload_survived", "0/1", "1 when the workload itself (its TCP connection, its transfer) went "
                   "through its events to the end; 0 when they broke it (flag workload-broken says how)", True,
                   producers=PRODUCER)
WORKLOAD_BROKEN = declare_flag("workload-broken", "the workload's events broke the workload itself (its TCP "
                               "connection was reset or timed out): its own metrics are missing")
NOT_RECOVERED = declare_flag("not-recovered", "after an event no probe got through again within the time waited: "
                             "the tunnel did not come back by itself")

_STAMP = re.compile(r"^\[(\d+\.\d+)\] .*?icmp_seq=(\d+)(.*)$")
_RTT = re.compile(r"time=([\d.]+) ms")


@dataclass
class Happened:
    """An event as it happened: its kind, and when (wall clock) it began and the path was whole again."""

    kind: str
    start: float
    end: float


def probe_times(ping_output: str, interval: float = PROBE_INTERVAL_S) -> tuple[dict[int, float], dict[int, float]]:
    """From `ping -D -O` output: every probe's send time (seq -> s), and the answered ones' replies'
    arrivals (seq -> s)."""
    sent: dict[int, float] = {}
    arrived: dict[int, float] = {}
    seen: set[int] = set()
    for line in ping_output.splitlines():
        match = _STAMP.match(line.strip())
        if not match:
            continue
        seq = int(match.group(2))
        seen.add(seq)
        rtt = _RTT.search(match.group(3))
        if rtt and seq not in sent:  # a duplicate reply is not another probe
            arrived[seq] = float(match.group(1))
            sent[seq] = arrived[seq] - float(rtt.group(1)) / 1000
    if not arrived:
        return {}, {}
    known = sorted(arrived)
    for seq in range(1, max(seen) + 1):
        if seq in sent:
            continue
        at = bisect.bisect(known, seq)  # the answered neighbours: known[at - 1] < seq < known[at]
        if 0 < at < len(known):
            before, after = known[at - 1], known[at]
            sent[seq] = sent[before] + (sent[after] - sent[before]) * (seq - before) / (after - before)
        else:
            anchor = known[-1] if at else known[0]
            sent[seq] = sent[anchor] + (seq - anchor) * interval
    return sent, arrived


def recovery(event: Happened, sent: dict[int, float], arrived: dict[int, float],
             waited_until: float) -> tuple[float | None, int]:
    """(seconds until traffic flowed again after the event: the first reply to a probe sent after it, or
    None if none arrived by `waited_until`; probes lost from its start until then)."""
    back = [arrived[seq] for seq in arrived if sent[seq] >= event.end and arrived[seq] <= waited_until]
    until = min(back) if back else waited_until
    lost = sum(1 for seq, t in sent.items() if seq not in arrived and event.start <= t < until)
    return (max(0.0, until - event.end) if back else None), lost


def longest_gap(sent: dict[int, float], arrived: dict[int, float], start: float, until: float) -> float:
    """The longest stretch between consecutive replies' arrivals, of the probes sent in [start, until],
    less the stream's pace (the median stretch between their sendings: held probes arrive together): 0
    when none was lost or held."""
    answered = [seq for seq in arrived if start <= sent[seq] <= until]
    if len(answered) < 2:
        return until - start
    times, sendings = sorted(arrived[seq] for seq in answered), sorted(sent[seq] for seq in answered)
    pace = sorted(b - a for a, b in zip(sendings, sendings[1:]))[(len(sendings) - 1) // 2]
    return max(0.0, max(b - a for a, b in zip(times, times[1:])) - pace)


def recovery_values(events: list[Happened], ping_output: str, waited_until: float) -> tuple[dict[str, float], list[Flag]]:
    """The events' metrics: per kind the longest recovery and the most probes lost; `recovered`; for
    rekeys, the longest gap around them."""
    sent, arrived = probe_times(ping_output)
    values: dict[str, float] = {}
    flags: list[Flag] = []
    for event in events:
        seconds, lost = recovery(event, sent, arrived, waited_until)
        prefix = PREFIX[event.kind]
        values[f"{prefix}_lost_probes"] = max(values.get(f"{prefix}_lost_probes", 0.0), float(lost))
        if seconds is None:
            flags.append(NOT_RECOVERED(f"no probe got through in the {waited_until - event.end:.1f} s after "
                                       f"{WHAT[prefix]}"))
        else:
            values[f"{prefix}_recovery_s"] = max(values.get(f"{prefix}_recovery_s", 0.0), seconds)
        if event.kind == "rekey":
            gap = longest_gap(sent, arrived, event.start - REKEY_WINDOW_S[0],
                              min(event.end + REKEY_WINDOW_S[1], waited_until))
            values["rekey_gap_s"] = max(values.get("rekey_gap_s", 0.0), gap)
    values["recovered"] = 0.0 if flags else 1.0
    return values, flags


class EventsObserver:
    """Makes a workload's events happen on the testbed while a probe stream watches the tunnel."""

    def __init__(self, bed: Testbed, log_dir: Path, events: list, tunnels=()):
        self.bed, self.events, self.log = bed, events, log_dir / "events-probes.log"
        self.tunnels = list(tunnels)  # outermost first: a rekey is the outer layer's (none: nothing to rekey)
        self.happened: list[Happened] = []
        self._stop = threading.Event()
        self._error: list[BaseException] = []

    def start(self) -> None:
        self._proc = self.bed.source.spawn(["ping", "-n", "-D", "-O", "-i", PROBE_INTERVAL_S, "-W", 1,
                                            self.bed.sink_ip], self.log, what="ping")
        self._started = time.time()
        self._thread = threading.Thread(target=self._play, name="events", daemon=True)
        self._thread.start()

    def _play(self) -> None:
        try:
            for event in sorted(self.events, key=lambda e: e.at_s):
                if self._stop.wait(max(0.0, self._started + event.at_s - time.time())):
                    return
                self.happened.append(self._happen(event))
        except BaseException as exc:  # raised again in finish
            self._error.append(exc)

    def _happen(self, event) -> Happened:
        start = time.time()
        if event.link_down_s:
            self.bed.cut_wan()
            start = time.time()
            self._stop.wait(event.link_down_s)
            self.bed.restore_wan()
        elif event.address_change:
            self.bed.change_client_address()
        elif event.nat_rebind:
            self.bed.forget_nat_mappings()
        elif event.rekey and self.tunnels:
            self.tunnels[0].rekey()
        return Happened(event.kind, start, time.time())

    def finish(self, carried_bytes: float | None) -> tuple[dict[str, float], list[Flag]]:
        self._thread.join()
        if self._error:
            raise self._error[0]
        deadline = max(e.end for e in self.happened) + RECOVERY_WAIT_S
        gaps_seen = max((e.end + REKEY_WINDOW_S[1] for e in self.happened if e.kind == "rekey"), default=0)
        while time.time() < deadline and (time.time() < gaps_seen or not self._all_back()):
            time.sleep(POLL_S)
        waited_until = min(time.time(), deadline)
        self.bed.source.stop(self._proc)
        return recovery_values(self.happened, self._output(), waited_until)

    def abandon(self) -> None:
        """The workload failed or was interrupted: no more events (the testbed goes with its rules)."""
        self._stop.set()

    def _all_back(self) -> bool:
        sent, arrived = probe_times(self._output())
        return all(recovery(e, sent, arrived, time.time())[0] is not None for e in self.happened)

    def _output(self) -> str:
        return self.log.read_text(errors="replace")
