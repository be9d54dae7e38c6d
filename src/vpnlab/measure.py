"""The measurement stage: one repetition of a scenario's workload, with the CPU it cost and the
background traffic beside it, turned into one sample (values, raw output, flags)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .cpu import CpuMeter
from .metrics import declare
from .observers import observers_for
from .testbed.topology import Testbed
from .workloads.background import BackgroundTraffic
from .workloads.base import WorkloadContext

UTILISATION = declare("link_utilisation_pct", "%", "goodput as a share of the shaped link rate (above 100% only "
                      "when compression shrinks the data)", True, positive=True, producers="tcp, udp, transfer")
UTILISATION_TOTAL = declare("link_utilisation_total_pct", "%", "measured goodput plus background as a share of "
                            "the link rate", True, level="background", producers="links with background and a rate")


@dataclass
class Sample:
    values: dict[str, float] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)      # tool -> its output
    flags: list[str] = field(default_factory=list)


def measure(scenario, ctx: WorkloadContext, layers: int, background: BackgroundTraffic | None) -> Sample:
    """Run the workload once, with the CPU meter around it, the observers watching and the
    background beside it."""
    observers = observers_for(scenario.kind, ctx.bed, ctx.log_dir)
    scenario.kind.prepare(scenario.workload_as_run, ctx)  # outside every window below
    if background:
        background.start()
    try:
        for observer in observers:
            observer.start()
        meter = (ctx.bed.cpu_meter(layers) if ctx.bed.remote  # real hosts: each one's own /proc (hosts/cpu.py)
                 else CpuMeter(*tunnel_ends(ctx.bed, layers), getattr(ctx.bed, "placement", None)))
        measurement = scenario.kind.run(scenario.workload_as_run, ctx)
        cpu, cpu_flags = meter.finish(measurement.carried_bytes)
        for observer in observers:
            seen, noted = observer.finish(measurement.carried_bytes)
            cpu, cpu_flags = cpu | seen, cpu_flags + noted
    except BaseException:
        if background:
            background.abandon()
        raise
    extra, account, extra_flags = background.stop() if background else ({}, "", [])
    sample = Sample(dict(measurement.values) | cpu | extra, {measurement.tool: measurement.raw},
                    measurement.flags + cpu_flags + extra_flags)
    if getattr(meter, "record", None):
        sample.raw["cpu"] = json.dumps(meter.record)  # the method, the placement, both methods' figures
    if background:
        sample.raw["background"] = account
    add_utilisation(sample.values, scenario.link_as_run.rate_mbit)
    return sample


def add_utilisation(values: dict[str, float], rate_mbit: float | None) -> None:
    """The goodput (and the background with it) as shares of a shaped link's rate."""
    if not rate_mbit or "throughput_mbps" not in values:
        return
    values["link_utilisation_pct"] = 100 * values["throughput_mbps"] / rate_mbit
    if "background_kbps" in values:
        values["link_utilisation_total_pct"] = values["link_utilisation_pct"] + values["background_kbps"] / 10 / rate_mbit


def tunnel_ends(bed: Testbed, layers: int) -> tuple[list[str], list[str]]:
    """Namespaces of the client-side and the gateway-side tunnel ends, over all layers."""
    ends = [bed.layout.tunnels[layer] for layer in range(layers)]
    return [bed.nodes[a].namespace for a, _ in ends], [bed.nodes[b].namespace for _, b in ends]
