"""The measurement stage: one repetition of a scenario's workload, with the CPU it cost and the
background traffic beside it, turned into one sample (values, raw output, flags)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..core.flags import Flag

from ..core.errors import VpnlabError
from .cpu import CpuMeter
from .observers import observers_for
from .recovery import WORKLOAD_BROKEN
from ..testbed.topology import Testbed
from ..workloads.background import BackgroundTraffic
from ..workloads.base import Measurement, WorkloadContext

PER_BYTE = ("cpu_s_per_gb", "wan_bytes_per_byte")  # per byte carried: with a background, its bytes count too


@dataclass
class Sample:
    values: dict[str, float] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)      # tool -> its output
    flags: list[Flag] = field(default_factory=list)


def run_through_events(scenario, ctx: WorkloadContext) -> Measurement:
    """The workload's measurement. With events, one they broke (its TCP connection reset, its transfer cut) is
    their result, as a tunnel that did not come back is: `workload_survived` 0, flagged with why (its tool's error,
    or that it hung past its time limit on a path that never came back)."""
    events = scenario.workload_as_run.events
    try:
        measurement = scenario.kind.run(scenario.workload_as_run, ctx)
    except VpnlabError as exc:
        if not events:
            raise
        return Measurement({"workload_survived": 0.0}, str(exc), scenario.kind.kind, [WORKLOAD_BROKEN(str(exc))])
    if events:
        measurement.values["workload_survived"] = 1.0
    return measurement


def measure(scenario, ctx: WorkloadContext, layers: int, background: BackgroundTraffic | None,
            traffic_tools: frozenset[str]) -> Sample:
    """Run the workload once, with the CPU meter around it (`traffic_tools`: the programs it leaves out
    of the tunnel ends' daemons), the observers watching and the background beside it."""
    observers = observers_for(scenario.kind, ctx.bed, ctx.log_dir, scenario.link_as_run, scenario.workload_as_run,
                              ctx.tunnels)
    if background:
        background.start()
    try:
        for observer in observers:
            observer.start()
        meter = (ctx.bed.cpu_meter(layers) if ctx.bed.remote  # real hosts: each one's own /proc (hosts/cpu.py)
                 else CpuMeter.here(*tunnel_ends(ctx.bed, layers), getattr(ctx.bed, "placement", None),
                                    [node.namespace for node in ctx.bed.nodes], traffic_tools))
        measurement = run_through_events(scenario, ctx)
        cpu, cpu_flags = meter.finish(measurement.carried_bytes)
        for observer in observers:
            seen, noted = observer.finish(measurement.carried_bytes)
            cpu, cpu_flags = cpu | seen, cpu_flags + noted
    except BaseException:
        for observer in observers:
            getattr(observer, "abandon", lambda: None)()  # (an events player stops making events)
        if background:
            background.abandon()
        raise
    extra, account, extra_flags = background.stop() if background else ({}, "", [])
    sample = Sample(dict(measurement.values) | cpu | extra, {measurement.tool: measurement.raw},
                    measurement.flags + cpu_flags + extra_flags)
    record = getattr(meter, "record", None) or {}
    if record:
        sample.raw["cpu"] = json.dumps(record)  # the method, the placement, both methods' figures
    add_utilisation(sample.values, scenario.link_as_run.rate_mbit)
    sample.flags += software_flags(scenario, sample.values)
    if background:
        sample.raw["background"] = account
        share_with_background(sample.values, measurement.carried_bytes, record.get("wall_s"))
    return sample


def software_flags(scenario, values: dict[str, float]) -> list[Flag]:
    """What each layer's VPN software says of the sample (Driver.sample_flags: pptpd's hold)."""
    params, loss = scenario.workload_as_run.model_dump(), scenario.link_as_run.loss_pct
    return [flag for driver, implementation in zip(scenario.drivers, scenario.implementations)
            for flag in driver.sample_flags(implementation, scenario.workload.kind, params, loss, values)]


def add_utilisation(values: dict[str, float], rate_mbit: float | None) -> None:
    """The goodput as a share of a shaped link's rate."""
    if rate_mbit and "throughput_mbps" in values:
        values["link_utilisation_pct"] = 100 * values["throughput_mbps"] / rate_mbit


def share_with_background(values: dict[str, float], carried: float | None, meter_s: float | None) -> None:
    """With a background beside the workload, the CPU and the WAN's bytes were both's: per byte
    of all that was carried (the background's at its mean rate over the meter's window), not of
    the workload's alone (its no-VPN WAN bytes per byte read 1.96 where the workload's own are 1.06)."""
    if not carried or not meter_s or "background_kbps" not in values:
        return
    background_bytes = values["background_kbps"] * 1000 / 8 * meter_s
    for name in PER_BYTE:
        if name in values:
            values[name] *= carried / (carried + background_bytes)


def tunnel_ends(bed: Testbed, layers: int) -> tuple[list[str], list[str]]:
    """Namespaces of the client-side and the gateway-side tunnel ends, over all layers."""
    ends = [bed.layout.tunnels[layer] for layer in range(layers)]
    return [bed.nodes[a].namespace for a, _ in ends], [bed.nodes[b].namespace for _, b in ends]
