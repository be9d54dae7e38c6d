"""Topologies as chains of namespaces ("Links connect nodes").

Every topology is a line of nodes joined by veth links; link i joins node i and
node i+1 (node i is .1 on it, node i+1 is .2). One link is the WAN and is shaped.
Tunnel layer L (0 = outermost) joins two gateways.

  remote-access           client =WAN= gw -- server
  site-to-site            host-a -- gw-a =WAN= gw-b -- host-b
  site-to-site, nested    host-a -- gw-a1 -- gw-a0 =WAN= gw-b0 -- gw-b1 -- host-b

Addresses (all inside 198.18.0.0/15, RFC 2544's benchmarking range):
  the WAN                   198.19.0.0/24
  tunnel layer L            198.19.(1+L).0/24, inside the tunnel
  links left of the WAN     198.18.i.0/24, counted from host-a: all within 198.18.0.0/17
  links right of the WAN    198.18.(128+k).0/24, counted from host-b: all within 198.18.128.0/17
  Tailscale's tailnet       198.19.254.0/24 and 2001:2:0:fe::/64 (drivers/tailscale.py)
so that what lies behind each tunnel end is one prefix that contains an address
of that end (IPsec traffic selectors want both).
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field

from ..core.errors import CommandError, VpnlabError
from .cgroups import Placement
from .contract import Node
from .node import Node as NamespaceNode
from . import faults, netns
from . import nat as client_nat
from . import router as path_router
from .shaping import shape_commands
from .state import RunState

WAN_NET = ipaddress.ip_network("198.19.0.0/24")
LEFT_HALF = ipaddress.ip_network("198.18.0.0/17")
RIGHT_HALF = ipaddress.ip_network("198.18.128.0/17")
MAX_LAYERS = 2  # deeper nesting would need more than one prefix behind a tunnel end
# The roles a study puts on real hosts (its `hosts:`): the two ends of the WAN, left then right.
HOST_ROLES = {"remote-access": ("client", "gateway"), "site-to-site": ("left", "right")}


def tunnel_subnet(layer: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"198.19.{1 + layer}.0/24")


def chain_routes(layout: Layout, n: int, address, wan: int | None = None) -> list[str]:
    """`ip route` commands of node n of the chain: a link further left via the left neighbour, one
    further right via the right one; tunnel-internal subnets too, for replies to a remote-access
    client's tunnel address. With `wan`, no route crosses that link (real hosts route it themselves)."""
    cmds = []
    for j in range(layout.links):
        if j != wan and j < n - 1 and n - 1 != wan:
            cmds.append(f"route add {layout.subnet(j)} via {address(n - 1, n - 1)}")
        elif j != wan and j > n and n != wan:
            cmds.append(f"route add {layout.subnet(j)} via {address(n + 1, n)}")
    for layer, (a, b) in enumerate(layout.tunnels):
        if n > b:
            cmds.append(f"route add {tunnel_subnet(layer)} via {address(n - 1, n - 1)}")
        elif n < a:
            cmds.append(f"route add {tunnel_subnet(layer)} via {address(n + 1, n)}")
    return cmds


@dataclass(frozen=True)
class Layout:
    """Where the nodes, the WAN and each tunnel layer sit in the chain."""

    roles: list[str]
    wan: int                          # index of the WAN link
    tunnels: list[tuple[int, int]]    # per layer, outermost first: (left node, right node)

    @classmethod
    def for_topology(cls, topology: str, layers: int) -> "Layout":
        if layers > MAX_LAYERS:
            raise ValueError(f"at most {MAX_LAYERS} nested tunnel layers")
        if topology == "remote-access":
            if layers > 1:
                raise ValueError("nested tunnels need the site-to-site topology")
            return cls(["client", "gw", "server"], wan=0, tunnels=[(0, 1)][:layers])
        depth = max(layers, 1)
        left = [f"gw-a{k}" for k in reversed(range(depth))]
        right = [f"gw-b{k}" for k in range(depth)]
        roles = ["host-a", *left, *right, "host-b"]
        return cls(roles, wan=depth, tunnels=[(depth - k, depth + 1 + k) for k in range(layers)])

    @property
    def links(self) -> int:
        return len(self.roles) - 1

    def subnet(self, link: int) -> ipaddress.IPv4Network:
        if link == self.wan:
            return WAN_NET
        if link < self.wan:
            return ipaddress.ip_network(f"198.18.{link}.0/24")
        return ipaddress.ip_network(f"198.18.{128 + self.links - 1 - link}.0/24")


@dataclass
class TunnelSite:
    """One end of a tunnel layer as its driver sees it."""

    node: Node
    underlay_ip: str        # address the other end sends outer packets to
    tunnel_ip: str          # this end's address inside the tunnel (/24)
    subnets: list[str]      # the links behind this end, reached through the tunnel
    prefix: str | None      # one prefix covering exactly those links (None: nothing behind)


def covering_prefix(subnets: list[str], half: ipaddress.IPv4Network, side_links: int) -> str | None:
    if not subnets:
        return None
    if len(subnets) == side_links:
        return str(half)
    collapsed = list(ipaddress.collapse_addresses(ipaddress.ip_network(s) for s in subnets))
    if len(collapsed) != 1:
        raise ValueError(f"{subnets} are not one prefix")
    return str(collapsed[0])


