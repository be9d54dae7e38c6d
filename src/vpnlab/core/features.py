"""What a machine offers, as the drivers and the plan ask it: the kernel features vpnlab probes
(FEATURES), the one probe that finds them (KERNEL_PROBE: run by capabilities.py on this machine
and in a VM guest, over SSH on real hosts, by `hosts prepare`'s playbook) and Capabilities, one
machine's answer."""

from __future__ import annotations

import json
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
    "nat-timeout": "a namespace's own conntrack UDP timeout beside an nftables masquerade (a link's nat_udp_timeout_s)",
}

# The kernel pieces, found by trying each inside a throw-away network namespace ($1, else
# vlprobe<its PID>; removed on any exit), so a kernel that lacks a module, or cannot load one,
# answers exactly as it will during a run, and the machine's own network is never touched; then
# whether a masquerade there (which loads conntrack into the namespace) gets a UDP timeout of the namespace's
# own (nat-timeout); then its kernel release, cores and CPU model (x86: model name; others: their own key). Prints one JSON
# object (parse_probe). POSIX sh, iproute2, coreutils, grep, sed and, for its legacy provider, openssl.
KERNEL_PROBE = r"""#!/bin/sh
ns=$1; [ -n "$ns" ] || ns=vlprobe$$
netns=false veth=false tun=false tbf=false netem=false wireguard=false gre=false esp=false l2tp=false nat_timeout=false
if ip netns add "$ns" 2>/dev/null; then
  trap 'ip netns del "$ns" 2>/dev/null' EXIT
  netns=true
  ip -n "$ns" link set lo up
  ip -n "$ns" link add vlpa type veth peer name vlpb 2>/dev/null && veth=true
  [ -c /dev/net/tun ] && ip -n "$ns" tuntap add mode tun name vlpt 2>/dev/null && tun=true
  tc -n "$ns" qdisc add dev lo root tbf rate 1mbit burst 4000 limit 10000 2>/dev/null && tbf=true
  tc -n "$ns" qdisc add dev vlpa root netem delay 1ms 2>/dev/null && netem=true
  ip -n "$ns" link add vlpw type wireguard 2>/dev/null && wireguard=true
  ip -n "$ns" link add vlpg type gre remote 198.18.0.2 local 198.18.0.1 2>/dev/null && gre=true
  ip -n "$ns" xfrm state add src 198.18.0.1 dst 198.18.0.2 proto esp spi 0x100 mode tunnel aead 'rfc4106(gcm(aes))' 0x1111111111111111111111111111111111111111 128 2>/dev/null && esp=true
  ip -n "$ns" l2tp show tunnel >/dev/null 2>&1 && l2tp=true
  printf 'table ip vlpn {\n chain p {\n  type nat hook postrouting priority 100\n  masquerade\n }\n}\n' | ip netns exec "$ns" nft -f - 2>/dev/null \
    && ip netns exec "$ns" sh -c 'echo 7 > /proc/sys/net/netfilter/nf_conntrack_udp_timeout' 2>/dev/null \
    && [ "$(ip netns exec "$ns" cat /proc/sys/net/netfilter/nf_conntrack_udp_timeout)" = 7 ] \
    && [ "$(cat /proc/sys/net/netfilter/nf_conntrack_udp_timeout 2>/dev/null)" != 7 ] && nat_timeout=true
fi
ppp=false; [ -c /dev/ppp ] && sh -c ': <>/dev/ppp' 2>/dev/null && ppp=true
legacy=false; openssl list -providers -provider legacy >/dev/null 2>&1 && legacy=true
printf '{"kernel": "%s", "cpus": %s, "cpu_model": "' "$(uname -r)" "$(nproc 2>/dev/null || echo 0)"
for key in 'model name' Model 'cpu model' Processor cpu; do grep -m 1 "^$key[[:space:]]*:[[:space:]]*[^[:space:]]" /proc/cpuinfo; done | head -n 1 | sed -e 's/^[^:]*:[[:space:]]*//' -e 's/[\\"]/\\&/g' | tr -d '\n'
printf '", "features": {"netns": %s, "veth": %s, "tun": %s, "tbf": %s, "netem": %s, "wireguard": %s, "gre": %s, "esp": %s, "l2tp": %s, "ppp": %s, "openssl-legacy": %s, "nat-timeout": %s}}\n' "$netns" "$veth" "$tun" "$tbf" "$netem" "$wireguard" "$gre" "$esp" "$l2tp" "$ppp" "$legacy" "$nat_timeout"
"""


def probe_argv(namespace: str = "") -> list[str]:
    """The probe as a command (the namespace it may create: a name of the caller's, else its own)."""
    return ["sh", "-c", KERNEL_PROBE, "sh", *([namespace] if namespace else [])]


def parse_probe(answer: str | dict) -> dict:
    """The probe's answer (its output, or that parsed already, as the playbook returns it): kernel,
    cpu_model, cpus and features (every one of FEATURES, true or false). ValueError when it is not
    the probe's."""
    found = json.loads(answer) if isinstance(answer, str) else answer
    if not isinstance(found, dict) or not isinstance(found.get("features"), dict):
        raise ValueError(f"not the kernel probe's answer: {str(answer)[:200]!r}")
    found["features"] = {name: found["features"].get(name) is True for name in FEATURES}
    found["cpu_model"] = found.get("cpu_model") or "unknown"
    return found


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
