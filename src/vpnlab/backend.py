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
