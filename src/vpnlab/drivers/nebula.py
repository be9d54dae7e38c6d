"""Nebula (Slack's overlay VPN, Debian's 1.6.1, or with `implementation: nebula-current` the current
release built from its Go module, run the same way): a per-tunnel certificate authority, the gateway
as the lighthouse, the client finding it through `static_host_map`.

Each end runs `nebula` over TUN with a certificate `nebula-cert` signed for its overlay address and
the networks behind it (`subnets`), by a certificate authority on the lighthouse's node, from a key
pair made on the end's own node (nebula-cert runs on the nodes; only public keys and certificates
cross between them); the networks behind the other end are `unsafe_routes` through
it. Nebula installs those routes itself with the metric we give it, below the chain's own; the
driver then points the chain's route into the tunnel, as every driver does.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field

from ..algorithms import AEAD, Algorithms, read_logs
from ..core.errors import TunnelError
from ..testbed.contract import Node
from ..tools import GoBuild, Tool, gobuild
from .base import Driver, Implementation, Mesh, Options, Ports, Tunnel, TunnelEnv, route_into, wait_for

NEBULA = Tool("nebula", "nebula", ("nebula", "-version"))
NEBULA_CERT = Tool("nebula-cert", "nebula", ("nebula-cert", "-version"))
# Nebula as a user installs it today: `go install` of its commands at the newest version whose dependencies
# the Go module proxy serves (2026-12-02: v1.12.0 and v1.11.2 need modules it refuses, among them
# gvisor.dev/gvisor and DefinedNet's netlink; v1.11.1 resolves every one), beside Debian's.
CURRENT = "nebula-current"
CURRENT_BUILD = GoBuild("github.com/slackhq/nebula", "v1.11.1", "cmd/nebula")
CURRENT_CERT_BUILD = CURRENT_BUILD.command("cmd/nebula-cert")
PROGRAMS = {"nebula": ("nebula", "nebula-cert"), CURRENT: (CURRENT, "nebula-cert-current")}  # daemon, certificates
CURRENT_TOOLS = (Tool(CURRENT, CURRENT_BUILD.module, go=CURRENT_BUILD),
                 Tool(PROGRAMS[CURRENT][1], CURRENT_BUILD.module, go=CURRENT_CERT_BUILD))
# Outer IPv4 + UDP + Nebula's header (version and type, remote index, message counter, which is
# also the AEAD nonce) + the AEAD tag. Nebula pads nothing, so this holds for every size.
HEADER = 20 + 8 + 16 + 16
DEFAULT_MTU = 1300  # Nebula's own tun.mtu default
UNSAFE_ROUTE_METRIC = 100  # below the chain's route (metric 0), which the driver replaces
CA_VALIDITY = "48h"  # a certificate authority for one tunnel
CIPHERS = {"aes": "AES-256-GCM", "chachapoly": "ChaCha20-Poly1305"}
_HANDSHAKE = re.compile(r'msg="Handshake message received".*handshake="map\[stage:2 style:(\w+)\]"')


class NebulaOptions(Options):
    implementation: Literal["auto", "nebula", "nebula-current"] = Field(
        "auto", description="nebula: Debian's 1.6.1; nebula-current: the current release built from its Go module")
    cipher: Literal["aes", "chachapoly"] = Field("aes", description="every node's one data cipher: aes "
                                                 "(AES-256-GCM) or chachapoly (ChaCha20-Poly1305)")
    port: int = Field(4242, ge=1, le=65535)
    mtu: int | None = Field(None, ge=1280, le=9000, description=f"tun.mtu by hand; default Nebula's {DEFAULT_MTU}, "
                            "or for a tunnel inside another what fits in it")
    punch: bool = Field(False, description="punchy.punch: every node punches its peers every 10 s, which keeps a "
                        "NAT's mappings alive (Nebula's default off; its example configuration turns it on)")
    omit_at_default = ("punch",)


class Nebula(Driver):
    name = "nebula"
    summary = ("Nebula 1.6 or the current release (Noise IX, certificates, a lighthouse) over UDP: "
               "cipher aes or chachapoly")
    tools = (NEBULA, NEBULA_CERT, *CURRENT_TOOLS)
    Options = NebulaOptions
    mesh = "full"

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: Nebula 1.6.1 has no FIPS 140 mode: its `aes` cipher is AES-256-GCM, an approved "
                    "algorithm, but from Go's standard crypto library, not a FIPS 140-validated module, and its "
                    "handshake always uses X25519 keys in Ed25519-signed certificates, which FIPS 140 does not "
                    "approve (P-256 certificates and BoringCrypto builds came with Nebula 1.7; nebula-current runs the "
                    "same X25519 certificates, built without BoringCrypto or Go's FIPS 140 mode: none either)")
        return None

    def describe(self, options, profile):
        parts = ["nebula", options.cipher] + ([f"mtu-{options.mtu}"] if options.mtu else []) + (
            ["punchy"] if options.punch else [])
        return " ".join(parts + ([profile] if profile != "default" else [])
                        + ([options.implementation] if options.implementation != "auto" else []))

    def implementations(self, options):
        return [Implementation(name, features=("tun",), tools=programs) for name, programs in PROGRAMS.items()]

    def ports(self, options):
        listen = (("udp", options.port),)  # every node's `listen`, the lighthouse's and the others'
        return Ports(gateway=listen, client=listen)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        return HEADER

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        mtu = env.mtu(options, DEFAULT_MTU)
        (port,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = Tunnel(env, port, mtu)
        ends = ((right, left, "b"), (left, right, "a"))  # the lighthouse first: the client needs it
        configs = [_configure(env, site, end, f"vn{env.unique}{end}", None if end == "b" else right, peer, mtu,
                              options) for site, peer, end in ends]
        _certificate_authority(env, right.node, [(site, end) for site, _, end in ends])
        for (site, peer, end), config in zip(ends, configs):
            dev = f"vn{env.unique}{end}"
            _start(tunnel, site, dev, config)
            route_into(site.node, peer.subnets, dev)
        return tunnel

    def up_mesh(self, sites, options, profile, env: TunnelEnv) -> Mesh:
        """Peer 0 the lighthouse, which every other peer finds through `static_host_map`; the peers
        learn each other's addresses from it and handshake directly (no NAT here: no punching). Every
        peer's certificate is signed before the first starts."""
        mtu = env.mtu(options, DEFAULT_MTU)
        (port,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = Tunnel(env, port, mtu)
        devices = [f"vn{env.unique}m{k}" for k in range(len(sites))]
        configs = [_configure(env, site, f"p{k}", devices[k], sites[0] if k else None, None, mtu, options)
                   for k, site in enumerate(sites)]
        _certificate_authority(env, sites[0].node, [(site, f"p{k}") for k, site in enumerate(sites)])

        def start(k: int) -> None:
            _start(tunnel, sites[k], devices[k], configs[k])

        for k in range(len(sites) - 1):
            start(k)
        return Mesh([tunnel], [site.tunnel_ip for site in sites], lambda: start(len(sites) - 1))

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """Nebula 1.6.1 fixes the handshake: Noise IX (its 'ix_psk0', with no pre-shared key) over
        Curve25519 with SHA-256, peers authenticated by their certificates (X25519 keys signed with
        the CA's Ed25519 key); `cipher` picks the one AEAD of both the handshake and the data."""
        cipher = CIPHERS[options.cipher]
        return Algorithms(control="Noise_IXpsk0", key_exchange="X25519",
                          authentication="Nebula certificates (Ed25519 CA)", control_cipher=f"{cipher} SHA-256",
                          data="Nebula over UDP", data_cipher=cipher, data_integrity=AEAD, source="nebula driver")

    def negotiated(self, tunnel, options, profile):
        """The handshake the client's log says completed; the cipher is not negotiated (a node whose
        cipher differs fails the handshake) and Nebula logs none."""
        return read_logs(tunnel, "nebula", parse_nebula_log)


def parse_nebula_log(text: str) -> Algorithms | None:
    """'Handshake message received ... handshake="map[stage:2 style:ix_psk0]"': the initiator's
    completed handshake."""
    styles = _HANDSHAKE.findall(text)
    if not styles:
        return None
    control = "Noise_IXpsk0" if styles[-1] == "ix_psk0" else styles[-1]
    return Algorithms(control=control, source="nebula log (its handshake style; Nebula neither negotiates nor logs "
                                              "the cipher: every node runs the configured one)")


def _program(env: TunnelEnv, k: int) -> str:
    """The implementation's daemon (k 0) or nebula-cert (k 1): Debian's by name, the build by its path."""
    if env.implementation == CURRENT:
        return str(gobuild.program(*((CURRENT_BUILD, CURRENT), (CURRENT_CERT_BUILD, PROGRAMS[CURRENT][1]))[k]))
    return PROGRAMS["nebula"][k]


def _nebula_cert(env: TunnelEnv, node: Node, *argv) -> None:
    """nebula-cert on `node`, in this tunnel's folder there (it writes its files 0600 itself)."""
    proc = node.run([_program(env, 1), *map(str, argv)], check=False, timeout=30)
    if proc.returncode != 0:
        raise TunnelError(f"nebula-cert {argv[0]} failed in {node.role}: {(proc.stderr or proc.stdout).strip()}")


def _certificate_authority(env: TunnelEnv, ca: Node, ends: list) -> None:
    """A certificate authority for this tunnel on node `ca` (the lighthouse's), which signs each
    end's certificate for its overlay address and the networks behind it. Each end's key pair is made
    on its own node: only its public key and its certificate cross (read back through the nodes)."""
    folder = env.folder(ca)
    _nebula_cert(env, ca, "ca", "-name", f"vpnlab-{env.unique}", "-duration", CA_VALIDITY,
                 "-out-crt", f"{folder}/ca.crt", "-out-key", f"{folder}/ca.key")
    authority = ca.read_file(f"{folder}/ca.crt")
    for site, end in ends:
        own = env.folder(site.node)
        _nebula_cert(env, site.node, "keygen", "-out-key", f"{own}/{end}.key", "-out-pub", f"{own}/{end}.pub")
        public = env.write(ca, f"{end}.pub", site.node.read_file(f"{own}/{end}.pub"))
        _nebula_cert(env, ca, "sign", "-ca-crt", f"{folder}/ca.crt", "-ca-key", f"{folder}/ca.key", "-name", end,
                     "-ip", f"{site.tunnel_ip}/24", *(["-subnets", ",".join(site.subnets)] if site.subnets else []),
                     "-in-pub", public, "-out-crt", f"{folder}/{end}.crt")
        env.write(site.node, f"{end}.crt", ca.read_file(f"{folder}/{end}.crt"))
        env.write(site.node, "ca.crt", authority)


def _configure(env: TunnelEnv, site, end: str, dev: str, lighthouse, peer, mtu: int, options: NebulaOptions) -> str:
    """This end's configuration on its node, its path there: written first, it makes the tunnel's folder
    there, which nebula-cert writes into."""
    return env.write(site.node, f"{end}.yml", json.dumps(_config(site, lighthouse, peer, end, dev, mtu, options, env)))


def _start(tunnel: Tunnel, site, dev: str, config: str) -> None:
    """Start this end's nebula and wait for its interface."""
    log = tunnel.env.log(f"nebula-{site.node.role}")
    proc = site.node.spawn([_program(tunnel.env, 0), "-config", config], log, what="nebula")
    tunnel.processes.append((site.node, proc, log))
    wait_for(lambda: site.node.ipv4_address_once_up(dev) is not None, 15, f"nebula's {dev}", tunnel)


def _config(site, lighthouse, peer, end: str, dev: str, mtu: int, options: NebulaOptions, env: TunnelEnv) -> dict:
    """This end's config (JSON, which is YAML): the lighthouse to find (None: it is the lighthouse),
    the networks behind `peer` (if any) as unsafe routes, a firewall that lets the measurement through:
    since 1.10 a rule without `local_cidr` admits only packets to the node's own overlay address, so the
    current release's rules say `local_cidr: any` (the networks behind it too, as 1.6.1's rules admit)."""
    files = {name: f"{env.folder(site.node)}/{name}" for name in ("ca.crt", f"{end}.crt", f"{end}.key")}
    anything = [{"port": "any", "proto": "any", "host": "any",
                 **({"local_cidr": "any"} if env.implementation == CURRENT else {})}]
    return {
        "pki": {"ca": files["ca.crt"], "cert": files[f"{end}.crt"], "key": files[f"{end}.key"]},
        "static_host_map": {lighthouse.tunnel_ip: [f"{lighthouse.underlay_ip}:{options.port}"]} if lighthouse else {},
        "lighthouse": {"am_lighthouse": lighthouse is None, "interval": 60,
                       "hosts": [lighthouse.tunnel_ip] if lighthouse else []},
        "listen": {"host": site.underlay_ip, "port": options.port},
        "punchy": {"punch": options.punch},
        "tun": {"disabled": False, "dev": dev, "mtu": mtu, "drop_local_broadcast": False, "drop_multicast": False,
                "unsafe_routes": [{"route": net, "via": peer.tunnel_ip, "metric": UNSAFE_ROUTE_METRIC}
                                  for net in (peer.subnets if peer else [])]},
        "logging": {"level": "info", "format": "text", "disable_timestamp": True},
        "firewall": {"outbound": anything, "inbound": anything},
        "cipher": options.cipher,
    }
