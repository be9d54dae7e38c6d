"""udp_capacity: the highest UDP rate a path carries with at most `max_loss_pct` of its datagrams lost.

The search (stated here, in the metric's meaning and checked by a simulation with known truth in
tests/test_udp_capacity.py): probes of `probe_s` seconds, iperf3 -u at a rate. From `start_mbit` the
rate doubles while a probe loses at most `max_loss_pct` (up to `max_mbit`); then the interval between
the highest rate that passed and the lowest that failed is halved until they are within
`precision_pct` of each other, or `max_probes` were sent. A path that loses more than that at
`start_mbit` is probed at half the rate, and half again, until a probe passes (then the bracket is
halved as above); one that fails down to `min_mbit` has no capacity to report, and the sample fails
with the loss it saw there. The capacity is the throughput the receiver got at the highest rate that
passed. A probe whose sender sent less
than SENDER_SHARE of the rate asked ends the search where it is: iperf3's one thread, not the path,
set that limit, and the sample is flagged sender-bound (the figure is a lower bound of the capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Literal

from pydantic import Field, field_validator, model_validator

from ..core.errors import MeasurementError
from ..core.flags import declare as declare_flag
from ..core.schema import Size, whole_seconds
from ..metrics import declare
from . import iperf
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions
from .udp import MAX_SIZE, MIN_SIZE, datagram_size, loss_pct

CAPACITY = declare("udp_capacity_mbps", "Mbit/s", "the highest UDP goodput with at most max_loss_pct lost, by "
                   "doubling then halving probes (workloads/udp_capacity.py)", True, judged="share",
                   positive=True, producers="udp_capacity")
AT_RATE = declare("udp_capacity_offered_mbps", "Mbit/s", "the send rate of the highest probe that passed", None,
                  positive=True, producers="udp_capacity")
AT_LOSS = declare("udp_capacity_loss_pct", "%", "the datagrams lost at that rate", False, producers="udp_capacity")
PROBES = declare("udp_capacity_probes", "count", "probes the search sent", None, producers="udp_capacity")

Probe = Callable[[float], tuple[float, float, float]]   # rate Mbit/s -> (goodput Mbit/s, loss %, sent Mbit/s)
SENDER_SHARE = 0.9
SENDER_BOUND = declare_flag("sender-bound", "iperf3's sender could not send at the rate asked: the figure is "
                            "the tool's limit, a lower bound of the path's", cpu_bound=True)


class UdpCapacityOptions(WorkloadOptions):
    """The search for the highest UDP rate with at most max_loss_pct lost."""

    kind: Literal["udp_capacity"] = "udp_capacity"
    max_loss_pct: float = Field(1.0, ge=0, lt=100)
    size: Size = Field(1200, ge=MIN_SIZE, le=MAX_SIZE, description="datagram payload bytes (iperf3 -l)")
    start_mbit: float = Field(50, gt=0, le=100_000)
    min_mbit: float = Field(0.1, gt=0, le=100_000, description="the lowest rate probed below a lossy start")
    max_mbit: float = Field(20_000, gt=0, le=100_000)
    precision_pct: float = Field(5, ge=0.5, le=50, description="stop when the bracket is this narrow")
    probe_s: float = Field(2, ge=1, le=60, description="whole seconds a probe (iperf3 -t)")
    max_probes: int = Field(14, ge=2, le=40)

    @field_validator("size", mode="before")
    @classmethod
    def parse_datagram_size(cls, value):
        return datagram_size(value)

    @field_validator("probe_s", mode="before")
    @classmethod
    def whole(cls, value):
        return whole_seconds(value)

    @model_validator(mode="after")
    def rates_in_order(self):
        if not self.min_mbit <= self.start_mbit <= self.max_mbit:
            raise ValueError(f"min_mbit ({self.min_mbit:g}) <= start_mbit ({self.start_mbit:g}) <= max_mbit "
                             f"({self.max_mbit:g}) is needed")
        return self

    @property
    def label(self) -> str:
        return f"udp-capacity-{self.max_loss_pct:g}pct-{self.size}B"


@dataclass
class Search:
    rate: float | None = None          # the highest rate that passed
    goodput: float = 0.0
    loss: float = 0.0
    failed_at: float | None = None     # the lowest rate that failed
    sender_bound: bool = False         # stopped where the sender could send no faster
    probes: list[tuple[float, float, float]] = field(default_factory=list)  # (rate, goodput, loss)


def search(probe: Probe, options: UdpCapacityOptions) -> Search:
    """The search of the module's docstring, over any probe (iperf3 here, a model in its test)."""
    found, rate = Search(), options.start_mbit  # the options keep min_mbit <= start_mbit <= max_mbit
    while len(found.probes) < options.max_probes:
        goodput, loss, sent = probe(rate)
        found.probes.append((rate, goodput, loss))
        if loss <= options.max_loss_pct:
            found.rate, found.goodput, found.loss = rate, goodput, loss
        else:
            found.failed_at = rate
        if found.rate is None:  # lossy from the start: half the rate, down to min_mbit
            if rate / 2 < options.min_mbit:
                break
            rate /= 2
            continue
        if sent < SENDER_SHARE * rate:
            found.sender_bound = True
            break  # more asked would not be sent
        if found.failed_at is None:
            if rate >= options.max_mbit:
                break
            rate = min(2 * rate, options.max_mbit)
        elif found.failed_at / found.rate - 1 <= options.precision_pct / 100:
            break
        else:
            rate = math.sqrt(found.rate * found.failed_at)  # halves the bracket on a log scale
    return found


