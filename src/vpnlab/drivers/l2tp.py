"""L2TP with xl2tpd + pppd (MS-CHAPv2), plain or over IPsec transport mode with a pre-shared
key (strongSwan, IKEv1 as Windows clients use it): "L2TP/IPsec".

Needs PPP in the kernel, and kernel ESP for the IPsec variant (transport mode has no
userspace data plane): on a host without them the VM backend runs it.
"""

from __future__ import annotations

import secrets as random_secrets
from dataclasses import replace
from pathlib import Path
from typing import Literal

from ..algorithms import Algorithms, merged, read_logs, read_xfrm
from ..testbed.node import private_run
from .base import Driver, Implementation, Options, Ports, Tunnel, TunnelEnv, route_into
from .ipsec import (ESP, ESP_MODULES, FIPS_ESP, IKE_PORTS, IPSEC_PACKAGES, IPSEC_TOOLS, UDP_HEADER,
                    esp_algorithms)
from .ppp import (CLIENT_NAME, COMMON, MTU, PPP_MODULES, PPPD, SERVER_NAME, auth_options, negotiated_ppp, private_etc,
                  wait_for_link, write_etc)
from .strongswan import FIPS_IKE, parse_charon_log, start_charons
from ..tools import Tool

L2TP_PORT = 1701
DEFAULT_ESP = "aes128-sha1"  # what Windows' L2TP/IPsec client proposes first
L2TP_HEADER = 6  # flags/version, tunnel id, session id: kernel L2TP sends data without the length field
PPP_HEADER = 4  # address/control and protocol (no compression negotiated)


class L2tpOptions(Options):
    ipsec: bool = True
    esp: Literal["3des-sha1", "aes128-sha1", "aes256-sha1", "aes128-sha256", "aes256-sha256",
                 "aes128gcm16", "aes256gcm16"] = DEFAULT_ESP


