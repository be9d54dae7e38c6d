"""Files through the node contract: a namespace node writes under the run's folder only, with the mode
asked for from creation, and removes its folders (the same calls a real host's node answers over SSH,
tested in test_hosts.py)."""

from __future__ import annotations

import os
import stat

import pytest

from vpnlab.core.errors import VpnlabError
from vpnlab.testbed.node import Node


def test_a_node_writes_reads_and_removes_files_under_its_scratch(state):
    node = Node("left", "unused", state)
    path = node.write_file(f"{node.scratch()}/l1-x/keys/psk", "secret\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert node.read_file(path) == b"secret\n"
    node.write_file(path, b"\x00wider", 0o644)  # an existing file takes the mode asked for
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and node.read_file(path) == b"\x00wider"
    node.remove_tree(f"{node.scratch()}/l1-x")
    assert not os.path.exists(f"{node.scratch()}/l1-x")


@pytest.mark.parametrize("where", ["/etc/vpnlab-test", "{scratch}/../escape", "/tmp"])
def test_a_node_refuses_to_write_or_remove_outside_its_scratch(state, where):
    node = Node("left", "unused", state)
    path = where.format(scratch=node.scratch())
    with pytest.raises(VpnlabError, match="not under the run's folder"):
        node.write_file(path, "x")
    with pytest.raises(VpnlabError, match="not under the run's folder"):
        node.remove_tree(path)
    assert not os.path.exists("/etc/vpnlab-test")
