"""Tailscale (tailscaled and its CLI, built from the tailscale.com Go module at a pinned release): WireGuard
between the nodes, keys and addresses handed out by a control server, a DERP relay when UDP does not get through.

Tailscale's coordination servers are never contacted: the control server is tailscale.com's own
integration-test control server (tstest/integration/testcontrol, served over HTTP by vpnlab's small main
program gomains/testcontrol built against the same release), run with the release's `derper` (a self-signed
certificate for its IP address, clients not verified, STUN beside it) on the gateway's node. Its DERP map names
that derper alone. Logging to Tailscale (logtail), the port mapper and DNS changes are off.

Each end runs tailscaled over a kernel TUN device the driver makes first with the end's testbed address on it
(so that address, not the tailnet one the control server assigns, is what the kernel picks as source),
and joins with `tailscale up`, advertising that address and the networks behind it as routes, which the control
server approves; each end accepts the other's. `path: relayed` drops UDP between the two ends' WAN addresses
with nftables in their own namespaces, so the peers find no direct path and send their WireGuard packets
through the derper over TLS. Before the tunnel counts as up, `tailscale ping` must answer over the asked path;
the path after each measurement is read from `tailscale status --json` (the peer's CurAddr, Relay) and
stored with the repetition as the data channel it negotiated: another path than the asked one flags the sample.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from ..algorithms import AEAD, Algorithms
from ..core.errors import TunnelError
from ..core.networks import benchmarking
from ..testbed.contract import Node
from ..tools import GoBuild, Tool, gobuild
from ..tools.gobuild import SourceEdit
from .base import Driver, Implementation, Mesh, Options, Ports, Tunnel, TunnelEnv, route_into, wait_for

# Tailscale's nodes get addresses from 100.64.0.0/10 and fd7a:115c:a1e0::/48, the ranges of net/tsaddr, which
# the rest of tailscale.com asks whether an address is a tailnet's, and the control server gives node N
# 100.64.0.N; tailscaled puts them on its TUN device. vpnlab adds addresses from the benchmarking ranges alone:
# its builds edit tsaddr's ranges (and its service address, the MagicDNS resolver's) into them, and the
# control server gives node N TAILNET_V4.N.
TAILNET_V4, TAILNET_V6 = "198.19.254", "2001:2:0:fe"
_TSADDR = "net/tsaddr/tsaddr.go"
_RANGES = (SourceEdit(_TSADDR, '"100.64.0.0/10"', f'"{TAILNET_V4}.0/24"'),
           SourceEdit(_TSADDR, "netaddr.IPv4(100, 100, 100, 100)", f"netaddr.IPv4({TAILNET_V4.replace('.', ', ')}, 253)"),
           SourceEdit(_TSADDR, 'TailscaleServiceIPString   = "100.100.100.100"',
                      f'TailscaleServiceIPString   = "{TAILNET_V4}.253"'),
           SourceEdit(_TSADDR, '"fd7a:115c:a1e0::53"', f'"{TAILNET_V6}::53"'),
           SourceEdit(_TSADDR, '"fd7a:115c:a1e0::/48"', f'"{TAILNET_V6}::/64"'),
           SourceEdit(_TSADDR, '"fd7a:115c:a1e0:ab12:4843:cd96:6200::/104"', f'"{TAILNET_V6}::ff00:0/104"'))
_CONTROL = "tstest/integration/testcontrol/testcontrol.go"
_ALLOCATION = tuple(SourceEdit(_CONTROL, f"netaddr.IPv4(100, 64, uint8({n}>>8), uint8({n}))",
                               f"netaddr.IPv4({TAILNET_V4.replace('.', ', ')}, uint8({n}))") for n in ("nodeID", "node.ID"))
# tailscale.com at the newest release whose every dependency the Go module proxy serves (2026-12-01:
# v1.104.7 needs modules it refuses, among them tailscale's wireguard-go and gvisor; v1.98.10 resolves
# them all). Go 1.27 turns encoding/json/v2 on, whose API moved past the experimental one v1.98.10's
# go-json-experiment pins: built with GOEXPERIMENT=nojsonv2.
RELEASE = GoBuild("tailscale.com", "v1.98.10", "cmd/tailscaled", experiments=("nojsonv2",), edits=_RANGES)
BUILDS = {"tailscaled": RELEASE, "tailscale": RELEASE.command("cmd/tailscale"),
          "derper": RELEASE.command("cmd/derper"), "tailscale-testcontrol": RELEASE.own_main("testcontrol", _ALLOCATION)}
CONTROL_SERVER = "tailscale.com's integration-test control server (tstest/integration/testcontrol)"
WG_PORT, DERP_PORT, STUN_PORT, CONTROL_PORT = 41641, 8443, 3478, 8080
# The control client redials only Noise over HTTPS, port 443 of the control server's host, within two minutes of
# its last dial (testbed addresses are not private ones to Go, so it does not leave that out): nothing listens
# there, the attempt is refused, and it comes back to the control server's port later.
CONTROL_HTTPS = 443
DEFAULT_MTU = 1280  # tailscaled's TUN MTU
# Direct: outer IPv4 + UDP + WireGuard's data header and tag, the plaintext padded to 16 (as WireGuard).
DIRECT = 20 + 8 + 16 + 16
# Relayed, on the client's hop to the derper: IPv4, TCP with timestamps, a TLS 1.3 record (its header, the
# inner content type, the AEAD tag), DERP's SendPacket frame (type, length, the destination's node key), then
# the same WireGuard message.
RELAYED = 20 + 32 + (5 + 1 + 16) + (1 + 4 + 32) + 16 + 16


@dataclass
class TailscaleTunnel(Tunnel):
    """Its TUN devices and nftables tables outlive the daemons: down() deletes them."""

    devices: list[tuple[Node, str]] = field(default_factory=list)
    tables: list[tuple[Node, str]] = field(default_factory=list)
    sockets: dict[str, str] = field(default_factory=dict)  # node role: its tailscaled's LocalAPI socket
    client: Node | None = None  # the end whose view of the path is recorded

    def down(self) -> None:
        super().down()
        for node, device in self.devices:
            node.run(["ip", "link", "del", device], check=False)
        for node, table in self.tables:
            node.run(["nft", "delete", "table", "inet", table], check=False)
        self.devices.clear()
        self.tables.clear()


class TailscaleOptions(Options):
    path: Literal["direct", "relayed"] = Field(
        "direct", description="direct: WireGuard over UDP between the ends; relayed: UDP between them dropped, "
        "so their packets go through the testbed's DERP relay over TLS")


class Tailscale(Driver):
    name = "tailscale"
    summary = ("Tailscale (WireGuard, a control server and a DERP relay) built from its Go module: "
               "path direct or relayed")
    tools = tuple(Tool(command, build.module, go=build) for command, build in BUILDS.items())
    Options = TailscaleOptions
    mesh = "full"

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: Tailscale has no FIPS 140 configuration (WireGuard's ChaCha20-Poly1305, Curve25519 "
                    "and BLAKE2s, which FIPS 140 does not approve)")
        return None

    def describe(self, options, profile):
        return " ".join(["tailscale", *(["relayed"] if options.path == "relayed" else []),
                         *([profile] if profile != "default" else [])])

    def implementations(self, options):
        return [Implementation("tailscale-current", features=("tun",), tools=tuple(BUILDS))]

    def ports(self, options):
        return Ports(gateway=(("udp", WG_PORT), ("tcp", DERP_PORT), ("udp", STUN_PORT), ("tcp", CONTROL_PORT)),
                     client=(("udp", WG_PORT),))

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        return (RELAYED if options.path == "relayed" else DIRECT) + (-inner_len) % 16

    def full_packet_overhead(self, options, profile, implementation, mtu: int) -> int:
        return RELAYED if options.path == "relayed" else DIRECT  # padding never beyond the MTU

    def up(self, left, right, options, profile, env: TunnelEnv) -> TailscaleTunnel:
        data, *control = _channels(options)
        tunnel = TailscaleTunnel(env, data, DEFAULT_MTU, control=control)
        if options.path == "relayed":
            for site, peer in ((left, right), (right, left)):
                _drop_udp(tunnel, site.node, [peer.underlay_ip])
        login = _control_plane(tunnel, right.node, right.underlay_ip)
        ends = ((right, left, f"ts{env.layer}b"), (left, right, f"ts{env.layer}a"))
        for site, peer, dev in ends:
            _device(tunnel, site, peer.subnets, dev)
        for site, _, dev in ends:
            _join(tunnel, site, dev, login)
        tunnel.client = left.node
        _await_path(tunnel, left.node, options.path, 1)
        return tunnel

    def up_mesh(self, sites, options, profile, env: TunnelEnv) -> Mesh:
        """Every peer in the tailnet of one control server, on peer 0's node with the derper: the peers learn
        each other from it and handshake directly (relayed: UDP between every two peers dropped, through the
        derper). Settled once each peer's `tailscale ping` to every other answers over the asked path."""
        data, *control = _channels(options)
        tunnel = TailscaleTunnel(env, data, DEFAULT_MTU, control=control)
        underlay = [site.underlay_ip for site in sites]
        if options.path == "relayed":
            for k, site in enumerate(sites):
                _drop_udp(tunnel, site.node, underlay[:k] + underlay[k + 1:])
        login = _control_plane(tunnel, sites[0].node, sites[0].underlay_ip)
        devices = [f"ts{env.layer}m{k}" for k in range(len(sites))]
        for site, dev in zip(sites, devices):
            _device(tunnel, site, [], dev)
        for k in range(len(sites) - 1):
            _join(tunnel, sites[k], devices[k], login)
        tunnel.client = sites[1].node  # a peer of every pair a mesh run measures

        def settle() -> None:
            for site in sites:
                _await_path(tunnel, site.node, options.path, len(sites) - 1)

        return Mesh([tunnel], [site.tunnel_ip for site in sites], lambda: _join(tunnel, sites[-1], devices[-1], login),
                    settle)

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """Fixed by the software: Noise IK to the control server (ts2021), WireGuard between the nodes; the
        data channel is the path the option asks for."""
        return Algorithms(control="Noise_IK (ts2021, to the control server)", key_exchange="X25519",
                          authentication=f"node keys registered with {CONTROL_SERVER}",
                          control_cipher="ChaCha20-Poly1305 BLAKE2s", data=_DATA[options.path],
                          data_cipher="ChaCha20-Poly1305", data_integrity=AEAD, source="tailscale driver")

    def negotiated(self, tunnel, options, profile):
        """The path the client's tailscaled (a mesh's peer 1) uses to each peer now (`tailscale status --json`):
        one path, or each one found when they differ."""
        peers = _peers(tunnel, tunnel.client)
        paths = sorted({_DATA[path_of(peer)] for peer in peers.values()})
        seen = "; ".join(f"peer {name} CurAddr {peer.get('CurAddr') or '-'}, Relay {peer.get('Relay') or '-'}"
                         for name, peer in sorted(peers.items()))
        return Algorithms(data=" and ".join(paths), source=f"tailscale status --json: {seen}")


