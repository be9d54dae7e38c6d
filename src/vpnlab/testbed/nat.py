"""The NAT on the client side of the WAN (a link's `nat: masquerade`, `nat_udp_timeout_s`).

It lives in the router in the middle of the WAN (router.py), which then stands for the client's home
or mobile router: what leaves towards the far end (its right interface) is masqueraded to the router's
own address there, and what comes from the far end reaches the left end only as the reply to something
the left end sent (conntrack's established/related), as with any NAT that has no port forwarded. The
far end therefore sees the NAT's outer address, never the client's, and a mapping the NAT forgot (idle
longer than its UDP timeout, or flushed: an event's `nat_rebind`) leaves the client unreachable from it
until the client sends again.

The UDP timeout is the router namespace's own conntrack setting (nf_conntrack_udp_timeout for a flow
seen one way, _udp_timeout_stream for one seen both ways; per namespace since Linux 4.x), read back
after it is set: a kernel whose conntrack keeps it global would otherwise change every namespace's.
"""

from __future__ import annotations

from ..core.errors import VpnlabError
from . import netns, router

TABLE = "vpnlab_nat"
NAT_UDP_TIMEOUT_MAX_S = 3600
OUTER = router.RIGHT        # towards the far end: the masqueraded side
INNER = router.LEFT         # towards the client
TIMEOUT_KEYS = ("net.netfilter.nf_conntrack_udp_timeout", "net.netfilter.nf_conntrack_udp_timeout_stream")
# The NAT's outer address after an `address_change` event (router.py's own are .253 and .254)
MOVED_OUTER_ADDRESS = "198.19.0.200"


def nft_ruleset() -> str:
    """`nft -f -` input: masquerade what leaves by the outer interface; from it, let through to the inner
    side only what belongs to a connection the inner side opened."""
    return (f"table ip {TABLE} {{\n"
            f"  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n"
            f"    oifname \"{OUTER}\" masquerade\n  }}\n"
            f"  chain forward {{\n    type filter hook forward priority filter; policy accept;\n"
            f"    iifname \"{OUTER}\" oifname \"{INNER}\" ct state != {{ established, related }} counter drop\n  }}\n"
            f"}}\n")


def set_udp_timeout(node, seconds: int) -> None:
    """Set the NAT namespace's UDP mapping timeout, and check that it holds there (conntrack is loaded in
    the namespace once its NAT table exists)."""
    node.sysctl(**{key: seconds for key in TIMEOUT_KEYS})
    found = {key: netns.read_sysctl(node.namespace, key) for key in TIMEOUT_KEYS}
    if any(value != str(seconds) for value in found.values()):
        raise VpnlabError(f"this kernel does not let a namespace set its own UDP NAT timeout (nat_udp_timeout_s): "
                          f"after setting {seconds} s in {node.namespace}, {found}")

