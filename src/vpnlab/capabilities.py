"""What this machine offers, found by trying rather than by assuming.

Kernel features are probed in a throw-away namespace of our own (creating a
wireguard link, an ESP state, a netem qdisc ...), so a kernel that lacks a
module, or cannot load one, answers exactly as it will during a run.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from .catalog import declared
from .features import FEATURES, Capabilities
from .testbed.state import PROBE_PREFIX
from .tools import find, version


def _ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


def probe_kernel() -> dict[str, bool]:
    """Try each feature in a private namespace; the namespace is removed at once."""
    ns = f"{PROBE_PREFIX}{os.getpid()}"  # `vpnlab clean` removes it if this process dies here
    features = {name: False for name in FEATURES}
    if not _ok(["ip", "netns", "add", ns]):
        return features
    try:
        features["netns"] = True
        run = ["ip", "-n", ns]
        _ok([*run, "link", "set", "lo", "up"])
        features["veth"] = _ok([*run, "link", "add", "pa", "type", "veth", "peer", "name", "pb"])
        features["tun"] = os.path.exists("/dev/net/tun") and _ok([*run, "tuntap", "add", "mode", "tun", "name", "pt"])
        features["tbf"] = _ok(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "tbf",
                               "rate", "1mbit", "burst", "4000", "limit", "10000"])
        if features["veth"]:
            features["netem"] = _ok(["tc", "-n", ns, "qdisc", "add", "dev", "pa", "root", "netem", "delay", "1ms"])
        features["wireguard"] = _ok([*run, "link", "add", "pw", "type", "wireguard"])
        features["gre"] = _ok([*run, "link", "add", "pg", "type", "gre", "remote", "198.18.0.2", "local", "198.18.0.1"])
        features["esp"] = _ok([*run, "xfrm", "state", "add", "src", "198.18.0.1", "dst", "198.18.0.2",
                               "proto", "esp", "spi", "0x100", "mode", "tunnel",
                               "aead", "rfc4106(gcm(aes))", "0x" + "11" * 20, "128"])
        features["l2tp"] = _ok([*run, "l2tp", "show", "tunnel"])
        features["ppp"] = _ppp_available()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return features


def _ppp_available() -> bool:
    try:
        fd = os.open("/dev/ppp", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def _openssl_legacy() -> bool:
    return bool(shutil.which("openssl")) and _ok(["openssl", "list", "-providers", "-provider", "legacy"])


@functools.lru_cache(maxsize=1)
def detect() -> Capabilities:
    return Capabilities(
        kernel=os.uname().release,
        features=probe_kernel() | {"openssl-legacy": _openssl_legacy()},
        tools={name: find(tool) for name, tool in declared().items()},
        hints={name: tool.hint for name, tool in declared().items()},
    )


def cpu_model() -> str:
    """This machine's CPU, as /proc/cpuinfo names it (x86: model name; others: their own key)."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    for key in ("model name", "Model", "cpu model", "Processor", "cpu"):
        for line in info.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return "unknown"


def this_machine() -> dict:
    """What a run on namespaces here records of the machine: its CPU and what its links are."""
    return {"kernel": os.uname().release, "cpu_model": cpu_model(), "cpus": os.cpu_count() or 0,
            "nic": {"interface": "veth pairs between the testbed's namespaces", "driver": "veth",
                    "speed_mbit": -1}}


def tool_versions(commands: set[str] | None = None) -> dict[str, str]:
    """The version of each program (default: every declared one found here), stored with
    every run: the tool's own version line, else its Debian package's version."""
    found = {}
    for name, tool in declared().items():
        if commands is not None and name not in commands:
            continue
        path = find(tool)
        if path:
            found[name] = version(tool, path)
    return found


# The distribution kernel the VM boots has every one of these (Debian builds them as modules).
VM_KERNEL_FEATURES = ("netns", "veth", "tun", "tbf", "netem", "wireguard", "esp", "ppp", "l2tp", "gre")


def vm_capabilities(host: Capabilities, kernel: str) -> Capabilities:
    """What a scenario will find in the VM: this host's tools (the guest runs on its root
    filesystem) with a full distribution kernel."""
    return Capabilities(kernel=kernel, features=host.features | {f: True for f in VM_KERNEL_FEATURES},
                        tools=host.tools, hints=host.hints)
