"""What testbed/idle.py finds on a node, the same checks for a namespace here (test_idle.py) and for a
host over SSH (test_hosts.py): a process is idle only while it sleeps in the call it waits in, not
while busy, asleep elsewhere or stopped, and a signal meant for it then is sent only then."""

from __future__ import annotations

from pathlib import Path

from vpnlab.testbed.idle import signal_when_asleep_in, wait_asleep

BUSY = ["sh", "-c", "while :; do :; done"]
IN_SELECT = "import select; select.select([], [], [], 60)"
# What observe() finds where testbed/idle.py works; the sleeper ended by USR2 (-12: its exit status
# as subprocess and asyncssh give a death by a signal).
EXPECTED = {"calls": "two", "busy": None, "select as nanosleep": None, "stopped": None,
            "busy signalled": False, "select signalled": False, "stopped signalled": False,
            "spared alive": True, "sleeper signalled": True, "sleeper's end": -12, "ended signalled": False}


def observe(node, folder: Path) -> dict:
    """Start a sleeper (nanosleep), a busy loop, a process asleep in select and a stopped sleeper on
    `node`, look at each and signal each as tinc's driver would (USR2, whose default action ends it)."""
    sleeper = node.spawn(["sleep", "60"], folder / "sleep.log")
    busy = node.spawn(BUSY, folder / "busy.log")
    other = node.spawn([node.python, "-c", IN_SELECT], folder / "select.log")
    stopped = node.spawn(["sleep", "61"], folder / "stopped.log")
    try:
        nanosleep, elsewhere = wait_asleep(node, sleeper, 10), wait_asleep(node, other, 10)
        # stopped while asleep: /proc/<pid>/syscall still names nanosleep, its state says T
        node.run(["kill", "-STOP", str(stopped.pid)])
        seen = {"calls": "two" if None not in (nanosleep, elsewhere) and nanosleep != elsewhere else
                f"{nanosleep}, {elsewhere}",
                "busy": wait_asleep(node, busy, 0.5),
                "select as nanosleep": wait_asleep(node, other, 0.5, wanted=nanosleep),
                "stopped": wait_asleep(node, stopped, 0.5)}
        for name, proc in (("busy", busy), ("select", other), ("stopped", stopped)):
            seen[f"{name} signalled"] = signal_when_asleep_in(node, proc.pid, nanosleep, "USR2", 0.5)
        seen["spared alive"] = all(proc.poll() is None for proc in (busy, other, stopped))
        seen["sleeper signalled"] = signal_when_asleep_in(node, sleeper.pid, nanosleep, "USR2", 2)
        seen["sleeper's end"] = sleeper.wait(10)
        seen["ended signalled"] = signal_when_asleep_in(node, sleeper.pid, nanosleep, "USR2", 0.5)
        return seen
    finally:
        for proc in (sleeper, busy, other, stopped):
            node.stop(proc)
