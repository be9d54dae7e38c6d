"""A process vpnlab starts in a session of its own keeps the caller's nice against other sessions."""

import subprocess
import sys

import pytest

# At the nice given: start a process in its own session; print its scheduling group (the kernel's
# autogroup, empty where there is none), the caller's, and the process's own nice.
STARTER = """
import os, sys
from vpnlab.core import sessions
def group(pid):
    try:
        return open(f"/proc/{pid}/autogroup").read().strip()
    except FileNotFoundError:  # a kernel built without autogroups
        return ""
os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[1]))
proc = sessions.start(["sleep", "30"])
try:
    print(group(proc.pid))
    print(group("self"))
    print(os.getpriority(os.PRIO_PROCESS, proc.pid))
finally:
    proc.kill()
"""


@pytest.mark.parametrize("nice", [0, 7])
def test_a_process_in_a_session_of_its_own_has_the_callers_nice(nice):
    run = subprocess.run([sys.executable, "-c", STARTER, str(nice)], capture_output=True, text=True, check=True)
    started, caller, own_nice = run.stdout.split("\n")[:3]
    assert own_nice == str(nice), run.stdout
    # Where the kernel put the new session in a group of its own, that group has the caller's nice. Where
    # it did not (autogroups off, or a kernel that lists none), the process's own nice is what counts.
    if started:
        assert started != caller, run.stdout  # a group of its own (a shared one prints the same line)
        assert started.split()[1:] == ["nice", str(nice)], run.stdout
