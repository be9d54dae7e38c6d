"""What a machine offers, as the drivers and the plan ask it: the kernel features vpnlab probes
(FEATURES) and Capabilities, one machine's answer (capabilities.py finds it here, hosts/testbed.py
on real hosts, the VM backend for its guest)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    hints: dict[str, str] = field(default_factory=dict)  # program -> how to get it (its declaration's hint)

    def has(self, feature: str) -> bool:
        return self.features.get(feature, False)

    def tool(self, name: str) -> str | None:
        return self.tools.get(name)

    def hint(self, name: str) -> str:
        """How to get a missing program."""
        return self.hints.get(name, "not declared by any driver or workload")
