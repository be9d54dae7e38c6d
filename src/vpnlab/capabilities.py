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
from dataclasses import dataclass, field
from pathlib import Path

from .testbed.state import NAMESPACE_PREFIX
from .unpacked import package_folder

PLUTO = "/usr/libexec/ipsec/pluto"  # libreswan's IKE daemon, installed or unpacked

TOOLS = {
    # binary: Debian package that provides it
    "ip": "iproute2",
    "tc": "iproute2",
    "iperf3": "iperf3",
    "ping": "iputils-ping",
    "tcpdump": "tcpdump",
    "sysctl": "procps",
    "wg": "wireguard-tools",
    "wireguard-go": "wireguard-go",
    "openvpn": "openvpn",
    "openssl": "openssl",
    "charon": "strongswan-charon",
    "swanctl": "strongswan-swanctl",
    "ocserv": "ocserv",
    "openconnect": "openconnect",
    "pptpd": "pptpd",
    "pptp": "pptp-linux",
    "pppd": "ppp",
    "certutil": "libnss3-tools",
    "pluto": "libreswan (./bootstrap.sh unpacks it privately: it conflicts with strongSwan's packages)",
    "xl2tpd": "xl2tpd",
    "qemu-system-x86_64": "qemu-system-x86",
    "nginx": "nginx-light",
    "curl": "curl",
    "vsftpd": "vsftpd",
    "sshd": "openssh-server",
    "scp": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dovecot": "dovecot-pop3d",
    "dnsmasq": "dnsmasq-base",
    "dig": "bind9-dnsutils",
    "bash": "bash",
}

# Where Debian installs daemons that are not on PATH.
EXTRA_PATHS = {"charon": "/usr/lib/ipsec/charon", "sshd": "/usr/sbin/sshd", "vsftpd": "/usr/sbin/vsftpd",
               "nginx": "/usr/sbin/nginx", "dovecot": "/usr/sbin/dovecot", "dnsmasq": "/usr/sbin/dnsmasq",
               "pluto": PLUTO}

FEATURES = {
    "netns": "network namespaces",
    "veth": "veth pairs",
    "tun": "TUN/TAP devices (userspace VPN data planes)",
    "tbf": "tbf qdisc (rate limit)",
    "netem": "netem qdisc (delay, jitter, loss)",
    "wireguard": "kernel WireGuard",
    "esp": "kernel IPsec ESP (xfrm)",
    "ppp": "PPP (/dev/ppp)",
    "l2tp": "kernel L2TP",
    "gre": "GRE tunnels",
    "openssl-legacy": "OpenSSL legacy provider (Blowfish, single DES)",
}


@dataclass(frozen=True)
class Capabilities:
    kernel: str
    features: dict[str, bool]
    tools: dict[str, str | None] = field(default_factory=dict)

    def has(self, feature: str) -> bool:
        return self.features.get(feature, False)

    def tool(self, name: str) -> str | None:
        return self.tools.get(name)


def find_tool(name: str) -> str | None:
    path = shutil.which(name)
    if path:
        return path
    extra = EXTRA_PATHS.get(name)
    if not extra:
        return None
    if os.access(extra, os.X_OK):
        return extra
    # An unpacked package's libraries come from other packages: it counts only if it runs.
    unpacked = package_folder(TOOLS[name].split()[0]) / extra.lstrip("/")
    if os.access(unpacked, os.X_OK) and _ok([str(unpacked), "--version"]):
        return str(unpacked)
    return None


def _ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


def probe_kernel() -> dict[str, bool]:
    """Try each feature in a private namespace; the namespace is removed at once."""
    ns = f"{NAMESPACE_PREFIX}probe{os.getpid()}"
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
    return bool(find_tool("openssl")) and _ok(["openssl", "list", "-providers", "-provider", "legacy"])


@functools.lru_cache(maxsize=1)
def detect() -> Capabilities:
    return Capabilities(
        kernel=os.uname().release,
        features=probe_kernel() | {"openssl-legacy": _openssl_legacy()},
        tools={name: find_tool(name) for name in TOOLS},
    )


def tool_versions() -> dict[str, str]:
    """Versions of the tools that shape results, stored with every run."""
    commands = {
        "iperf3": ["iperf3", "--version"],
        "iproute2": ["ip", "-V"],
        "wireguard-go": ["wireguard-go", "--version"],
        "wg": ["wg", "--version"],
        "openvpn": ["openvpn", "--version"],
        "charon": ["swanctl", "--version"],
        "ocserv": ["ocserv", "--version"],
        "openconnect": ["openconnect", "--version"],
    }
    versions = {}
    for name, argv in commands.items():
        if not find_tool(argv[0]):
            continue
        proc = subprocess.run(argv, capture_output=True, text=True)
        text = (proc.stdout or proc.stderr).strip().splitlines()
        versions[name] = text[0] if text else "unknown"
    return versions


# The distribution kernel the VM boots has every one of these (Debian builds them as modules).
VM_KERNEL_FEATURES = ("netns", "veth", "tun", "tbf", "netem", "wireguard", "esp", "ppp", "l2tp", "gre")


def vm_capabilities(host: Capabilities, kernel: str) -> Capabilities:
    """What a scenario will find in the VM: this host's tools (the guest runs on its root
    filesystem) with a full distribution kernel."""
    return Capabilities(kernel=kernel, features=host.features | {f: True for f in VM_KERNEL_FEATURES},
                        tools=host.tools)
