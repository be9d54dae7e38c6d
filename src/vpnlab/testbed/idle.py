"""Whether a process a node started is idle: asleep in the system call it waits in when it has
nothing to do (a capture's poll, a daemon's select), read from /proc where it runs.

Two uses: a capture asleep there again has read every packet it was given (run/proof.py); and a
daemon whose signal handler is not async-signal-safe (tinc 1.0 dumps its nodes from the handler,
allocating) is signalled only while asleep there, never in the middle of its own malloc.
"""

from __future__ import annotations

import time

from ..core.errors import VpnlabError
from .contract import Node, Process

LOOK_S = 0.01  # between two looks: asleep twice in one call is asleep there, not passing through

# Signal a process once it is asleep in a system call, looking LOOK_S apart: reading /proc and
# signalling in one program on its node leaves microseconds for it to wake between the two.
SIGNAL_WHEN_ASLEEP = """
import os, signal, sys, time
pid, call, sig, looks, pause = int(sys.argv[1]), sys.argv[2], signal.Signals["SIG" + sys.argv[3]], \\
    int(sys.argv[4]), float(sys.argv[5])
for _ in range(looks):
    try:
        with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/syscall") as syscall:
            state, now = stat.read().rsplit(")", 1)[1].split()[0], syscall.read().split()[0]
    except (OSError, IndexError):
        sys.exit(2)  # it ended, or this kernel does not say
    if state == "S" and now == call:
        os.kill(pid, sig)
        sys.exit(0)
    time.sleep(pause)
sys.exit(1)
"""


def asleep_in(node: Node, pid: int) -> str | None:
    """The system call (its number) the process sleeps in now; None if it is not asleep (or has
    ended, or the kernel does not say). Asleep: in state S, not stopped (T) where /proc/<pid>/syscall
    would still name the call it was stopped in."""
    try:
        found = node.process_state(pid)
    except VpnlabError:
        return None  # the node is gone
    return found[1] if found is not None and found[0] == "S" else None


def wait_asleep(node: Node, proc: Process, within_s: float, wanted: str | None = None) -> str | None:
    """Wait until the process sleeps in one system call (`wanted`, if given) twice LOOK_S apart:
    that call, or None if it has not within `within_s` or has ended."""
    deadline, last = time.monotonic() + within_s, None
    while time.monotonic() < deadline and proc.poll() is None:
        call = asleep_in(node, proc.pid)
        if call is not None and call == last and wanted in (None, call):
            return call
        last = call
        time.sleep(LOOK_S)
    return None


def signal_when_asleep_in(node: Node, pid: int, call: str, signal: str, within_s: float) -> bool:
    """Send `signal` (a name: USR2) to the process once it is asleep in `call`; False if it was not
    within `within_s` (nothing sent) or has ended."""
    looks = max(1, round(within_s / LOOK_S))
    done = node.run([node.python, "-c", SIGNAL_WHEN_ASLEEP, str(pid), call, signal, str(looks), str(LOOK_S)],
                    check=False, timeout=within_s * 3 + 30)
    return done.returncode == 0