_DATA = {"direct": "WireGuard over UDP (direct)", "relayed": "WireGuard in DERP over TLS (relayed)"}


def path_of(peer: dict) -> str:
    """'direct' when tailscaled sends to the peer's own address (CurAddr), else 'relayed' (through DERP)."""
    return "direct" if peer.get("CurAddr") else "relayed"


def _channels(options: TailscaleOptions) -> list[tuple[str, int]]:
    """Its channels on the WAN, the data's first: WireGuard over UDP or the derper's TLS, then the rest
    (disco and STUN over UDP, the control server's HTTP and the refused HTTPS fallback)."""
    udp, derp = ("udp", WG_PORT), ("tcp", DERP_PORT)
    rest = [("udp", STUN_PORT), ("tcp", CONTROL_PORT), ("tcp", CONTROL_HTTPS)]
    return [derp, udp, *rest] if options.path == "relayed" else [udp, derp, *rest]


def _program(command: str) -> str:
    return str(gobuild.program(BUILDS[command], command))


def _drop_udp(tunnel: TailscaleTunnel, node: Node, peer_ips: list[str]) -> None:
    """A table of this tunnel's in `node`'s namespace that drops UDP to and from the peers' WAN addresses."""
    table, peers = f"vpnlab_ts{tunnel.env.layer}", ", ".join(peer_ips)
    rules = (f"table inet {table} {{\n"
             f" chain out {{ type filter hook output priority 0; ip daddr {{ {peers} }} meta l4proto udp drop; }}\n"
             f" chain in {{ type filter hook input priority 0; ip saddr {{ {peers} }} meta l4proto udp drop; }}\n}}\n")
    tunnel.tables.append((node, table))
    node.run(["nft", "-f", "-"], input=rules)


