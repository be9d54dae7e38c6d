"""A stored scenario and a stored sample as everything downstream reads them."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core.flags import Flag
from .database import BASELINE_VPN


@dataclass(frozen=True)
class ScenarioRow:
    """A stored scenario, its JSON columns parsed once for everything downstream."""

    id: str
    idx: int
    label: str
    topology: str
    vpn: str                 # driver name(s), inner first: 'openvpn-in-strongswan'
    vpn_label: str
    vpn_options: str         # the configuration as stored (JSON), exported as is
    implementation: str
    link_label: str
    link_rate_mbit: float | None
    link_delay_ms: float
    link_jitter_ms: float
    link_loss_pct: float
    workload: str            # the kind
    workload_label: str
    workload_params: str     # JSON, exported as is
    repetitions: int
    repetition_rule: str
    ci_target_met: int | None
    status: str
    failure: str | None
    notes: str
    measured_in: str
    hosts: str = ""          # JSON role -> inventory host (real hosts), else ''
    as_run: str = ""         # JSON {"link": {rate_mbit, delay_ms, jitter_ms, loss_pct}, "workload": {...}}; '' unrecorded
    baseline: int | None = None  # 1: the no-VPN baseline; None: a store written before it was recorded

    @property
    def unfinished(self) -> bool:
        """Not measured to its repetition rule yet: a sitting was interrupted, or the VM guest stopped."""
        return self.status in ("pending", "running")

    @property
    def emulated(self) -> bool:
        """Measured in a VM under software emulation (TCG), or in a VM whose acceleration is not recorded:
        its CPU is the emulator's."""
        if self.measured_in != "vm":
            return False
        notes = self.notes.lower()
        return "kvm" not in notes or "software emulation" in notes or "tcg" in notes

    @property
    def host_roles(self) -> dict[str, str]:
        """Role -> inventory host it was measured on; empty for namespaces on the machine of the run."""
        return json.loads(self.hosts) if self.hosts else {}

    @property
    def config(self) -> dict:
        return json.loads(self.vpn_options)

    @property
    def params(self) -> dict:
        return json.loads(self.workload_params)

    @property
    def profile(self) -> str:
        return self.config["profile"]

    @property
    def is_baseline(self) -> bool:
        if self.baseline is not None:
            return bool(self.baseline)
        return self.vpn == BASELINE_VPN  # stored before the column: no tunnel layer

    @property
    def shown(self) -> str:
        """The VPN's label for people, saying when it was measured in the (slower) VM."""
        in_vm = self.measured_in == "vm" and not self.vpn_label.endswith("(in the VM)")
        return self.vpn_label + (" (in the VM)" if in_vm else "")


@dataclass(frozen=True)
class SampleRow:
    scenario_id: str
    repetition: int
    metric: str
    value: float
    unit: str
    measured_at: str
    flags: tuple[Flag, ...]
    round: int | None = None
    failure: str = ""
    position: int | None = None   # its place in the round's order

