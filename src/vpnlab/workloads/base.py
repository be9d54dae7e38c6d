"""What every workload produces: named metric values plus the tool's raw output."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..testbed.topology import Testbed


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str
    higher_is_better: bool


@dataclass
class Measurement:
    values: dict[str, float] = field(default_factory=dict)
    raw: str = ""
    tool: str = ""
    flags: list[str] = field(default_factory=list)
    carried_bytes: float | None = None  # payload the workload moved, for CPU cost per byte


@dataclass
class WorkloadContext:
    """The testbed a workload drives and where its helpers may write logs."""

    bed: Testbed
    log_dir: Path
    services: dict = field(default_factory=dict)  # servers started once per testbed, stopped with it
    server_info: dict = field(default_factory=dict)  # what clients need to reach them (keys, CA)

    def stop_services(self) -> None:
        for node, proc in self.services.values():
            node.stop(proc)
        self.services.clear()
