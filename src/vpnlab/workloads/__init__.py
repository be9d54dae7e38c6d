"""The registry of workload kinds: one module each, all keeping the contract in base.py."""

from __future__ import annotations

from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions
from .ping import Ping
from .tcp import Tcp
from .transfer import Transfer
from .udp import Udp

# In the order of Jaha 2014's Table VI (TCP throughput, RTT, UDP throughput, jitter, loss): the
# report's graded table takes its columns in this order.
KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (Tcp(), Ping(), Udp(), Transfer())}

__all__ = ["KINDS", "WorkloadKind", "WorkloadOptions", "WorkloadContext", "Measurement"]
