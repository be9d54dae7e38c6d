"""The registry of workload kinds: one module each, all keeping the contract in base.py."""

from __future__ import annotations

from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions
from .ping import Ping
from .tcp import Tcp
from .transfer import Transfer
from .udp import Udp

KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (Tcp(), Udp(), Ping(), Transfer())}

__all__ = ["KINDS", "WorkloadKind", "WorkloadOptions", "WorkloadContext", "Measurement"]