def _control_plane(tunnel: TailscaleTunnel, node: Node, ip: str) -> tuple[str, str]:
    """The derper and the control server on `node`, listening on its WAN address; (login URL, auth key)."""
    env, folder, auth_key = tunnel.env, tunnel.env.folder(node), secrets.token_hex(16)
    _folder(env, node, f"{folder}/derper")
    derper = [_program("derper"), "-a", f"{ip}:{DERP_PORT}", "-http-port", "-1", "-stun-port", STUN_PORT,
              "-certmode", "manual", "-certdir", f"{folder}/derper", "-hostname", ip,
              "-c", f"{folder}/derper/derper.json", "-verify-clients=false"]
    control = [_program("tailscale-testcontrol"), "-listen", f"{ip}:{CONTROL_PORT}", "-authkey", auth_key,
               "-derp-ip", ip, "-derp-port", DERP_PORT, "-stun-port", STUN_PORT]
    for name, argv, port in (("derper", derper, DERP_PORT), ("testcontrol", control, CONTROL_PORT)):
        log = env.log(f"{name}-{node.role}")
        proc = node.spawn([str(a) for a in argv], log, what=name)
        tunnel.processes.append((node, proc, log))
        node.wait_listening(port, proc, log)
    return f"http://{ip}:{CONTROL_PORT}", auth_key