@dataclass
class Testbed:
    state: RunState
    layout: Layout
    nodes: list[Node] = field(default_factory=list)
    placement: Placement | None = None  # the tunnel ends' cgroups and cores (placement.py)
    router: Node | None = None  # in the middle of the WAN, for a link's mtu or icmp (router.py)
    icmp_filtered: bool = False  # its nftables drop the ICMP errors saying a packet is too big
    nat: bool = False  # it is the client side's NAT (nat.py)
    link: object = None  # the link as built (study.Link)

    # -- addressing ------------------------------------------------------
    # Each node's interface on link i is called l<i> (names are per namespace).
    def address(self, node: int, link: int) -> str:
        host = 1 if node == link else 2
        return str(self.layout.subnet(link).network_address + host)

    @property
    def source(self) -> Node:
        return self.nodes[0]

    @property
    def sink(self) -> Node:
        return self.nodes[-1]

    @property
    def sink_ip(self) -> str:
        return self.address(len(self.nodes) - 1, len(self.nodes) - 2)

    @property
    def wan_nodes(self) -> tuple[Node, Node]:
        return self.nodes[self.layout.wan], self.nodes[self.layout.wan + 1]

    remote = False  # on real hosts: hosts/testbed.py

    def wan_device(self, side: int) -> str:
        """The WAN's interface at its left (0) or right (1) end."""
        return f"l{self.layout.wan}"

    def wan_filter(self, side: int) -> list[str]:
        """A capture filter for what on that interface is the testbed's (here: everything)."""
        return []

    def tunnel_sites(self, layer: int) -> tuple[TunnelSite, TunnelSite]:
        a, b = self.layout.tunnels[layer]
        net = tunnel_subnet(layer)
        links = range(self.layout.links)
        wan = self.layout.wan
        left_nets = [str(self.layout.subnet(j)) for j in links if j < a]
        right_nets = [str(self.layout.subnet(j)) for j in links if j >= b]
        left = TunnelSite(self.nodes[a], self.address(a, a), str(net.network_address + 1), left_nets,
                          covering_prefix(left_nets, LEFT_HALF, wan))
        right = TunnelSite(self.nodes[b], self.address(b, b - 1), str(net.network_address + 2), right_nets,
                           covering_prefix(right_nets, RIGHT_HALF, self.layout.links - wan - 1))
        return left, right

    # -- building ----------------------------------------------------------
    @classmethod
    def build(cls, state: RunState, layout: Layout, link, tag: str, pin: bool = True,
              cores: int | None = None) -> "Testbed":
        """Create namespaces, veth links, addresses, routes and WAN shaping.

        `tag` keeps namespaces of consecutive scenarios apart in one run; `pin` False leaves the
        tunnel ends unpinned even where there are cores enough (the study's pin_tunnel_ends); `cores`
        pins each end to that many (a VPN entry's `cores`).
        """
        bed = cls(state, layout, link=link)
        names = [state.namespace_name(f"{tag}{role}") for role in layout.roles]
        if getattr(link, "needs_router", False):
            names.append(state.namespace_name(f"{tag}router"))
        for name in names:
            state.add_namespace(name)  # recorded first: a crash right after still gets cleaned
        # one process for all (each costs a third of a second under emulation, in a VM guest)
        _run(["ip", "-batch", "-"], "".join(f"netns add {name}\n" for name in names))
        bed.nodes += [NamespaceNode(role, name, state) for role, name in zip(layout.roles, names)]
        if len(names) > len(layout.roles):
            bed.router = NamespaceNode("router", names[-1], state)
        bed.placement = Placement.create(state, layout, bed.nodes, pin=pin, per_end=cores)
        count = len(bed.nodes)
        for i in range(count - 1):
            left, right = bed.nodes[i], bed.nodes[i + 1]
            # Created inside the left namespace, peer moved straight into the right one:
            # nothing ever exists in the default namespace.
            if i == layout.wan and bed.router:
                left.ip(f"link add l{i} type veth peer name {path_router.LEFT} netns {bed.router.namespace}")
                bed.router.ip(f"link add {path_router.RIGHT} type veth peer name l{i} netns {right.namespace}")
            else:
                left.ip(f"link add l{i} type veth peer name l{i} netns {right.namespace}")
        for n, node in enumerate(bed.nodes):
            links = [j for j in (n - 1, n) if 0 <= j < count - 1]
            node.sysctl(**{
                "net.ipv4.ip_forward": 1,
                "net.ipv4.conf.all.rp_filter": 0,
                "net.ipv4.conf.default.rp_filter": 0,
                # iperf3 -w is silently capped by these; raise them so a window sweep is real.
                "net.core.rmem_max": 64 * 1024 * 1024,
                "net.core.wmem_max": 64 * 1024 * 1024,
                # The links carry IPv4 only. IPv6's start-up on a link that comes up (MLD reports, DAD,
                # router solicitations in its first seconds) counted in the WAN's frames by how soon
                # after it a workload began: pings through a tunnel averaged 5-8% smaller frames on this
                # host than in a VM guest whose set-up had outlasted them (bench emulation). As mesh.py.
                **{f"net.ipv6.conf.l{j}.disable_ipv6": 1 for j in links},
            })
            cmds = ["link set lo up"]
            for j in links:
                cmds.append(f"addr add {bed.address(n, j)}/24 dev l{j}")
                cmds.append(f"link set l{j} up")
            node.ip(*cmds, *chain_routes(layout, n, bed.address))
        left, right = bed.wan_nodes
        for node in (left, right):
            # A wire carries frames of at most the MTU: no veth segmentation offload on the WAN, so
            # its counters (and tbf) see the packets a real link would carry.
            node.run(["ethtool", "-K", f"l{layout.wan}", "tso", "off", "gso", "off", "gro", "off"])
            node.tc(*shape_commands(f"l{layout.wan}", link))
        if bed.router:
            bed._build_router(link)
        return bed

    def _build_router(self, link) -> None:
        """The router between the WAN's ends: proxy ARP, the path's MTU on its routes, ICMP filtered
        as the link says (router.py), the client side's NAT (nat.py)."""
        wan = self.layout.wan
        router = self.router
        router.sysctl(**path_router.sysctls())
        router.ip(*path_router.ip_commands(link, self.address(wan, wan), self.address(wan + 1, wan),
                                           (str(LEFT_HALF), str(RIGHT_HALF))))
        for dev in (path_router.LEFT, path_router.RIGHT):  # it forwards the packets as they came
            router.run(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"])
        if link.icmp == "blocked":
            router.run(["nft", "-f", "-"], input=path_router.nft_ruleset())
            self.icmp_filtered = True
        if link.behind_nat:
            router.run(["nft", "-f", "-"], input=client_nat.nft_ruleset())
            self.nat = True
            if link.nat_udp_timeout_s:
                client_nat.set_udp_timeout(router, link.nat_udp_timeout_s)

    def dropped_icmp(self) -> int:
        """ICMP "too big" errors the router's filter dropped so far (0 without a filter)."""
        if not self.router or not self.icmp_filtered:
            return 0
        table = self.router.run(["nft", "-j", "list", "table", "inet", path_router.TABLE]).stdout
        return path_router.dropped_icmp(table)

    # -- events during a workload (faults.py) ----------------------------------
    def cut_wan(self) -> None:
        """Both WAN ends drop whatever reaches them, until restore_wan."""
        for side, node in enumerate(self.wan_nodes):
            node.run(["nft", "-f", "-"], input=faults.outage_ruleset(self.wan_device(side)))

    def restore_wan(self) -> None:
        for node in self.wan_nodes:
            node.run(["nft", "delete", "table", "netdev", faults.OUTAGE_TABLE], check=False)

    def change_client_address(self) -> str:
        """Move the client side's WAN address (behind a NAT, the NAT's outer one); the new address."""
        wan = self.layout.wan
        if self.nat:
            old, new, node, device, prefix = (path_router.ADDRESSES[client_nat.OUTER], client_nat.MOVED_OUTER_ADDRESS,
                                              self.router, client_nat.OUTER, 32)
        else:
            old, new, node, device, prefix = (self.address(wan, wan), faults.MOVED_END_ADDRESS, self.wan_nodes[0],
                                              self.wan_device(0), WAN_NET.prefixlen)
            if self.router:
                self.router.ip(path_router.end_route(self.link, new, path_router.LEFT))
        node.sysctl(**{f"net.ipv4.conf.{device}.promote_secondaries": 1})
        node.ip(*faults.move_address_commands(device, old, new, prefix))
        return new

    def forget_nat_mappings(self) -> None:
        netns.flush_conntrack(self.router.namespace)

    @property
    def path_nodes(self) -> list[Node]:
        """The namespaces that carry the WAN's packets: its two ends and the router between them."""
        return [*self.wan_nodes, *([self.router] if self.router else [])]

    def destroy(self) -> None:
        self.state.remove_namespaces([node.namespace for node in self.nodes]
                                     + ([self.router.namespace] if self.router else []))
        self.nodes.clear()
        self.router = None
        if self.placement:
            self.placement.remove()

    def wan_counters(self) -> dict[str, int]:
        """Bytes and packets the left WAN end has sent and received."""
        return device_counters(self.wan_nodes[0].read_net("dev"), self.wan_device(0))


def device_counters(proc_net_dev: str, device: str) -> dict[str, int]:
    """A device's byte and packet counters from /proc/net/dev (what `ip -s link` shows)."""
    for line in proc_net_dev.splitlines()[2:]:
        name, _, numbers = line.partition(":")
        if name.strip() == device:
            n = [int(x) for x in numbers.split()]
            return {"rx_bytes": n[0], "rx_packets": n[1], "tx_bytes": n[8], "tx_packets": n[9]}
    raise VpnlabError(f"no device {device} in /proc/net/dev")


def _run(argv: list[str], script: str) -> None:
    proc = subprocess.run(argv, input=script, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stdout, proc.stderr)
