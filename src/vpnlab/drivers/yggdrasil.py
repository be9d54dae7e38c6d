"""Yggdrasil (0.4.7, the release Debian 12 ships, or with `implementation: yggdrasil-current` the
current 0.5 release, each built from its Go module and run the same way): two nodes peered explicitly
over the WAN, the testbed's IPv4 carried in VXLAN between their Yggdrasil addresses.

Yggdrasil routes only IPv6: each node's address (and its /64 subnet), derived from its ed25519 key,
in 200::/7 as released and in 2001:2:0::/56 as vpnlab builds it (_PREFIX). 0.4 removed 0.3's
tunnel routing, which had carried IPv4 between nodes, and this kernel has no IPv4-in-IPv6 tunnel
(ip6tnl, sit, GRE), so the driver puts the testbed's IPv4 (what every workload speaks) in a VXLAN
between the two Yggdrasil addresses: 70 bytes per packet that a purely IPv6 application would not
pay, counted in the overhead model.

The peering is TLS over TCP (`peering: tcp` leaves the TLS out); multicast discovery is off and the
listening end accepts only the other end's key. Yggdrasil has no cipher to choose: every packet is
sealed end to end with NaCl box (X25519, XSalsa20-Poly1305) under keys from the nodes' ed25519
keys, and the TLS of a peering is Go's TLS 1.3 with Go's own choice (seen in the ServerHello here:
TLS_AES_128_GCM_SHA256 with X25519; Go prefers ChaCha20-Poly1305 on a CPU without AES instructions).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import Field, model_validator

from ..algorithms import AEAD, Algorithms
from ..testbed.contract import Node
from ..tools import GoBuild, Tool, gobuild
from ..tools.gobuild import SourceEdit
from .base import Driver, Implementation, Mesh, Options, Ports, Tunnel, TunnelEnv, wait_for

VXLAN_PORT = 4789
VXLAN = 40 + 8 + 8 + 14  # IPv6, UDP, VXLAN header, the inner Ethernet header
# ironwood's frame on a peering: 2 bytes of length, its type, the source route (to a direct peer only
# its terminating 0; a session's first packets, sent before the path lookup answers, go along the
# tree without it), source and destination keys, the traffic kind
FRAME = 2 + 1 + 1 + 32 + 32 + 1
# 0.5's ironwood routes on a spanning tree: its frame carries the destination's and the source's tree
# coordinates (each a list of port varints ending in 0: the root's is the 0 alone, a child of the root's one
# port and the 0; two peered nodes are a root and its child) and a watermark varint (the distance left:
# one byte) instead of the source route and the kind: 2 bytes more (measured: 268 and 246 B against 0.4's
# 266 and 244). Between two non-root peers of a mesh both coordinates hold a port: one byte more again
# (269 B measured), so up_mesh makes peer 1, a peer of every pair a mesh run measures, the root.
FRAME_CURRENT = 2 + 1 + (1 + 2) + 32 + 32 + 1
# its session layer: type, two key sequence numbers (one byte each while below 128), the nonce (a
# varint after them), the sender's next public key and the Poly1305 tag inside the box; and
# Yggdrasil's own type byte in front of the IPv6 packet
SESSION = 1 + 1 + 1 + 32 + 16 + 1
OUTER = {"tls": 20 + 32 + 5 + 1 + 16, "tcp": 20 + 32}  # IPv4, TCP with timestamps; TLS 1.3 record, type, tag
DEFAULT_MTU = 1500  # what the sites' links carry: the peering is a TCP stream, which any size fits
# Yggdrasil's nodes take their addresses from 200::/7, which it puts on its TUN device; vpnlab adds addresses
# from the benchmarking ranges alone, so it builds each release it runs from its Go module with the prefix
# 2001:2:0:0000::/56 instead (seven bytes, the eighth bit of the last one still telling a node's address,
# 2001:2:0:00xx::, from its /64 subnet, 2001:2:0:01xx::): a node's address keeps 64 bits of its key instead
# of 112 (ample for the few nodes of a testbed). 0.5's command also refuses to peer over Yggdrasil itself
# with that range's addresses. Debian's own binary of 0.4.7 is not run: it would put 200::/7 addresses in
# vpnlab's namespaces.
_PREFIX = SourceEdit("src/address/address.go", "func GetPrefix() [1]byte {\n\treturn [...]byte{0x02}\n}",
                     "func GetPrefix() [7]byte {\n\treturn [...]byte{0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00}\n}")
_PEER_FILTER = SourceEdit("cmd/yggdrasil/main.go", 'IP:   net.ParseIP("200::"),\n\t\t\tMask: net.CIDRMask(7, 128),',
                          'IP:   net.ParseIP("2001:2::"),\n\t\t\tMask: net.CIDRMask(55, 128),')
MODULE = "github.com/yggdrasil-network/yggdrasil-go"
# the release Debian 12 ships (its package's version), from the module proxy
RELEASE_BUILD = GoBuild(MODULE, "v0.4.7", "cmd/yggdrasil", edits=(_PREFIX,))
# Yggdrasil as a user installs it today: its commands at the newest version the Go module proxy served
# (2026-12-02: v0.5.14). The proxy refuses one dependency, suah.dev/protect (OpenBSD's pledge and unveil,
# which does nothing on Linux): vpnlab's stand-in of the same API does nothing too (tools/gostandins).
CURRENT = "yggdrasil-current"
CURRENT_BUILD = GoBuild(MODULE, "v0.5.14", "cmd/yggdrasil", ("suah.dev/protect",), edits=(_PREFIX, _PEER_FILTER))
CTL_BUILD = CURRENT_BUILD.command("cmd/yggdrasilctl")  # built beside it (bootstrap), for a person's look inside
NO_CIPHER_CHOICE = ("Yggdrasil has no cipher to choose: every packet is sealed end to end with NaCl box "
                    "(X25519, XSalsa20-Poly1305), fixed by the protocol")


@dataclass
class YggdrasilTunnel(Tunnel):
    """Its VXLAN devices outlive the daemons: down() deletes them."""

    devices: list[tuple[Node, str]] = field(default_factory=list)

    def down(self) -> None:
        super().down()
        for node, device in self.devices:
            node.run(["ip", "link", "del", device], check=False)
        self.devices.clear()


class YggdrasilOptions(Options):
    """Where the nodes peer; there is no cipher, key exchange or integrity to choose (NO_CIPHER_CHOICE)."""

    implementation: Literal["auto", "yggdrasil", "yggdrasil-current"] = Field(
        "auto", description="yggdrasil: 0.4.7, the release Debian 12 ships; yggdrasil-current: the current "
        "release; each built from its Go module")
    peering: Literal["tls", "tcp"] = Field("tls", description="the peering's transport: TLS over TCP, or plain TCP")
    port: int = Field(12345, ge=1, le=65535, description="the listening node's TCP port")
    mtu: int | None = Field(None, ge=1280, le=9000, description=f"the IPv4 tunnel's, by hand; default {DEFAULT_MTU}")

    @model_validator(mode="before")
    @classmethod
    def no_cipher(cls, data):
        chosen = [key for key in ("cipher", "auth", "digest", "encryption") if isinstance(data, dict) and key in data]
        if chosen:
            raise ValueError(f"{chosen[0]}: {NO_CIPHER_CHOICE}")
        return data


class Yggdrasil(Driver):
    name = "yggdrasil"
    summary = "Yggdrasil mesh (NaCl box end to end, peered over TLS/TCP), IPv4 in VXLAN over its IPv6"
    tools = (Tool("yggdrasil", MODULE, go=RELEASE_BUILD),
             Tool("bridge", "iproute2", ("bridge", "-V")),  # a mesh's VXLAN flood list
             Tool(CURRENT, CURRENT_BUILD.module, go=CURRENT_BUILD),
             Tool("yggdrasilctl-current", CTL_BUILD.module, go=CTL_BUILD))
    Options = YggdrasilOptions
    mesh = "full"

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: Yggdrasil has no FIPS 140 configuration (its cryptography is fixed: NaCl box with "
                    "X25519 and XSalsa20-Poly1305 under ed25519 node keys, none of them FIPS-approved)")
        return None

    def describe(self, options, profile):
        parts = ["yggdrasil", *(["tcp"] if options.peering == "tcp" else []),
                 *([f"mtu-{options.mtu}"] if options.mtu else []),
                 *([options.implementation] if options.implementation != "auto" else [])]
        return " ".join(parts)

    def implementations(self, options):
        return [Implementation("yggdrasil", features=("tun",), tools=("yggdrasil",)),
                Implementation(CURRENT, features=("tun",), tools=(CURRENT,))]

    def ports(self, options):
        # The listening node's; the other dials out. Left out: each end's VXLAN socket (UDP 4789), the
        # kernel's, IPv6-only and shared with the host's own IPv6 VXLAN devices on that port.
        return Ports(gateway=(("tcp", options.port),))

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        mtu = env.mtu(options, DEFAULT_MTU)
        (listener,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = YggdrasilTunnel(env, listener, mtu)
        configs = self._configs(left, right, options, env, mtu)
        addresses = {}
        for site in (right, left):  # the listener first: the other end then connects at once
            config = env.write(site.node, f"yggdrasil-{site.node.role}.conf", json.dumps(configs[site.node.role]))
            addresses[site.node.role] = site.node.run([_program(env), "-useconffile", config,
                                                       "-address"]).stdout.strip()
            log = env.log(f"yggdrasil-{site.node.role}")
            proc = site.node.spawn([_program(env), "-useconffile", config, "-logto", "stdout"], log, what="yggdrasil")
            tunnel.processes.append((site.node, proc, log))
            if site is right:
                wait_for(lambda: right.node.listening(options.port), 15, "yggdrasil to listen", tunnel)
        wait_for(lambda: left.node.run(["ping", "-6", "-n", "-c", "1", "-W", "0.2", addresses[right.node.role]],
                                       check=False, timeout=5).returncode == 0,
                 30, "the two Yggdrasil nodes to reach each other", tunnel)
        for site, peer, end in ((left, right, "a"), (right, left, "b")):
            vxlan = f"vx{env.unique}{end}"
            tunnel.devices.append((site.node, vxlan))
            site.node.ip(f"link add {vxlan} type vxlan id 1 local {addresses[site.node.role]} "
                         f"remote {addresses[peer.node.role]} dstport {VXLAN_PORT} nolearning",
                         f"addr add {site.tunnel_ip}/24 dev {vxlan}", f"link set {vxlan} mtu {mtu} up",
                         # an Ethernet segment, not a point-to-point link: the networks behind via the other end
                         *(f"route replace {net} via {peer.tunnel_ip} dev {vxlan}" for net in peer.subnets))
        return tunnel

    @staticmethod
    def _configs(left, right, options, env: TunnelEnv, mtu: int) -> dict[str, dict]:
        """Each node's configuration, by its role: fresh keys, the one explicit peering over the WAN,
        only the other's key accepted, no multicast discovery, no admin socket, a TUN named uniquely
        machine-wide (as wireguard's), with room for the VXLAN around the tunnel's packets."""
        configs = {site.node.role: json.loads(site.node.run([_program(env), "-genconf", "-json"]).stdout)
                   for site in (left, right)}
        uri = f"{options.peering}://{right.underlay_ip}:{options.port}"
        for site, peer, end in ((left, right, "a"), (right, left, "b")):
            _peering(configs[site.node.role], [uri] if site is left else [], [uri] if site is right else [],
                     [_public_key(configs[peer.node.role])], f"vy{env.unique}{end}", mtu)
        return configs

    def up_mesh(self, sites, options, profile, env: TunnelEnv) -> Mesh:
        """Every peer listens and dials each peer before it (peer k peers 0..k-1): a full mesh of
        peerings, over which Yggdrasil routes each pair as it finds. The testbed's IPv4 in one VXLAN
        device per peer, every other peer's Yggdrasil address on its flood list (ARP), their MACs learnt."""
        mtu = env.mtu(options, DEFAULT_MTU)
        (listener,) = self.ports(options).gateway  # every peer's: it listens and dials
        tunnel = YggdrasilTunnel(env, listener, mtu)
        uris = [f"{options.peering}://{site.underlay_ip}:{options.port}" for site in sites]
        # fresh keys, the smallest dealt to peer 1: it is the root of 0.5's spanning tree (the smallest key
        # wins), and a peer of the pair whose overhead a mesh run measures (1 and 2 by default, else 0 and 1,
        # or 1 and 0), which so carries the coordinates FRAME_CURRENT counts
        configs = sorted((json.loads(site.node.run([_program(env), "-genconf", "-json"]).stdout) for site in sites),
                         key=_public_key)
        configs.insert(1, configs.pop(0))
        keys = [_public_key(config) for config in configs]
        paths, addresses = [], []
        for k, (site, config) in enumerate(zip(sites, configs)):
            _peering(config, uris[:k], [uris[k]], keys[:k] + keys[k + 1:], f"vy{env.unique}m{k}", mtu)
            paths.append(env.write(site.node, f"yggdrasil-p{k}.conf", json.dumps(config)))
            addresses.append(site.node.run([_program(env), "-useconffile", paths[k], "-address"]).stdout.strip())

        def start(k: int) -> None:
            site, vxlan = sites[k], f"vx{env.unique}m{k}"
            log = env.log(f"yggdrasil-{site.node.role}")
            proc = site.node.spawn([_program(env), "-useconffile", paths[k], "-logto", "stdout"], log, what="yggdrasil")
            tunnel.processes.append((site.node, proc, log))
            wait_for(lambda: site.node.listening(options.port), 15, f"yggdrasil in {site.node.role} to listen", tunnel)
            tunnel.devices.append((site.node, vxlan))
            site.node.ip(f"link add {vxlan} type vxlan id 1 local {addresses[k]} dstport {VXLAN_PORT}",
                         f"addr add {site.tunnel_ip}/24 dev {vxlan}", f"link set {vxlan} mtu {mtu} up")
            for j, address in enumerate(addresses):
                if j != k:
                    site.node.run(["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", vxlan, "dst", address])

        for k in range(len(sites) - 1):
            start(k)
        return Mesh([tunnel], [site.tunnel_ip for site in sites], lambda: start(len(sites) - 1))

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        """For a packet of a young session, as the probes after set-up are: the session's nonce is a
        varint, 1 byte for its first 127 packets, one more at each further 7 bits."""
        return OUTER[options.peering] + (FRAME_CURRENT if implementation == CURRENT else FRAME) + SESSION + 1 + VXLAN

    def full_packet_overhead(self, options, profile, implementation, mtu: int) -> int:
        return self.overhead(options, profile, implementation, mtu) + 3  # a nonce of up to 2^28 packets

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """Fixed by the software: the nodes' ed25519 keys (converted to X25519) key NaCl box
        (XSalsa20-Poly1305) end to end; the TLS 1.3 peering is Go's crypto/tls with its defaults
        (X25519, AES-128-GCM on a CPU with AES instructions) and self-signed ed25519 certificates."""
        tls = options.peering == "tls"
        return Algorithms(control="Yggdrasil over TLS 1.3" if tls else "Yggdrasil over TCP",
                          key_exchange="X25519", authentication="Ed25519 node keys",
                          control_cipher="AES-128-GCM" if tls else "none",
                          data=f"Yggdrasil session over {options.peering.upper()}",
                          data_cipher="XSalsa20-Poly1305", data_integrity=AEAD, source="yggdrasil driver")

    def negotiated(self, tunnel, options, profile):
        """Yggdrasil logs the peering's protocol ('Connected outbound TLS: ...') and nothing of its
        ciphers: the session's are fixed by the software (as WireGuard's), the TLS suite Go chose is
        not read (left empty)."""
        found = next(filter(None, (parse_yggdrasil_log(tunnel.read_log(log))
                                   for _, _, log in tunnel.processes)), None)
        if found is None:
            return None
        return replace(self.algorithms(options, profile), control=found.control, control_cipher="",
                       source="yggdrasil log (the peering); the session's algorithms fixed by the software")


def _program(env: TunnelEnv) -> str:
    """The implementation's yggdrasil, built into the cache."""
    if env.implementation == CURRENT:
        return str(gobuild.program(CURRENT_BUILD, CURRENT))
    return str(gobuild.program(RELEASE_BUILD, "yggdrasil"))


def _public_key(config: dict) -> str:
    """A node's public key: 0.4's generated configuration states it; 0.5's has only the private key, an
    ed25519 private key in hex whose second half is the public key (as `yggdrasil -publickey` prints it)."""
    return config.get("PublicKey") or config["PrivateKey"][64:]


def _peering(config: dict, peers: list[str], listen: list[str], allowed: list[str], name: str, mtu: int) -> None:
    """A node's peerings (whom it dials, where it listens, whose keys it accepts), no multicast
    discovery, no admin socket, a TUN named uniquely machine-wide (as wireguard's), with room for the
    VXLAN around the tunnel's packets."""
    config.update(Peers=peers, InterfacePeers={}, Listen=listen, AllowedPublicKeys=allowed, MulticastInterfaces=[],
                  AdminListen="none", NodeInfoPrivacy=True, NodeInfo={}, IfName=name, IfMTU=mtu + VXLAN)


def parse_yggdrasil_log(text: str) -> Algorithms | None:
    """'Connected TLS: <key>@<address>, source ...' (0.4) -> the peering's protocol; 0.5 names no protocol
    there ('Connected inbound: <address>@<remote>, source ...'), so a listening node's log says it by the
    listener that took the connection ('TLS listener started on ...': the only one, as the driver sets it)."""
    match = re.search(r"Connected (?:outbound |inbound )?(TLS|TCP):", text)
    if not match and re.search(r"Connected inbound: ", text):
        match = re.search(r"(TLS|TCP) listener started on ", text)
    if not match:
        return None
    return Algorithms(control="Yggdrasil over TLS 1.3" if match[1] == "TLS" else "Yggdrasil over TCP",
                      source="yggdrasil log")
