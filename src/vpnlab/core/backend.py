"""Where this process measures: on a host, or inside vpnlab's VM (vm.Guest sets VPNLAB_BACKEND for
the guest's vpnlab), and whether that VM's CPU is software-emulated. Read once, used everywhere."""

from __future__ import annotations

import os

BACKEND = os.environ.get("VPNLAB_BACKEND", "")
IN_GUEST = BACKEND.startswith("vm")
EMULATED = BACKEND == "vm-tcg"

# Under software emulation a daemon starts several times slower (charon once took over 15 s to open
# its socket when other work shared the cores) and a tool takes seconds to wind down a test: every
# limit that tells slow from hung stretches by this factor, or the slowest repetitions would fail
# as hung and the survivors bias the results upwards. A dead process still fails at once.
SLOWDOWN = 4 if EMULATED else 1
GRACE_S = 5  # past its planned end, a measuring tool on a host is hung


def hang_limit(planned_s: float) -> float:
    """How long a measuring tool planned to take `planned_s` may run before it is ended as hung."""
    return planned_s + GRACE_S * SLOWDOWN