def _folder(env: TunnelEnv, node: Node, path: str) -> None:
    """A folder of this tunnel's on `node` that a daemon writes into (removed with the tunnel's folder)."""
    env.nodes.append(node)
    node.run(["mkdir", "-p", "-m", "0700", path])


def _device(tunnel: TailscaleTunnel, site, behind_peer: list[str], dev: str) -> None:
    """This end's TUN device, which its tailscaled takes over, with its testbed address (first on it: the
    kernel's source address into the tunnel) and the routes to the networks behind the peer. Routed before
    tailscaled starts: a route changed later is a link change to it, which closes its connection to the
    control server, and it then redials only HTTPS (port 443) for two minutes; and its disco would first find
    the gateway's address behind it (on the link to the server) along the chain."""
    site.node.ip(f"tuntap add dev {dev} mode tun", f"addr add {site.tunnel_ip}/24 dev {dev}", f"link set {dev} up")
    tunnel.devices.append((site.node, dev))
    route_into(site.node, behind_peer, dev)


def _join(tunnel: TailscaleTunnel, site, dev: str, login: tuple[str, str]) -> None:
    """This end's tailscaled on its TUN device, in its own folder, and `tailscale up` against the testbed's
    control server."""
    env, node = tunnel.env, site.node
    folder = f"{env.folder(node)}/{dev}"
    _folder(env, node, f"{folder}/logs")
    socket = f"{folder}/tailscaled.sock"
    log = env.log(f"tailscaled-{dev[-1]}")
    argv = [_program("tailscaled"), f"--tun={dev}", f"--port={WG_PORT}", f"--statedir={folder}",
            f"--state={folder}/tailscaled.state", f"--socket={socket}", "--no-logs-no-support"]
    proc = node.spawn(argv, log, env=_quiet(folder, login[0]), what="tailscaled")
    tunnel.processes.append((node, proc, log))
    tunnel.sockets[node.role] = socket
    wait_for(lambda: node.accepts(socket), 15, f"tailscaled's socket in {node.role}", tunnel)
    routes = ",".join([f"{site.tunnel_ip}/32", *site.subnets])
    _cli(tunnel, node, "up", f"--login-server={login[0]}", f"--auth-key={login[1]}", f"--hostname=vpnlab-{dev}",
         "--accept-dns=false", "--accept-routes", "--netfilter-mode=off", f"--advertise-routes={routes}",
         "--timeout=20s")


