"""The mesh topology: N peers, each a namespace behind its own shaped WAN link to one core namespace
that routes between the links and runs nothing else (no VPN ever routes through it).

  peer0 =WAN0=\
  peer1 =WAN1== core
  peer2 =WAN2=/

Addresses (inside 198.18.0.0/15, RFC 2544's benchmarking range):
  WAN link i                198.18.(64+i).0/24: the core .1, peer i .2 (all within 198.18.64.0/20)
  the overlay               198.19.1.0/24 (tunnel layer 0's subnet): peer i at .(i+1)
  hub-and-spoke tunnel i    198.19.(32+i).0/24: the hub .1, spoke i .2 (drivers/base.py's hub default)
Each link is shaped at both ends (the peer's egress and the core's towards it) as the study's link says.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field

from ..core.errors import CommandError
from .node import Node
from .shaping import shape_commands
from .state import RunState
from .topology import TunnelSite, device_counters, tunnel_subnet

MIN_PEERS, MAX_PEERS = 3, 8
# Each repetition beyond its workload: the peers' warm-up pings, path-MTU settling, the join (an estimate)
MESH_SETTLE_S = 10
IDLE_WINDOW_S = 30  # the overlay's own bytes on the WAN links while idle: counted over this long by default
WAN_BLOCK = ipaddress.ip_network("198.18.64.0/20")
PEER_WAN = "w0"  # a peer's WAN interface (names are per namespace)


def wan_subnet(peer: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"198.18.{64 + peer}.0/24")


def hub_subnet(spoke: int) -> ipaddress.IPv4Network:
    """The subnet of the hub's own tunnel to one spoke (a hub-and-spoke mesh of two-site tunnels)."""
    return ipaddress.ip_network(f"198.19.{32 + spoke}.0/24")


def overlay_ip(peer: int) -> str:
    return str(tunnel_subnet(0).network_address + peer + 1)


@dataclass
class MeshTestbed:
    state: RunState
    peers: list[Node] = field(default_factory=list)
    core: Node | None = None
    remote = False
    placement = None  # the peers share the cores (placement.py pins two tunnel ends, not N)

    def underlay_ip(self, peer: int) -> str:
        return str(wan_subnet(peer).network_address + 2)

    def site(self, peer: int) -> TunnelSite:
        """Peer `peer` as a VPN driver sees it: nothing behind it, its overlay address in layer 0's subnet."""
        return TunnelSite(self.peers[peer], self.underlay_ip(peer), overlay_ip(peer), [], None)

    @property
    def sites(self) -> list[TunnelSite]:
        return [self.site(i) for i in range(len(self.peers))]

    @property
    def nodes(self) -> list[Node]:
        return [*self.peers, *([self.core] if self.core else [])]

    @classmethod
    def build(cls, state: RunState, peers: int, link, tag: str) -> "MeshTestbed":
        """Create the core and the peers, a veth WAN link from each peer to the core, addresses, the
        peers' routes to each other's WAN addresses through the core, and shaping on both ends."""
        if not MIN_PEERS <= peers <= MAX_PEERS:
            raise ValueError(f"peers: {MIN_PEERS} to {MAX_PEERS}")
        bed = cls(state)
        bed.core = _namespace(state, f"{tag}core", "core")
        bed.peers = [_namespace(state, f"{tag}peer{i}", f"peer{i}") for i in range(peers)]
        bed.core.sysctl(**{"net.ipv4.ip_forward": 1})
        bed.core.ip("link set lo up")
        for i, peer in enumerate(bed.peers):
            net = wan_subnet(i)
            # Created in the core, its other end moved straight into the peer: nothing in the default namespace.
            core_mac, peer_mac = f"02:76:6c:00:{i:02x}:01", f"02:76:6c:00:{i:02x}:02"
            bed.core.ip(f"link add p{i} address {core_mac} type veth peer name {PEER_WAN} address {peer_mac} "
                        f"netns {peer.namespace}")
            # The links carry IPv4 only. IPv6's start-up on a link that comes up (DAD, MLD reports, router
            # solicitations: 516 bytes in its first 5 s, then 70 at growing intervals) would count in
            # idle_control_bytes_per_s by how soon after it the window began: no VPN's read above Nebula's.
            bed.core.sysctl(**{f"net.ipv6.conf.p{i}.disable_ipv6": 1})
            # Each end knows the other's MAC for good: no ARP (42-byte frames when an entry goes stale) counts in
            # an idle window either.
            bed.core.ip(f"addr add {net.network_address + 1}/24 dev p{i}", f"link set p{i} up",
                        f"neigh replace {bed.underlay_ip(i)} lladdr {peer_mac} dev p{i} nud permanent")
            peer.sysctl(**{"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0,
                           f"net.ipv6.conf.{PEER_WAN}.disable_ipv6": 1,
                           "net.core.rmem_max": 64 * 1024 * 1024, "net.core.wmem_max": 64 * 1024 * 1024})
            peer.ip("link set lo up", f"addr add {bed.underlay_ip(i)}/24 dev {PEER_WAN}", f"link set {PEER_WAN} up",
                    f"route add {WAN_BLOCK} via {net.network_address + 1}",
                    f"neigh replace {net.network_address + 1} lladdr {core_mac} dev {PEER_WAN} nud permanent")
            for node, dev in ((peer, PEER_WAN), (bed.core, f"p{i}")):
                # a wire carries frames of at most the MTU: its counters and tbf see what a real link would
                node.run(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"])
                node.tc(*shape_commands(dev, link))
        return bed

    def destroy(self) -> None:
        self.state.remove_namespaces([node.namespace for node in self.nodes])
        self.peers.clear()
        self.core = None

    def wan_sent_bytes(self) -> int:
        """Bytes the peers have sent on their WAN links: all that entered the mesh's links, each once."""
        return sum(device_counters(peer.read_net("dev"), PEER_WAN)["tx_bytes"] for peer in self.peers)


@dataclass
class PairView:
    """One pair of a mesh as a chain testbed looks to a workload and to the proof of tunnel: the source
    and sink peers, the sink's address (in the overlay, or on its WAN without a VPN), and the two WAN
    links they send on."""

    mesh: MeshTestbed
    a: int
    b: int
    overlay: list[str] | None  # each peer's address in the overlay (drivers' Mesh.addresses); None: no VPN
    remote = False
    placement = None

    @property
    def state(self) -> RunState:
        return self.mesh.state

    @property
    def source(self) -> Node:
        return self.mesh.peers[self.a]

    @property
    def sink(self) -> Node:
        return self.mesh.peers[self.b]

    @property
    def sink_ip(self) -> str:
        return self.overlay[self.b] if self.overlay else self.mesh.underlay_ip(self.b)

    @property
    def nodes(self) -> list[Node]:
        return [self.source, self.sink]

    @property
    def wan_nodes(self) -> tuple[Node, Node]:
        return self.source, self.sink

    def wan_device(self, side: int) -> str:
        return PEER_WAN

    def wan_filter(self, side: int) -> list[str]:
        return []

    def address(self, node: int, link: int) -> str:
        return self.mesh.underlay_ip(self.a)

    @property
    def label(self) -> str:
        return f"{self.a}->{self.b}"


def _namespace(state: RunState, tag_role: str, role: str) -> Node:
    name = state.namespace_name(tag_role)
    state.add_namespace(name)  # recorded first: a crash right after still gets cleaned
    proc = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CommandError(["ip", "netns", "add", name], proc.returncode, proc.stdout, proc.stderr)
    return Node(role, name, state)
