"""Processes vpnlab starts in sessions of their own, at the caller's priority.

A daemon or an emulator runs in a session of its own, so that Ctrl-C reaches vpnlab, which stops
them in order. But a new session is also a scheduling group of its own (the kernel's autogroup),
where a process's nice counts only against the other processes of its group: started by a vpnlab at
nice 10, it would still take as much of the machine as the caller's whole session. The group gets the
caller's nice, so that `nice vpnlab run` lowers them too. (Measured here: two busy loops on one core,
each in a session of its own, one at nice -10, shared it 150:150; with the group's nice set, 271:29.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def start(argv: list, **popen) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen)` in a new session whose group has the calling thread's nice."""
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice:  # a new group's nice is 0 already
        try:
            Path(f"/proc/{proc.pid}/autogroup").write_text(str(nice))
        except OSError:
            pass  # a kernel without autogroups, where nice counts as it is; or a process already ended
    return proc