def _quiet(folder: str, control: str) -> dict[str, str]:
    """tailscaled's environment: nothing sent to Tailscale (logtail, the main control server), no port
    mapping, its connectivity check against the testbed's control server."""
    return {"TS_NO_LOGS_NO_SUPPORT": "true", "TS_LOGS_DIR": f"{folder}/logs", "TS_PANIC_IF_HIT_MAIN_CONTROL": "1",
            "TS_DISABLE_PORTMAPPER": "1", "TS_NETCHECK_GENERATE_204_URL": f"{control}/generate_204",
            "TS_ASSUME_NETWORK_UP_FOR_TEST": "1"}


def _cli(tunnel: TailscaleTunnel, node: Node, *argv: str, check: bool = True):
    """The tailscale CLI against this node's tailscaled."""
    proc = node.run([_program("tailscale"), f"--socket={tunnel.sockets[node.role]}", *argv], check=False, timeout=30)
    if check and proc.returncode != 0:
        raise TunnelError(f"tailscale {argv[0]} failed in {node.role}: {(proc.stderr or proc.stdout).strip()}\n"
                          f"{tunnel.logs()}")
    return proc


def _peers(tunnel: TailscaleTunnel, node: Node) -> dict[str, dict]:
    """The peers `tailscale status --json` shows on `node`, by host name."""
    status = json.loads(_cli(tunnel, node, "status", "--json").stdout)
    return {peer["HostName"]: peer for peer in (status.get("Peer") or {}).values()}


def _check_tailnet(tunnel: TailscaleTunnel, node: Node) -> None:
    """The addresses the control server gave `node` are the benchmarking ranges' (a build of the server without
    vpnlab's edits would give Tailscale's own): a TunnelError otherwise, and the tunnel comes down."""
    status = json.loads(_cli(tunnel, node, "status", "--json").stdout)
    outside = [a for a in (status.get("Self") or {}).get("TailscaleIPs") or ()
               if not benchmarking(a)]
    if outside:
        raise TunnelError(f"the control server gave {node.role} {', '.join(outside)}, outside 198.18.0.0/15 and "
                          f"2001:2::/48: its build is not vpnlab's ({BUILDS['tailscale-testcontrol'].target})")


def _await_path(tunnel: TailscaleTunnel, node: Node, path: str, count: int) -> None:
    """Until `node`'s tailscaled has `count` peers and each answers its `tailscale ping` over `path`."""
    _check_tailnet(tunnel, node)
    wait_for(lambda: len(_peers(tunnel, node)) == count, 10, f"{count} peers in tailscale status in {node.role}",
             tunnel, interval=0.2)
    for name, peer in _peers(tunnel, node).items():
        address = peer["TailscaleIPs"][0]
        wait_for(lambda: _pinged(tunnel, node, address, path), 20,
                 f"tailscale ping from {node.role} to {name} over the {path} path", tunnel, interval=0.5)


def _pinged(tunnel: TailscaleTunnel, node: Node, peer: str, path: str) -> bool:
    """Does the peer answer a `tailscale ping` (disco, over UDP or DERP) over `path`?"""
    said = _cli(tunnel, node, "ping", "--c=1", "--timeout=2s", *(["--until-direct=false"] if path == "relayed" else []),
                peer, check=False).stdout
    return "pong" in said and (" via DERP" in said) == (path == "relayed")
