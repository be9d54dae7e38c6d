"""One repetition of a mesh scenario (topology `mesh`, testbed/mesh.py): the peers and their links, the
VPN joining all but the last peer, the last one's join timed, the proof of tunnel on the measured pair,
the overlay's idle control bytes, then the workload between one pair, every pair at once, or all to
one, each pair's values kept and the aggregate and the worst pair stored. A workload that loads the
path has the measured (first) pair's round trip taken meanwhile (rtt_under_load_ms: ping under load).

Pairs are ordered (source -> sink): `all` is N*(N-1) flows at once (every peer sends to every other,
so each link carries N-1 flows each way), `to-one` the N-1 other peers to peer 0 at once, `one` peer 1
to peer 2 (neither the lighthouse, the hub nor tinc's meta-connection target: a pair of ordinary peers,
which a hub-and-spoke VPN connects through its hub).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..catalog import DRIVERS, metric
from ..drivers.base import TunnelEnv, wait_for
from ..core.errors import TunnelError, VpnlabError
from ..measure.observers import LoadedRtt
from .proof import prove
from .repetition import Attempt
from ..testbed.mesh import MeshTestbed, PairView
from ..testbed.state import RunState
from .tunnels import SETUP_TIMEOUT_S, TunnelStage, answer_deadline, answered, overhead_model
from ..workloads.base import Measurement, WorkloadContext

ONE_PAIR = (1, 2)
SUMMED_UNITS = ("Mbit/s", "kbit/s", "segments", "count")  # over a mesh's pairs: what all of them carried, lost
# Over a mesh's pairs, the least: every pair at 90% of its busier link or more means the links, not the
# peers' CPU, set what the mesh carried (analysis.emulation_bound), which a mean would claim of one slow pair
LEAST = ("link_utilisation_pct",)
WARM_UP_PINGS = 5  # per pair: keys, lighthouse look-ups and path-MTU discovery start with a pair's first packet


def pairs_of(pairs: str, peers: int) -> list[tuple[int, int]]:
    """The (source, sink) pairs a workload runs between at once."""
    if pairs == "one":
        return [ONE_PAIR]
    if pairs == "to-one":
        return [(k, 0) for k in range(1, peers)]
    return [(a, b) for a in range(peers) for b in range(peers) if a != b]


def run_mesh_repetition(scenario, state: RunState, log_dir: Path, arrivals: str = "", hosts=None) -> Attempt:
    """Measure one repetition on a mesh of its own; everything it made is gone on return."""
    attempt, bed, stage, contexts = Attempt(), None, TunnelStage(), []
    try:
        bed = MeshTestbed.build(state, scenario.peers, scenario.link_as_run, tag=f"{scenario.index}")
        mesh = join(stage, bed, scenario, state, log_dir)
        overlay = mesh.addresses if mesh else None
        every = [PairView(bed, a, b, overlay) for a in range(len(bed.peers)) for b in range(len(bed.peers)) if a != b]
        for view in every:  # each pair's first packets: keys, look-ups, path-MTU probing
            view.source.run(["ping", "-n", "-q", "-c", WARM_UP_PINGS, "-i", "0.02", "-W", 1, view.sink_ip],
                            check=False, timeout=15)
        if mesh:
            mesh.settle()
        measured = [PairView(bed, a, b, overlay) for a, b in pairs_of(scenario.workload.pairs, len(bed.peers))]
        prove_pair(stage, measured[0], scenario, log_dir)
        stage.values["idle_control_bytes_per_s"] = idle_control_rate(bed, scenario.idle_window_s)
        contexts = [WorkloadContext(view, log_dir / f"pair-{view.a}-{view.b}", port_offset=n)
                    for n, view in enumerate(measured)]
        for ctx in contexts:
            ctx.log_dir.mkdir(exist_ok=True)
            scenario.kind.prepare(scenario.workload_as_run, ctx)
        loaded = LoadedRtt(measured[0], log_dir) if scenario.kind.loads_path else None  # ping under load
        try:
            results = measure_pairs(scenario, contexts, loaded)
            add_link_shares(results, measured, scenario.link_as_run.rate_mbit)
            attempt.sample.values, attempt.sample.raw["pairs"] = combine(scenario.kind, results)
            attempt.sample.values |= loaded.finish(None)[0] if loaded else {}
            attempt.sample.flags = sorted({flag.within(f"pair {label}") for label, m in results.items() for flag in m.flags},
                                          key=str)
        except (VpnlabError, subprocess.SubprocessError) as exc:
            attempt.failure = str(exc)
        deadline = answer_deadline(scenario.link_as_run)
        attempt.failure = still_carrying(stage, measured[0], deadline) or attempt.failure
        attempt.sample.values |= stage.values
        attempt.notes = stage.notes + ["a mesh measures no CPU cost: its peers share the cores"]
    except (VpnlabError, subprocess.SubprocessError) as exc:
        attempt.failure = str(exc)
    finally:
        for ctx in contexts:
            ctx.stop_services()
        stage.down()
        if bed:
            bed.destroy()
    return attempt


def join(stage: TunnelStage, bed: MeshTestbed, scenario, state: RunState, log_dir: Path):
    """Bring the VPN up on all peers but the last, then start the last and time it until peer 0
    answers its ping through the overlay (join_s); setup_s covers both. None without a VPN."""
    if not scenario.vpn.layers:
        return None
    config, impl = scenario.vpn.layers[0], scenario.implementations[0]
    started = time.monotonic()
    mesh = DRIVERS[config.driver].up_mesh(bed.sites, config.options, config.profile, TunnelEnv(state, 0, log_dir, impl))
    stage.tunnels.extend(mesh.tunnels)
    last = bed.peers[-1]
    joining = time.monotonic()
    mesh.join()
    stage.tunnels.extend(t for t in mesh.tunnels if t not in stage.tunnels)  # hub and spoke: the last spoke's
    deadline = answer_deadline(scenario.link_as_run)
    wait_for(lambda: answered(last, mesh.addresses[0], deadline), SETUP_TIMEOUT_S, f"the last peer's first packet through "
             f"{scenario.vpn.label}", stage.tunnels[-1], interval=0)  # (answered pings on until a reply)
    stage.values["join_s"] = time.monotonic() - joining
    stage.values["setup_s"] = time.monotonic() - started
    return mesh


def prove_pair(stage: TunnelStage, view: PairView, scenario, log_dir: Path) -> None:
    """The proof of tunnel on the measured pair's two WAN links: with a VPN, nothing in clear and
    only the VPN's own packets (of any of its tunnels: a hub's differ per spoke); its overhead."""
    channels = [c for t in stage.tunnels for c in t.channels] if stage.tunnels else None
    encrypted = not stage.tunnels or any(t.encrypted for t in stage.tunnels)
    result = prove(view, channels, view.mesh.underlay_ip(view.a), log_dir / "proof.pcap", encrypted)
    if not result.ok:
        raise TunnelError("proof of tunnel failed: " + "; ".join(result.problems))
    if not stage.tunnels:
        return
    stage.values["overhead_model_bytes"] = float(overhead_model(scenario))
    if result.overhead_bytes is not None:
        stage.values["overhead_bytes"] = float(result.overhead_bytes)


def idle_control_rate(bed: MeshTestbed, window_s: float) -> float:
    """Bytes per second all peers sent on their WAN links while nothing else ran (each packet
    counted once, where it left its peer): the overlay's own keepalives, look-ups and meta traffic."""
    before = bed.wan_sent_bytes()
    time.sleep(window_s)
    return (bed.wan_sent_bytes() - before) / window_s


