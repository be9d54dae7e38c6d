"""WireGuard: the kernel module where the kernel has it, otherwise wireguard-go over TUN: Debian's
package, or (`implementation: wireguard-go-current`) the current release built from its Go module,
run the same way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field

from ..algorithms import AEAD, Algorithms
from ..tools import GoBuild, Tool, gobuild
from .base import Driver, Implementation, Mesh, Options, Ports, Tunable, Tunnel, TunnelEnv, marked_unset, route_into, stated_lines, wait_for

SOCKET_DIR = Path("/var/run/wireguard")  # wireguard-go's control sockets: shared by all namespaces
HEADER = 20 + 8 + 16 + 16  # outer IPv4 + UDP + WireGuard data header + Poly1305 tag
DEFAULT_MTU = 1420  # wg-quick's: 1500 less the header over IPv6
USERSPACE_VARIABLE = "WG_QUICK_USERSPACE_IMPLEMENTATION"  # wg-quick runs this program instead of the kernel's
# wireguard-go as a user installs it today: `go install` of its module at the newest version the Go module
# proxy served (resolved with `go list -m golang.zx2c4.com/wireguard@latest` on 2026-12-02), beside Debian's.
CURRENT = "wireguard-go-current"
CURRENT_BUILD = GoBuild("golang.zx2c4.com/wireguard", "v0.0.0-20260522210424-ecfc5a8d5446")


class WireGuardOptions(Options):
    implementation: Literal["auto", "kernel", "wireguard-go", "wireguard-go-current"] = "auto"
    port: int = Field(51820, ge=1, le=65535)
    mtu: int | None = Field(None, ge=1280, le=9000, description=f"by hand; default {DEFAULT_MTU}, or for a tunnel "
                            "inside another what fits in it")

    persistent_keepalive_s: int = Field(0, ge=0, le=65535, description="the client sends a keepalive this often "
                                        "when it has nothing else to send (0: never, WireGuard's default): keeps a "
                                        "NAT's mapping, so the far side can reach it")

    omit_at_default = ("mtu", "persistent_keepalive_s")


class WireGuard(Driver):
    name = "wireguard"
    summary = "WireGuard (Noise IK, ChaCha20-Poly1305) over UDP"
    tools = (Tool("wg", "wireguard-tools", ("wg", "--version")),
             Tool("wireguard-go", "wireguard-go", ("wireguard-go", "--version")),
             Tool(CURRENT, CURRENT_BUILD.module, go=CURRENT_BUILD))
    guest_modules = ("wireguard", "chacha_x86_64", "poly1305_x86_64", "curve25519_x86_64", "chacha20poly1305")
    Options = WireGuardOptions
    mesh = "full"
    tunables = (Tunable("mtu", (None, 1380, 1280)), Tunable("implementation", ("kernel", "wireguard-go")),
                Tunable("persistent_keepalive_s", (0, 25)))  # 25 s: what wg(8) suggests behind a NAT

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: WireGuard has no FIPS 140 configuration "
                    "(ChaCha20-Poly1305, Curve25519 and BLAKE2s are not FIPS-approved)")
        return None

    def describe(self, options, profile):
        parts = (["wireguard"] + ([f"mtu-{options.mtu}"] if options.mtu else [])
                 + ([f"keepalive-{options.persistent_keepalive_s}s"] if options.persistent_keepalive_s else []))
        return " ".join(parts + ([options.implementation] if options.implementation != "auto" else []))

    def settings(self, options, profile):
        """wg-quick's [Interface] line (both ends), and how to start the userspace implementation."""
        mtu = f"MTU = {options.mtu}" if options.mtu else marked_unset(f"MTU = {DEFAULT_MTU}")
        lines = [f"# {self.describe(options, profile)}", "[Interface]", mtu]
        if options.implementation == "wireguard-go":
            lines.append(f"# userspace: {USERSPACE_VARIABLE}=wireguard-go wg-quick up <interface>")
        elif options.implementation == CURRENT:
            lines.append(f"# userspace, built from its module: go install {CURRENT_BUILD.target}; "
                         f"{USERSPACE_VARIABLE}=<that wireguard> wg-quick up <interface>")
        elif options.implementation == "kernel":
            lines.append("# the kernel's WireGuard: wg-quick's default")
        if options.persistent_keepalive_s:
            lines += ["[Peer]  # the client's, for the gateway", f"PersistentKeepalive = {options.persistent_keepalive_s}"]
        return "\n".join(lines) + "\n"

    def from_settings(self, text):
        """The options of a fragment as `settings` writes it."""
        found = {}
        for line in stated_lines(text):
            key, _, value = line.partition("=")
            if key.strip() == "MTU":
                found["mtu"] = int(value)
            elif key.strip() == "PersistentKeepalive":
                found["persistent_keepalive_s"] = int(value)
            elif USERSPACE_VARIABLE in line:
                found["implementation"] = CURRENT if "go install" in line else "wireguard-go"
            elif "the kernel's WireGuard" in line:
                found["implementation"] = "kernel"
        return WireGuardOptions.model_validate(found)

    def implementations(self, options):
        return [
            Implementation("kernel", features=("wireguard",), tools=("wg",)),
            Implementation("wireguard-go", features=("tun",), tools=("wireguard-go", "wg")),
            Implementation(CURRENT, features=("tun",), tools=(CURRENT, "wg")),
        ]

    def ports(self, options):
        listen = (("udp", options.port),)  # every end's `listen-port`, the kernel's socket or wireguard-go's
        return Ports(gateway=listen, client=listen)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        return HEADER + (-inner_len) % 16  # the plaintext is padded to a multiple of 16 ...

    def full_packet_overhead(self, options, profile, implementation, mtu: int) -> int:
        return HEADER  # ... but never beyond the MTU

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        # Interface names double as wireguard-go socket names, so they must be unique machine-wide.
        names = (f"vw{env.unique}a", f"vw{env.unique}b")
        mtu = env.mtu(options, DEFAULT_MTU)
        (port,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = Tunnel(env, port, mtu)
        keys = {}
        for site, dev in ((left, names[0]), (right, names[1])):
            private = site.node.run(["wg", "genkey"]).stdout.strip()
            public = site.node.run(["wg", "pubkey"], input=private + "\n").stdout.strip()
            keys[dev] = (env.write(site.node, f"{dev}.key", private + "\n"), public)
            self._interface(site.node, dev, env, tunnel)
        for site, peer, dev, peer_dev in ((left, right, names[0], names[1]), (right, left, names[1], names[0])):
            allowed = ",".join([f"{peer.tunnel_ip}/32", *([peer.prefix] if peer.prefix else [])])
            argv = ["wg", "set", dev, "private-key", keys[dev][0], "listen-port", options.port,
                    "peer", keys[peer_dev][1], "allowed-ips", allowed]
            if site is left:  # the client knows where the gateway is; the gateway learns the client
                argv += ["endpoint", f"{peer.underlay_ip}:{options.port}"]
                if options.persistent_keepalive_s:
                    argv += ["persistent-keepalive", options.persistent_keepalive_s]
            site.node.run(argv)
            site.node.ip(f"addr add {site.tunnel_ip}/24 dev {dev}", f"link set {dev} mtu {mtu} up")
            route_into(site.node, peer.subnets, dev)
        return tunnel

    def up_mesh(self, sites, options, profile, env: TunnelEnv) -> Mesh:
        """A full mesh: every peer has every other as a WireGuard peer, with its endpoint and its overlay
        address (/32) as allowed IPs; each peer's keys are made before any starts, so the others know
        the last one before it joins."""
        names = [f"vw{env.unique}m{k}" for k in range(len(sites))]
        mtu = env.mtu(options, DEFAULT_MTU)
        (port,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = Tunnel(env, port, mtu)
        keys = []
        for site, dev in zip(sites, names):
            private = site.node.run(["wg", "genkey"]).stdout.strip()
            public = site.node.run(["wg", "pubkey"], input=private + "\n").stdout.strip()
            keys.append((env.write(site.node, f"{dev}.key", private + "\n"), public))

        def start(k: int) -> None:
            site, dev = sites[k], names[k]
            self._interface(site.node, dev, env, tunnel)
            argv = ["wg", "set", dev, "private-key", keys[k][0], "listen-port", options.port]
            for j, peer in enumerate(sites):
                if j != k:
                    argv += ["peer", keys[j][1], "allowed-ips", f"{peer.tunnel_ip}/32",
                             "endpoint", f"{peer.underlay_ip}:{options.port}"]
            site.node.run(argv)
            site.node.ip(f"addr add {site.tunnel_ip}/24 dev {dev}", f"link set {dev} mtu {mtu} up")

        for k in range(len(sites) - 1):
            start(k)
        return Mesh([tunnel], [site.tunnel_ip for site in sites], lambda: start(len(sites) - 1))

    @staticmethod
    def _interface(node, dev: str, env: TunnelEnv, tunnel: Tunnel) -> None:
        """The kernel's interface, or wireguard-go's once its control socket accepts: wireguard-go binds it
        (the file appears) before it listens, and a `wg` refused in between unlinks it and falls back to
        the kernel ("Unable to modify interface: Protocol not supported", seen in a suite run)."""
        if env.implementation == "kernel":
            node.ip(f"link add {dev} type wireguard")
            return
        tunnel.leave(node, SOCKET_DIR / f"{dev}.sock")  # a killed wireguard-go leaves it behind
        name = CURRENT if env.implementation == CURRENT else "wireguard-go"  # the build, where it is, or Debian's
        log = env.log(f"{name}-{node.role}")
        program = str(gobuild.program(CURRENT_BUILD, CURRENT)) if name == CURRENT else name
        proc = node.spawn([program, dev], log, env={"WG_PROCESS_FOREGROUND": "1"}, what=name)
        tunnel.processes.append((node, proc, log))
        wait_for(lambda: node.accepts(SOCKET_DIR / f"{dev}.sock"), 10, f"wireguard-go's socket {dev}", tunnel)

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """Fixed by the protocol: the Noise_IKpsk2 handshake (X25519, ChaCha20-Poly1305, BLAKE2s) and
        ChaCha20-Poly1305 on the data; no option changes them."""
        return Algorithms(control="Noise_IKpsk2", key_exchange="X25519", authentication="X25519 static keys",
                          control_cipher="ChaCha20-Poly1305 BLAKE2s", data="WireGuard over UDP",
                          data_cipher="ChaCha20-Poly1305", data_integrity=AEAD, source="wireguard driver")

    def negotiated(self, tunnel, options, profile):
        """WireGuard negotiates nothing: what runs is what the protocol fixes."""
        return replace(self.algorithms(options, profile), source="fixed by the protocol (nothing negotiated)")
