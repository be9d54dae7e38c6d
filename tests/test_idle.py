"""A process is found idle only while it sleeps in the call it waits in, and a signal meant for it then
is never sent while it is busy or asleep elsewhere (testbed/idle.py; tinc 1.0's node dumps need it)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from vpnlab.testbed.idle import signal_when_asleep_in, wait_asleep
from vpnlab.testbed.node import Node

BUSY = ["sh", "-c", "while :; do :; done"]
IN_SELECT = [sys.executable, "-c", "import select; select.select([], [], [], 60)"]


@pytest.fixture
def node(state, tmp_path):
    name = state.namespace_name("idle")
    state.add_namespace(name)
    subprocess.run(["ip", "netns", "add", name], check=True)
    return Node("left", name, state)


def test_a_signal_waits_for_its_process_asleep_in_the_call_asked_for(node, tmp_path):
    sleeper = node.spawn(["sleep", "60"], tmp_path / "sleep.log")
    busy = node.spawn(BUSY, tmp_path / "busy.log")
    other = node.spawn(IN_SELECT, tmp_path / "select.log")
    try:
        nanosleep = wait_asleep(node, sleeper, 10)
        elsewhere = wait_asleep(node, other, 10)
        assert nanosleep is not None and elsewhere is not None and nanosleep != elsewhere
        assert wait_asleep(node, busy, 0.5) is None
        assert wait_asleep(node, other, 0.5, wanted=nanosleep) is None
        # busy, or asleep in another call: nothing is sent (the default action of USR2 would end them)
        assert not signal_when_asleep_in(node, busy.pid, nanosleep, "USR2", 0.5)
        assert not signal_when_asleep_in(node, other.pid, nanosleep, "USR2", 0.5)
        assert busy.poll() is None and other.poll() is None
        assert signal_when_asleep_in(node, sleeper.pid, nanosleep, "USR2", 2)
        assert sleeper.wait(10) == -signal.SIGUSR2
        assert not signal_when_asleep_in(node, sleeper.pid, nanosleep, "USR2", 0.5)  # it has ended
    finally:
        for proc in (sleeper, busy, other):
            node.stop(proc)