def measure_pairs(scenario, contexts: list[WorkloadContext], loaded: LoadedRtt | None) -> dict[str, Measurement]:
    """The workload on every pair at once, each in a thread of its own (the tools run as processes),
    with the first pair's round trip measured meanwhile where the workload loads the path."""
    if loaded:
        loaded.start()
    with ThreadPoolExecutor(max_workers=len(contexts)) as pool:
        futures = {ctx.bed.label: pool.submit(scenario.kind.run, scenario.workload_as_run, ctx) for ctx in contexts}
        return {label: future.result() for label, future in futures.items()}


def add_link_shares(results: dict[str, Measurement], views: list[PairView], rate_mbit: float | None) -> None:
    """Each pair's link_utilisation_pct: the goodput its busier WAN link carried, as a share of the link
    rate. A peer's link carries up what it sends to every measured pair and down what they send it
    (`all`: N-1 flows each way), so a pair's own goodput alone would understate a full link."""
    goodputs = {(v.a, v.b): results[v.label].values.get("throughput_mbps") for v in views}
    if not rate_mbit or None in goodputs.values():
        return
    up, down = defaultdict(float), defaultdict(float)
    for (a, b), mbps in goodputs.items():
        up[a] += mbps
        down[b] += mbps
    for v in views:
        results[v.label].values["link_utilisation_pct"] = 100 * max(up[v.a], down[v.b]) / rate_mbit


def combine(kind, results: dict[str, Measurement]) -> tuple[dict[str, float], str]:
    """The sample's values: each metric summed over the pairs if it is a rate or a count (what the mesh
    carried in all), the least of them if in LEAST, else their mean; the primary metric's worst pair as
    `worst_pair_<metric>`. And every pair's own values, as JSON (the per-pair samples)."""
    per_pair = {label: m.values for label, m in results.items()}
    values = {}
    for name in {n for v in per_pair.values() for n in v}:
        found = [v[name] for v in per_pair.values() if name in v]
        values[name] = (sum(found) if metric(name).unit in SUMMED_UNITS else min(found) if name in LEAST
                        else sum(found) / len(found))
    primary = kind.primary
    found = [v[primary] for v in per_pair.values() if primary in v]
    if found and len(per_pair) > 1:
        worst = min if metric(primary).higher_is_better else max
        values[f"worst_pair_{primary}"] = worst(found)
    return values, json.dumps(per_pair, sort_keys=True)


def still_carrying(stage: TunnelStage, view: PairView, deadline_s: int) -> str | None:
    """None if every daemon runs and the measured pair still exchanges a packet, else what is wrong."""
    problem = stage.health()
    if problem:
        return f"the tunnel died during the measurement: {problem}"
    if answered(view.source, view.sink_ip, deadline_s):
        return None
    return f"after the measurement no packet crossed from peer {view.a} to peer {view.b} any more"
