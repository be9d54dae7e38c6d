"""What an event does to the path during a workload (a workload's `events:`), for real, in the
testbed's own namespaces.

- An outage (`link_down_s`): both ends of the WAN drop every frame that reaches them (an nftables
  netdev table on each WAN interface's ingress), so the WAN carries nothing either way, as a cut cable:
  what is sent leaves without an error and vanishes. The interfaces stay up and keep their routes
  (`ip link set down` would remove the routes through them, which nothing puts back).
- An address change (`address_change`): the client's WAN address moves, as on a move from Wi-Fi to LTE.
  Behind a NAT the NAT's outer address moves (the client's own stays); otherwise the left WAN end's.
  The new address is added before the old one goes (promote_secondaries), so the routes through the
  link stay, and the router in the middle, if any, gets its route to it.
- A NAT rebind (`nat_rebind`): the NAT's conntrack is flushed: it forgets every mapping (netns.py).
"""

from __future__ import annotations

OUTAGE_TABLE = "vpnlab_outage"
# the left WAN end's address after an address change (it is .1 before; the router's are .253 and .254)
MOVED_END_ADDRESS = "198.19.0.101"


def outage_ruleset(device: str) -> str:
    """`nft -f -` input that drops every frame arriving on `device` (ARP too) until the table goes."""
    return (f"table netdev {OUTAGE_TABLE} {{\n  chain ingress {{\n    type filter hook ingress device \"{device}\" "
            f"priority -500; policy drop;\n  }}\n}}\n")


def move_address_commands(device: str, old: str, new: str, prefix_len: int) -> list[str]:
    """iproute2 batch lines that move a device's address: the new one first (a secondary, promoted
    when the old one goes: net.ipv4.conf.<device>.promote_secondaries), then the old one away."""
    return [f"addr add {new}/{prefix_len} dev {device}", f"addr del {old}/{prefix_len} dev {device}"]
