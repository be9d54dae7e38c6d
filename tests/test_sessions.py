"""A process vpnlab starts in a session of its own keeps the caller's nice against other sessions."""

import subprocess
import sys
from pathlib import Path

import pytest

# At the nice given: start a process in its own session, print its scheduling group and the caller's.
STARTER = """
import os, sys
from vpnlab.run import sessions
os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[1]))
proc = sessions.start(["sleep", "30"])
try:
    print(open(f"/proc/{proc.pid}/autogroup").read().strip())
    print(open("/proc/self/autogroup").read().strip())
finally:
    proc.kill()
"""


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroups")
@pytest.mark.parametrize("nice", [0, 7])
def test_a_process_in_a_session_of_its_own_has_the_callers_nice(nice):
    out = subprocess.run([sys.executable, "-c", STARTER, str(nice)], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    started, caller = out[0].split(), out[1].split()
    assert started[0] != caller[0], out  # a group of its own
    assert started[1:] == ["nice", str(nice)], out
