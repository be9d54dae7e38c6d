"""An inventory has limits and types, as a study file does: its size, its ports, the time an
executable one may take. Each is refused with the field named (StudyError: exit 2 on the command
line), never a crash; real files, a real sparse 20 MB inventory, a real hanging program."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from vpnlab.core.errors import StudyError
from vpnlab.hosts import inventory
from vpnlab.hosts.inventory import load_inventory


def write(tmp_path, text: str):
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("port, why", [(70000, "is not a TCP port"), (-1, "is not a TCP port"),
                                       (0, "is not a TCP port"), (10**20, "is not a TCP port"),
                                       (22.5, "is not a whole number"), ("'٣٣'", "is not a whole number"),
                                       ("true", "is not a whole number")])
def test_a_port_that_is_no_tcp_port_is_refused_naming_the_host(tmp_path, port, why):
    path = write(tmp_path, f"all:\n  hosts:\n    gw: {{ansible_host: 198.18.0.1, ansible_port: {port}}}\n")
    with pytest.raises(StudyError) as error:
        load_inventory(path)
    assert f"host gw: ansible_port: " in str(error.value) and why in str(error.value)


def test_a_port_given_as_digits_is_read(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    gw: {ansible_host: 198.18.0.1, ansible_port: '2222'}\n")
    assert load_inventory(path)["gw"].port == 2222


def test_an_inventory_too_big_is_refused_before_ansible_reads_it(tmp_path):
    path = tmp_path / "big.ini"
    with open(path, "wb") as fh:
        fh.truncate(20 << 20)  # sparse: 20 MB of nothing, not 20 MB of disk
    started = time.monotonic()
    with pytest.raises(StudyError, match=r"20,971,520 bytes, more than an inventory may hold here \(16 MiB\)"):
        load_inventory(path)
    assert time.monotonic() - started < 2  # refused by its size, not after Ansible took it in


def test_an_executable_inventory_that_hangs_is_stopped_with_what_it_started(tmp_path, monkeypatch):
    marker = f"vpnlab-test-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "hosts.sh"
    script.write_text(f"#!/bin/bash\nexec -a {marker} sleep 600\n")
    script.chmod(0o755)
    monkeypatch.setattr(inventory, "INVENTORY_TIMEOUT_S", 10)  # ansible-inventory itself takes seconds under load
    monkeypatch.delenv("VPNLAB_EXEC_LOG")  # what Ansible runs is the user's inventory, not a program vpnlab needs
    started = time.monotonic()
    with pytest.raises(StudyError, match="did not finish reading it within 10 s"):
        load_inventory(script)
    assert time.monotonic() - started < 60
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"the inventory's program is still running: {left}"


def test_the_command_line_says_so_with_exit_2(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    gw: {ansible_host: 198.18.0.1, ansible_port: 70000}\n")
    proc = subprocess.run([sys.executable, "-m", "vpnlab", "hosts", "doctor", "-i", str(path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stderr
    assert "ansible_port: 70000 is not a TCP port" in proc.stderr and "Traceback" not in proc.stderr
