"""A process is found idle only while it sleeps in the call it waits in, and a signal meant for it then
is never sent while it is busy, asleep elsewhere or stopped (testbed/idle.py; tinc 1.0's node dumps
need it), in a namespace here (idle_checks.py; test_hosts.py: the same on a host over SSH)."""

from __future__ import annotations

import subprocess

import pytest

from idle_checks import EXPECTED, observe
from vpnlab.testbed.node import Node


@pytest.fixture
def node(state, tmp_path):
    name = state.namespace_name("idle")
    state.add_namespace(name)
    subprocess.run(["ip", "netns", "add", name], check=True)
    return Node("left", name, state)


def test_a_signal_waits_for_its_process_asleep_in_the_call_asked_for(node, tmp_path):
    assert observe(node, tmp_path) == EXPECTED
