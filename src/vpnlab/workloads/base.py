"""The contract every workload kind keeps (one module per kind, as drivers are one per VPN).

A kind owns its options (the pydantic model a study's `workloads[]` entry validates
against), the programs it runs, its duration estimate, its metrics (declared in the metric
registry) and which of them answers its question, how it runs on the testbed and parses its
tool's output, and what the report shows for it. Nothing outside the kind's module names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_serializer, model_validator

from ..core.flags import Flag
from ..metrics import Metric, declare
from ..core.schema import Strict
from ..testbed.topology import Testbed
from ..tools import Tool

# measure/window.py computes it for every kind that reports a throughput, run/mesh_run.py for a mesh
UTILISATION = declare("link_utilisation_pct", "%", "goodput as a share of the shaped link rate (above 100% only "
                      "when compression shrinks the data; in a mesh, each pair's busier link's, the least pair's "
                      "for the sample)", True, positive=True, producers="tcp, udp, transfer")


EVENT_KINDS = {"link_down_s": "the WAN carries nothing, both ways, for this many seconds",
               "address_change": "the client's WAN address changes (behind a NAT: the NAT's outer address)",
               "nat_rebind": "the client side's NAT forgets its mappings (needs a link with nat: masquerade)",
               "rekey": "the VPN is made to rekey now, where its software allows one (its driver's `rekeys`)"}
NAT_EVENTS = ("nat_rebind",)


class Event(Strict):
    """Something that happens to the path `at_s` seconds after the workload starts: one of EVENT_KINDS."""

    at_s: float = Field(ge=0, le=86_400)
    link_down_s: float | None = Field(None, gt=0, le=3600)
    address_change: Literal[True] | None = None
    nat_rebind: Literal[True] | None = None
    rekey: Literal[True] | None = None

    @model_validator(mode="before")
    @classmethod
    def one_kind(cls, value):
        if not isinstance(value, dict):
            return value
        unknown = [key for key in value if key != "at_s" and key not in EVENT_KINDS]
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown kind of event; one of: {', '.join(EVENT_KINDS)}")
        kinds = [key for key in value if key in EVENT_KINDS and value[key] is not None]  # (a dump has them all)
        if len(kinds) != 1:
            raise ValueError(f"an event is at_s and one of {', '.join(EVENT_KINDS)}; found "
                             f"{', '.join(kinds) if kinds else 'none'}")
        return value

    @property
    def kind(self) -> str:
        return next(key for key in EVENT_KINDS if getattr(self, key) is not None)

    @property
    def end_s(self) -> float:
        """When the path is whole again, after the workload's start (an outage's end; else the event's moment)."""
        return self.at_s + (self.link_down_s or 0)


def event_label(event: Event) -> str:
    """down3s@2, address-change@4, nat-rebind@4."""
    what = f"down{event.link_down_s:g}s" if event.link_down_s else event.kind.replace("_", "-")
    return f"{what}@{event.at_s:g}"


class WorkloadOptions(Strict):
    """Base of a kind's options; each kind narrows `kind` to its own name."""

    # Fields added after scenarios were stored: left out of the dump at these values, so that a stored
    # scenario keeps its id (the id hashes the dumped options)
    ADDED_LATER: ClassVar[dict[str, Any]] = {"pairs": "one", "events": []}

    kind: str
    pairs: Literal["one", "all", "to-one"] = Field("one", description="in a mesh: from peer 1 to peer 2 (one), "
                                                   "between every ordered pair at once (all), or from every other "
                                                   "peer to peer 0 at once (to-one)")
    events: list[Event] = Field(default_factory=list, description="what happens to the path meanwhile: "
                                "[{at_s, link_down_s: N | address_change: true | nat_rebind: true}] (events.py)")

    @model_serializer(mode="wrap")
    def _as_before(self, handler):
        return without_added_later(self, handler(self))

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def full_label(self) -> str:
        """The kind's label, with the pairs it runs between in a mesh (none said: one pair) and its events."""
        return (self.label + ("" if self.pairs == "one" else f"-pairs-{self.pairs}")
                + "".join(f"+{event_label(event)}" for event in self.events))