class UdpCapacity(WorkloadKind):
    kind = "udp_capacity"
    summary = "the highest UDP rate with at most max_loss_pct lost: max_loss_pct, size, start_mbit, max_mbit"
    Options = UdpCapacityOptions
    tools = iperf.TOOLS
    metrics = (CAPACITY, AT_RATE, AT_LOSS, PROBES)
    primary = "udp_capacity_mbps"
    loads_path = True

    def estimate_s(self, options: UdpCapacityOptions, rate_mbit):
        return options.max_probes * (options.probe_s + 0.5) * 0.7  # most searches end before max_probes

    def prepare(self, options: UdpCapacityOptions, ctx: WorkloadContext) -> None:
        iperf.ensure_server(ctx)

    def run(self, options: UdpCapacityOptions, ctx: WorkloadContext) -> Measurement:
        raws: list[str] = []

        def probe(rate: float) -> tuple[float, float]:
            data, raw = iperf.client(ctx, ["-u", "-b", f"{rate:.6g}M", "-l", options.size, "-t", options.probe_s],
                                     options.probe_s)
            raws.append(raw)
            received = data["end"].get("sum_received") or data["end"]["sum"]
            sent = data["end"].get("sum_sent") or data["end"]["sum"]
            return received["bits_per_second"] / 1e6, loss_pct(data["end"]), sent["bits_per_second"] / 1e6

        found = search(probe, options)
        if found.rate is None:
            rate, _, loss = found.probes[-1]
            raise MeasurementError(f"udp_capacity: more than max_loss_pct {options.max_loss_pct:g} lost at every "
                                   f"rate from start_mbit {options.start_mbit:g} down to {rate:.4g} Mbit/s "
                                   f"({loss:.1f}% there)")
        values = {"udp_capacity_mbps": found.goodput, "udp_capacity_offered_mbps": found.rate,
                  "udp_capacity_loss_pct": found.loss, "udp_capacity_probes": float(len(found.probes))}
        flags = [SENDER_BOUND(f"iperf3 sent less than {SENDER_SHARE:.0%} of {found.probes[-1][0]:.4g} Mbit/s")] \
            if found.sender_bound else []
        return Measurement(values, "[" + ",".join(raws) + "]", "iperf3", flags)
