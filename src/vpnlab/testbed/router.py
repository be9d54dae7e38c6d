"""The router in the middle of the WAN: the path's MTU and its filtered ICMP (a link's `mtu`, `icmp`).

Only a link that sets either gets one; every other WAN stays one veth between its two ends. The router
sits between the two WAN ends without changing their addresses or routes: each end keeps its address
on the WAN's /24 and still finds the other on the link, because the router answers ARP for the far end
(proxy ARP) and routes each end's /32 out of the interface towards it. It has an address of its own
on each side (198.19.0.253 and .254: the source of the ICMP errors it sends).

  left end l<wan> ==== w0 [router] w1 ==== l<wan> right end

The MTU is the MTU of its routes to the two ends, not of its interfaces: a veth drops, silently, a
frame bigger than the MTU of the interface that receives it, which would make every too-big packet
vanish at the router's door instead of being refused with an ICMP error there (the kernel honours a
route's MTU when it forwards, and fragments to it what has no DF bit). Neither end's own interfaces
change: their MTU stays the veth's 1500, as a VPN host's would on a path with a narrower hop.

`icmp: blocked` drops, in the router's own namespace (nftables), the ICMP "fragmentation needed" (type 3
code 4) and ICMPv6 "packet too big" (type 2) it would send: locally generated, they pass its OUTPUT
hook (forwarded ones, FORWARD: both are filtered). The router still counts them as sent
(IcmpOutDestUnreachs), so what was dropped is read from the rules' own counters (`dropped_icmp`).
"""

from __future__ import annotations

import json
import re

PATH_MTU_MIN = 576     # the smallest datagram every IPv4 host must take (RFC 791)
PATH_MTU_MAX = 9000    # jumbo frames
IPV6_MTU_MIN = 1280    # IPv6's minimum link MTU (RFC 8200)
LEFT, RIGHT = "w0", "w1"  # the router's interfaces, towards the left and the right WAN end
ADDRESSES = {LEFT: "198.19.0.253", RIGHT: "198.19.0.254"}
TABLE = "vpnlab_path"


def end_route(link, address: str, dev: str) -> str:
    """The router's route to a WAN end's address, out of the interface towards it, at the path's MTU."""
    return f"route add {address}/32 dev {dev}" + (f" mtu lock {link.mtu}" if link.mtu else "")


def ip_commands(link, left_ip: str, right_ip: str, behind: tuple[str, str]) -> list[str]:
    """iproute2 batch lines for the router's namespace, its interfaces already there: each WAN end on
    its side, and the prefix `behind` it (topology.py: the links left and right of the WAN) via it."""
    mtu = f" mtu lock {link.mtu}" if link.mtu else ""
    cmds = ["link set lo up"]
    for dev in (LEFT, RIGHT):
        cmds += [f"addr add {ADDRESSES[dev]}/32 dev {dev}", f"link set {dev} up"]
    return cmds + [end_route(link, left_ip, LEFT), end_route(link, right_ip, RIGHT),
                   f"route add {behind[0]} via {left_ip} dev {LEFT}{mtu}",
                   f"route add {behind[1]} via {right_ip} dev {RIGHT}{mtu}"]


def sysctls() -> dict[str, int]:
    """Forwarding, proxy ARP answered at once (by default after up to 0.8 s, which lost first packets), no
    reverse-path filter, no IPv6 (the WAN carries IPv4, as its ends do)."""
    settings = {"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0, "net.ipv4.conf.default.rp_filter": 0,
                "net.ipv4.conf.all.proxy_arp": 1}
    for dev in (LEFT, RIGHT):
        settings |= {f"net.ipv4.conf.{dev}.proxy_arp": 1, f"net.ipv4.conf.{dev}.rp_filter": 0,
                     f"net.ipv4.neigh.{dev}.proxy_delay": 0, f"net.ipv6.conf.{dev}.disable_ipv6": 1}
    return settings


ICMP_TOO_BIG = ("icmp type destination-unreachable icmp code frag-needed", "icmpv6 type packet-too-big")


def nft_ruleset() -> str:
    """`nft -f -` input that drops the ICMP errors saying a packet is too big, sent by the router (output)
    or passing through it (forward), each rule counting what it dropped."""
    rules = "".join(f"    {match} counter drop\n" for match in ICMP_TOO_BIG)
    chains = "".join(f"  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n{rules}  }}\n"
                     for hook in ("output", "forward"))
    return f"table inet {TABLE} {{\n{chains}}}\n"


def dropped_icmp(ruleset_json: str) -> int:
    """Packets the ruleset's rules dropped, from `nft -j list table inet vpnlab_path`."""
    total = 0
    for item in json.loads(ruleset_json).get("nftables", []):
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                total += int(expr["counter"]["packets"])
    return total


_FIELD = re.compile(r"^Ip:")


def fragments_created(proc_net_snmp: str) -> int:
    """IPv4 fragments a namespace created (its /proc/net/snmp FragCreates)."""
    header, numbers = [line.split() for line in proc_net_snmp.splitlines() if _FIELD.match(line)][:2]
    return int(numbers[header.index("FragCreates")])
