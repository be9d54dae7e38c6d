"""One repetition of a scenario, start to end: testbed -> tunnel -> proof -> warm-up -> workload
(watched) -> check -> teardown. Every repetition brings its own tunnel up, so tunnel set-up
varies across repetitions as it does for users, and a tunnel that died cannot spoil the next.

A repetition whose tunnel died, or stopped carrying packets, during the measurement is not a
valid sample: it comes back with the reason and the daemons' log tails, and is stored as failed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import VpnlabError
from .algorithms import record as record_algorithms
from ..catalog import TRAFFIC_TOOLS
from ..measure.cpu import shared_machine_flag
from ..measure.window import Sample, measure
from ..testbed import netns
from ..testbed.state import RunState, other_live_runs
from ..testbed.topology import Layout, Testbed
from .tunnels import TunnelStage, bring_up, first_packet, prove_and_measure
from ..workloads.background import BackgroundTraffic
from ..workloads.base import WorkloadContext

WATCH_INTERVAL_S = 0.3
WARM_UP_PINGS = 10          # through the fresh tunnel before measuring: caches, keys, daemons awake
CHECK_ATTEMPTS = 3          # after the measurement: does the tunnel still carry a packet?


@dataclass
class Attempt:
    sample: Sample = field(default_factory=Sample)
    failure: str | None = None
    notes: list[str] = field(default_factory=list)


def run_repetition(scenario, state: RunState, log_dir: Path, arrivals: str, hosts=None) -> Attempt:
    """Measure one repetition on a testbed of its own (on `hosts`, a hosts.testbed.HostPair, when
    the study runs on real hosts); everything it made is gone on return. `arrivals` seeds the
    background's (background.arrivals_seed)."""
    attempt, bed, ctx, stage = Attempt(), None, None, TunnelStage()
    try:
        layout = Layout.for_topology(scenario.topology, len(scenario.vpn.layers))
        if hosts:
            bed = hosts.testbed(state, layout, scenario.link_as_run, f"{scenario.index}", not scenario.vpn.layers)
        else:
            bed = Testbed.build(state, layout, scenario.link_as_run, tag=f"{scenario.index}", pin=scenario.pin,
                                cores=scenario.vpn.cores)
        ctx = WorkloadContext(bed, log_dir)
        bring_up(stage, bed, scenario, state, log_dir)
        prove_and_measure(stage, bed, scenario, log_dir)
        attempt.notes = stage.notes
        ctx.tunnels = stage.tunnels
        scenario.kind.prepare(scenario.workload_as_run, ctx)  # (its files and servers) outside every window
        warm_up(bed)
        background = BackgroundTraffic(ctx, scenario.link.background, arrivals) if scenario.link.background else None
        with TunnelWatch(stage, bed, scenario.kind.needs(scenario.workload)) as watch:
            others = other_live_runs(state.run_id)
            try:
                attempt.sample = measure(scenario, ctx, len(stage.tunnels), background, TRAFFIC_TOOLS)
            except (VpnlabError, subprocess.SubprocessError) as exc:
                attempt.failure = str(exc)
            others += other_live_runs(state.run_id)
        if others:
            attempt.sample.flags.append(shared_machine_flag(others))
        # after events, a tunnel that did not come back is their result (`recovered`), not a failure
        attempt.failure = (watch.death or still_carrying(stage, bed, scenario.link_as_run,
                                                         packets=not scenario.workload.events) or attempt.failure)
        attempt.sample.values |= stage.values
        record_algorithms(stage, scenario, attempt.sample)  # declared and negotiated, per layer
    except (VpnlabError, subprocess.SubprocessError) as exc:
        attempt.failure = str(exc)
    finally:
        if ctx:
            ctx.stop_services()
        stage.down()
        if bed:
            bed.destroy()
    return attempt


def warm_up(bed: Testbed) -> None:
    """A few packets through the fresh path, not stored: the first ones pay for caches and wake-ups."""
    bed.source.run(["ping", "-n", "-q", "-c", WARM_UP_PINGS, "-i", "0.02", "-W", 1, bed.sink_ip], check=False,
                   timeout=10)


def still_carrying(stage: TunnelStage, bed: Testbed, link, packets: bool = True) -> str | None:
    """None if every daemon runs and (unless not `packets`) a packet still crosses end to end, else
    what is wrong."""
    problem = stage.health()
    if problem:
        return f"the tunnel died during the measurement: {problem}"
    if not packets or any(first_packet(bed, link) for _ in range(CHECK_ATTEMPTS)):
        return None
    logs = "\n".join(t.logs() for t in stage.tunnels)
    return "after the measurement no packet crossed end to end any more" + (f"\n{logs}" if logs else "")


class TunnelWatch:
    """While the workload runs, watch the tunnel's daemons; if one dies, end the workload's
    client (our own process, in our source namespace) at once instead of letting it hang or
    measure a dead tunnel, and say why."""

    def __init__(self, stage: TunnelStage, bed: Testbed, clients: tuple[str, ...]):
        self.stage, self.bed, self.clients = stage, bed, set(clients)
        self.death: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        if self.stage.tunnels:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            problem = self.stage.health()
            if problem:
                self.death = f"the tunnel died during the measurement: {problem}"
                self._end_clients()
                return

    def _end_clients(self) -> None:
        if self.bed.remote:
            return  # on a real host the client's own time limit (`timeout`) ends it
        for pid in netns.pids(self.bed.source.namespace):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() in self.clients:
                    os.kill(pid, 15)
            except (OSError, ValueError):
                continue  # gone already