def without_added_later(options: WorkloadOptions, data):
    """The dumped options without the fields added later at their first values (`pairs` came with the
    mesh): scenarios stored before keep their ids."""
    if isinstance(data, dict):
        for name, first in options.ADDED_LATER.items():
            if getattr(options, name, None) == first:
                data.pop(name, None)
    return data


@dataclass
class Measurement:
    values: dict[str, float] = field(default_factory=dict)
    raw: str = ""
    tool: str = ""
    flags: list[Flag] = field(default_factory=list)
    carried_bytes: float | None = None  # payload the workload moved, for CPU cost per byte


@dataclass
class WorkloadContext:
    """The testbed a workload drives and where its helpers may write logs."""

    bed: Testbed
    log_dir: Path
    services: dict = field(default_factory=dict)  # servers started once per testbed, stopped with it
    server_info: dict = field(default_factory=dict)  # what clients need to reach them (keys, CA)
    port_offset: int = 0  # added to its servers' ports: each pair of a mesh measured at once has its own
    folders: dict = field(default_factory=dict)  # (role, namespace) -> the run's data folder on that node
    tunnels: list = field(default_factory=list)  # the tunnel layers up on the testbed, outermost first (events' rekey)

    def stop_services(self) -> None:
        for node, proc in self.services.values():
            node.stop(proc)
        self.services.clear()


@dataclass(frozen=True)
class SeriesFigure:
    """How the report draws a kind's interval series: its title (before the workload and link), the
    axes and the caption."""

    title: str
    x: str
    y: str
    caption: str


class WorkloadKind:
    kind: ClassVar[str]
    summary: ClassVar[str]
    Options: ClassVar[type[WorkloadOptions]]
    tools: ClassVar[tuple[Tool, ...]]            # every program the kind may run
    packages: ClassVar[tuple[str, ...]] = ()     # Debian packages it needs without a program (Python modules)
    modules: ClassVar[dict[str, str]] = {}       # Python modules a node's own python3 imports for it -> package
    metrics: ClassVar[tuple[Metric, ...]]
    primary: ClassVar[str]                       # the metric that answers the kind's question
    graded: ClassVar[tuple[tuple[str, str], ...]] = ()   # Jaha's Table VI columns: (metric, heading)
    plotted: ClassVar[tuple[str, ...]] = ()      # metrics drawn along a swept option
    series_tool: ClassVar[str] = ""              # raw output with an interval-by-interval series (and notes)
    series_figure: ClassVar[SeriesFigure | None] = None  # how the report draws that series
    loads_path: ClassVar[bool] = False           # it fills the path: its round trip meanwhile is latency under load
    in_mesh: ClassVar[bool] = False              # runs between a mesh's pairs, several at once (its own ports)

    def needs(self, options: WorkloadOptions) -> tuple[str, ...]:
        """The programs this configuration runs (default: all the kind's)."""
        return tuple(t.command for t in self.tools)

    def slowed(self, options: WorkloadOptions, factor: float) -> WorkloadOptions | None:
        """The options for a link run `factor` times slower than the study's (software emulation),
        so the load stays the same share of it; None: unchanged (a window, a file, pings)."""
        return None

    def estimate_s(self, options: WorkloadOptions, rate_mbit: float | None) -> float:
        """Seconds one repetition takes over a link of this rate (None: unshaped)."""
        raise NotImplementedError

    def prepare(self, options: WorkloadOptions, ctx: WorkloadContext) -> None:
        """Make ready what `run` needs (servers listening, files made) before the measurement's
        window opens, so that the CPU, the WAN and the round trip under load are the workload's,
        not its set-up's. `run` must still work without it (it finds everything ready)."""

    def run(self, options: WorkloadOptions, ctx: WorkloadContext) -> Measurement:
        raise NotImplementedError

    def series(self, raw: str) -> list[tuple[float, float]]:
        """(seconds, value) interval by interval from the stored raw output, if the tool gives one."""
        return []

    def notes(self, options: WorkloadOptions, raw: list[str]) -> list[tuple[str, str]]:
        """What a reader must know of a scenario from its repetitions' raw output (of `series_tool`):
        (the note, what it found in this scenario), for the report to group by note."""
        return []