class L2tp(Driver):
    name = "l2tp"
    summary = "L2TP (xl2tpd + pppd, MS-CHAPv2), plain or over IPsec transport mode with a PSK (strongSwan IKEv1)"
    tools = (Tool("xl2tpd", "xl2tpd", ("xl2tpd", "-v"), path="/usr/sbin/xl2tpd"), PPPD, *IPSEC_TOOLS)
    packages = IPSEC_PACKAGES
    guest_modules = (*PPP_MODULES, "l2tp_core", "l2tp_netlink", "l2tp_ppp", "l2tp_ip", "l2tp_eth", *ESP_MODULES)
    Options = L2tpOptions

    def check(self, options, profile):
        if profile == "fips" and not options.ipsec:
            return "profile: plain L2TP is not encrypted; the fips profile needs ipsec: true"
        if profile == "fips" and options.esp not in FIPS_ESP:
            return f"options.esp: {options.esp} is not FIPS 140-approved"
        return None

    def describe(self, options, profile):
        text = f"l2tp/ipsec {options.esp}" if options.ipsec else "l2tp"
        return text if profile == "default" else f"{text} {profile}"

    def implementations(self, options):
        if options.ipsec:
            return [Implementation("xl2tpd+esp", features=("ppp", "l2tp", "esp"),
                                   tools=("xl2tpd", "pppd", "charon", "swanctl"))]
        return [Implementation("xl2tpd", features=("ppp", "l2tp"), tools=("xl2tpd", "pppd"))]

    def ports(self, options):
        # both xl2tpd (the LNS and the LAC) on L2TP's port, and with IPsec both charons
        bound = (("udp", L2TP_PORT), *(IKE_PORTS if options.ipsec else ()))
        return Ports(gateway=bound, client=bound)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        carried = 8 + L2TP_HEADER + PPP_HEADER + inner_len  # UDP + L2TP + PPP + the packet
        if not options.ipsec:
            return 20 + carried - inner_len
        iv, block, icv = ESP[options.esp]
        encrypted = -(-(carried + 2) // block) * block  # + pad length and next header, padded
        return 20 + 8 + iv + encrypted + icv - inner_len  # transport mode: one outer IP header

    def nat_traversal_overhead(self, options, implementation):
        return UDP_HEADER if options.ipsec else 0

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        names = (f"pl{env.unique}a", f"pl{env.unique}b")
        l2tp, *ike = self.ports(options).gateway  # with IPsec, only ESP and IKE show on the WAN
        tunnel = Tunnel(env, ("esp", None) if options.ipsec else l2tp, MTU, control=ike, encrypted=options.ipsec)
        if options.ipsec:
            self._ipsec(left, right, options, profile, env, tunnel)

        gateway, client = right.node, left.node
        write_etc(env, [gateway, client])
        server_ppp = env.write(gateway, "options.lns", "\n".join(
            [f"name {SERVER_NAME}", *auth_options(True, None), *COMMON, f"ifname {names[1]}",
             f"logfile {tunnel.own_log(gateway, 'pppd-gateway')}"]) + "\n")
        lns = env.write(gateway, "xl2tpd-lns.conf", f"""[global]
listen-addr = {right.underlay_ip}
port = {L2TP_PORT}
access control = no
[lns default]
ip range = {left.tunnel_ip}-{left.tunnel_ip}
local ip = {right.tunnel_ip}
length bit = yes
require authentication = yes
name = {SERVER_NAME}
pppoptfile = {server_ppp}
""")
        client_ppp = env.write(client, "options.lac", "\n".join(
            [f"user {CLIENT_NAME}", f"remotename {SERVER_NAME}", *auth_options(False, None), *COMMON,
             f"ifname {names[0]}", f"logfile {tunnel.own_log(client, 'pppd-client')}"]) + "\n")
        lac = env.write(client, "xl2tpd-lac.conf", f"""[global]
listen-addr = {left.underlay_ip}
port = {L2TP_PORT}
access control = no
[lac vpnlab]
lns = {right.underlay_ip}
length bit = yes
autodial = yes
redial = no
require authentication = no
name = {CLIENT_NAME}
pppoptfile = {client_ppp}
""")
        for node, conf, role in ((gateway, lns, "lns"), (client, lac, "lac")):
            self._start_xl2tpd(node, conf, role, env, tunnel)
        wait_for_link(client, names[0], tunnel)
        wait_for_link(gateway, names[1], tunnel)
        route_into(client, right.subnets, names[0])
        route_into(gateway, left.subnets, names[1])
        return tunnel

    @staticmethod
    def _start_xl2tpd(node, conf: str, role: str, env: TunnelEnv, tunnel: Tunnel) -> None:
        """One xl2tpd (lns: the gateway, lac: the client) with its own files in the tunnel's folder on
        its node, a private /run and /etc/ppp."""
        folder = env.folder(node)
        # no L2TP tunnel secret: PPP authenticates, IPsec encrypts
        no_secrets = env.write(node, "l2tp-secrets", "")
        argv = ["xl2tpd", "-D", "-c", conf, "-p", f"{folder}/xl2tpd-{role}.pid",
                "-C", f"{folder}/xl2tpd-{role}.control", "-s", no_secrets]
        log = env.log(f"xl2tpd-{role}")
        proc = node.spawn(private_etc(env, node, private_run(argv, keep=folder, make=("/run/xl2tpd",))),
                          log, what="xl2tpd")
        tunnel.processes.append((node, proc, log))

    @staticmethod
    def _ipsec(left, right, options, profile: str, env: TunnelEnv, tunnel: Tunnel) -> None:
        """An ESP transport-mode SA for UDP 1701 between the two underlay addresses."""
        psk = "0x" + random_secrets.token_hex(32)
        homes = []
        for site, peer, is_client in ((right, left, False), (left, right, True)):
            home = f"ipsec-{site.node.role}"
            env.write(site.node, f"{home}/swanctl.conf", swanctl_conf(site.underlay_ip, peer.underlay_ip, is_client,
                                                                      options.esp, profile, psk))
            homes.append((site, Path(env.folder(site.node), home)))  # each charon's folder on its node
        start_charons(homes, env, tunnel, libipsec=False, child="l2tp")

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """With ipsec: IKEv1 main mode with a PSK and strongSwan's default IKE proposal (under fips
        FIPS_IKE), ESP in transport mode with the configured proposal; PPP authenticates with
        MS-CHAPv2 (inside ESP; not FIPS-approved, which the report marks). Without: nothing is encrypted."""
        if not options.ipsec:
            return Algorithms(control="L2TP (UDP 1701)", key_exchange="none", authentication="MS-CHAPv2",
                              control_cipher="none", data="L2TP + PPP", data_cipher="none", data_integrity="none",
                              source="l2tp driver")
        cipher, integrity = esp_algorithms(options.esp)
        fips = profile == "fips"
        return Algorithms(control="IKEv1", key_exchange="ECDH P-256" if fips else "X25519",
                          authentication="PSK + MS-CHAPv2",
                          control_cipher=f"AES-{256 if fips else 128}-CBC HMAC-SHA256-128",
                          data="ESP (transport) + L2TP + PPP",
                          data_cipher=cipher, data_integrity=integrity, source="l2tp driver")

    def negotiated(self, tunnel, options, profile):
        """charon's log and the kernel's ESP state (with ipsec), pppd's log (MS-CHAPv2)."""
        ppp = negotiated_ppp(tunnel)
        if not options.ipsec:
            return ppp  # PPP negotiated no MPPE: the data crosses in clear
        found = merged(read_xfrm(tunnel), read_logs(tunnel, "charon", parse_charon_log))
        if found and ppp and ppp.authentication:
            found = replace(found, authentication=" + ".join(filter(None, (found.authentication,
                                                                           ppp.authentication))),
                            source=f"{found.source} + {ppp.source}")
        if found and found.data == "ESP":
            found = replace(found, data="")  # transport mode: the state says ESP, the layers above it are PPP's
        return found or ppp


def swanctl_conf(local: str, remote: str, is_client: bool, esp: str, profile: str, psk: str) -> str:
    """One end's strongSwan IKEv1 configuration; under fips the IKE proposal is FIPS-approved too
    (the default one's X25519 is not). The gateway takes the client from wherever it comes (behind a
    NAT from the NAT's address, after an address change from its new one), as an L2TP/IPsec server
    does: its remote end and traffic selector are the peer's IKE address, whatever it is."""
    me, them = ("client", "server") if is_client else ("server", "client")
    ike = f"\n    proposals = {FIPS_IKE}" if profile == "fips" else ""
    if not is_client:
        remote = "%any"
    remote_ts = f"{remote}/32" if is_client else "dynamic"
    return f"""connections {{
  l2tp {{
    version = 1
    local_addrs = {local}
    remote_addrs = {remote}{ike}
    local {{
      auth = psk
      id = {me}@vpnlab
    }}
    remote {{
      auth = psk
      id = {them}@vpnlab
    }}
    children {{
      l2tp {{
        local_ts = {local}/32[udp/{L2TP_PORT}]
        remote_ts = {remote_ts}[udp/{L2TP_PORT}]
        mode = transport
        esp_proposals = {esp}
      }}
    }}
  }}
}}
secrets {{
  ike-vpnlab {{
    id-1 = client@vpnlab
    id-2 = server@vpnlab
    secret = {psk}
  }}
}}
"""
