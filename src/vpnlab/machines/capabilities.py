"""What this machine offers, found by trying rather than by assuming: its kernel pieces by the
probe every machine gets (features.KERNEL_PROBE, run here), its programs by their declarations."""

from __future__ import annotations

import functools
import os
import signal
import subprocess

from ..catalog import declared
from ..core.signals import held
from ..core.features import Capabilities, parse_probe, probe_argv
from ..testbed.state import PROBE_PREFIX
from ..tools import find, versions


@functools.lru_cache(maxsize=1)
def probe() -> dict:
    """This machine (or the VM guest this runs in) as KERNEL_PROBE finds every machine: kernel, CPU
    model, cores and kernel pieces. Its namespace is named for this process: `vpnlab clean` removes
    it if the process dies meanwhile."""
    namespace = f"{PROBE_PREFIX}{os.getpid()}"
    shown = None
    try:
        with held():  # a signal while Popen starts the probe is raised once the probe is ours to end
            shown = subprocess.Popen(probe_argv(namespace), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        answer, _ = shown.communicate()
    except BaseException:
        # a signal (vpnlab turns it into an exception) ends the probe before its EXIT trap can
        # remove the namespace: end the probe and its `ip`, then remove it here
        if shown is not None:
            os.killpg(shown.pid, signal.SIGKILL)
            shown.wait()
            shown.stdout.close()
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        raise
    return parse_probe(answer)


@functools.lru_cache(maxsize=1)
def detect() -> Capabilities:
    found = probe()
    return Capabilities(
        kernel=found["kernel"],
        features=found["features"],
        tools={name: find(tool) for name, tool in declared().items()},
        hints={name: tool.hint for name, tool in declared().items()},
    )


def this_machine() -> dict:
    """What a run on namespaces here records of the machine: its CPU and what its links are."""
    found = probe()
    return {"kernel": found["kernel"], "cpu_model": found["cpu_model"], "cpus": found["cpus"],
            "nic": {"interface": "veth pairs between the testbed's namespaces", "driver": "veth",
                    "speed_mbit": -1}}


def tool_versions(commands: set[str] | None = None) -> dict[str, str]:
    """The version of each program (default: every declared one found here), stored with
    every run: the tool's own version line, else its Debian package's version."""
    wanted = {name: tool for name, tool in declared().items() if commands is None or name in commands}
    return versions({name: (tool, path) for name, tool in wanted.items() if (path := find(tool))})


# The distribution kernel the VM boots has every one of these (Debian builds them as modules).
VM_KERNEL_FEATURES = ("netns", "veth", "tun", "tbf", "netem", "wireguard", "esp", "ppp", "l2tp", "gre")


def vm_capabilities(host: Capabilities, kernel: str) -> Capabilities:
    """What a scenario will find in the VM: this host's tools (the guest runs on its root
    filesystem) with a full distribution kernel."""
    return Capabilities(kernel=kernel, features=host.features | {f: True for f in VM_KERNEL_FEATURES},
                        tools=host.tools, hints=host.hints)
