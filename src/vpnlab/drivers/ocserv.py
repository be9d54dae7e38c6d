"""An SSL VPN of the AnyConnect family: ocserv on the gateway, openconnect on the client.

The tunnel always starts over TLS (CSTP, on TCP); with `transport: dtls` the
data then moves to DTLS over UDP, as AnyConnect does. The client runs our own
connect script instead of vpnc-script, which would rewrite /etc/resolv.conf.
"""

from __future__ import annotations

import ipaddress
import re
import secrets as random_secrets
from typing import Literal

from pydantic import Field

from ..algorithms import AEAD, Algorithms, cipher_name, group_name, integrity_name, read_logs
from ..tools import Tool
from .base import Driver, Implementation, Options, Ports, Tunable, Tunnel, TunnelEnv, wait_for
from ..testbed.contract import Node
from ..testbed.node import private_run
from .pki import OPENSSL, make_pki

# The tls-priorities line of Debian's own /etc/ocserv/ocserv.conf: the vendor default.
DEFAULT_PRIORITIES = "NORMAL:%SERVER_PRECEDENCE:%COMPAT:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1:-VERS-TLS1.3"
# FIPS 140: TLS 1.2 with ECDHE and AES-GCM only.
FIPS_PRIORITIES = ("NORMAL:-VERS-ALL:+VERS-TLS1.2:+VERS-DTLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"
                   "-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-CURVE-ALL:+CURVE-SECP256R1:+CURVE-SECP384R1:%SERVER_PRECEDENCE")
PORT = 443

CONNECT_SCRIPT = """#!/bin/sh
# Replaces vpnc-script: address and MTU on the tunnel, routes to the gateway's side, nothing else.
[ "$reason" = connect ] || exit 0
ip addr add "$INTERNAL_IP4_ADDRESS/32" dev "$TUNDEV"
ip link set dev "$TUNDEV" mtu "${{INTERNAL_IP4_MTU:-1400}}" up
for net in {routes}; do ip route replace "$net" dev "$TUNDEV"; done
echo "$INTERNAL_IP4_ADDRESS $INTERNAL_IP4_MTU" > {ready}
"""


class OcservOptions(Options):
    transport: Literal["dtls", "tls"] = Field("dtls", description="dtls: data over DTLS/UDP; tls: TLS/TCP only")


class Ocserv(Driver):
    name = "ocserv"
    summary = "SSL VPN, AnyConnect protocol: ocserv + openconnect, over DTLS or TLS only"
    tools = (Tool("ocserv", "ocserv", ("ocserv", "--version")), Tool("openconnect", "openconnect",
             ("openconnect", "--version")), OPENSSL)
    Options = OcservOptions
    tunables = (Tunable("transport", ("dtls", "tls")),)

    def describe(self, options, profile):
        return f"ocserv {options.transport}" + ("" if profile == "default" else f" {profile}")

    def implementations(self, options):
        return [Implementation("ocserv", features=("tun",), tools=("ocserv", "openconnect", "openssl"))]

    def ports(self, options):
        """ocserv's: TLS on TCP, with DTLS its UDP port before it (the data's); openconnect connects out."""
        tls = ("tcp", PORT)
        return Ports(gateway=(("udp", PORT), tls) if options.transport == "dtls" else (tls,))

    def overhead(self, options, profile, implementation, inner_len):
        # Both profiles negotiate TLS/DTLS 1.2 with AES-GCM: 5 (TLS) or 13 (DTLS) bytes of record
        # header, an 8-byte explicit nonce and a 16-byte tag around AnyConnect's own header.
        if options.transport == "dtls":
            return 20 + 8 + 13 + 8 + 16 + 1  # IPv4, UDP, DTLS record, nonce, tag, payload type
        return 20 + 32 + 5 + 8 + 16 + 8  # IPv4, TCP with timestamps, TLS record, nonce, tag, CSTP header

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        dtls = options.transport == "dtls"
        pki = make_pki(right.underlay_ip)
        server_pki = pki.install("server", lambda name, data: env.write(right.node, name, data))
        client_pki = pki.install("client", lambda name, data: env.write(left.node, name, data))
        password = random_secrets.token_urlsafe(18)
        config = self._server_config(left, right, dtls, profile, env, server_pki, password)
        data, *control = self.ports(options).gateway  # DTLS keeps the TLS session for control
        tunnel = Tunnel(env, data, control=control)
        log = env.log("ocserv")
        proc = right.node.spawn(private_run(["ocserv", "-f", "-c", config], keep=env.folder(right.node)), log,
                                what="ocserv")
        tunnel.processes.append((right.node, proc, log))
        wait_for(lambda: right.node.listening(PORT), 15, "ocserv to listen", tunnel)
        # Its workers hand each login to sec-mod, which starts beside the listener: a client that comes
        # sooner is cut off mid-handshake (under load: "error connecting to sec-mod socket")
        wait_for(lambda: "sec-mod initialized" in tunnel.read_log(log), 15, "ocserv's sec-mod to start", tunnel)

        client = left.node
        ready = f"{env.folder(client)}/client-ready"
        script = env.write(client, "connect-script", CONNECT_SCRIPT.format(routes=" ".join(right.subnets), ready=ready),
                           mode=0o700)
        answer = env.write(client, "password", password + "\n")
        log = env.log("openconnect")
        argv = self._client_argv(right, dtls, client_pki, script, f"vc{env.unique}")
        proc = client.spawn(["sh", "-c", 'exec "$@" < "$0"', answer, *argv], log, what="openconnect")
        tunnel.processes.append((client, proc, log))
        wait_for(lambda: client.exists(ready), 30, "openconnect to connect", tunnel, interval=0.2)
        mtu = client.read_file(ready).decode().split()
        tunnel.mtu = int(mtu[1]) if len(mtu) > 1 and mtu[1].isdigit() else None
        if dtls:  # the data only moves to UDP once DTLS is up; measure nothing before
            wait_for(lambda: "Established DTLS connection" in tunnel.read_log(log), 15, "the DTLS channel", tunnel)
        return tunnel

    @staticmethod
    def _server_config(left, right, dtls: bool, profile: str, env: TunnelEnv, pki, password: str) -> str:
        """ocserv.conf for this tunnel (0600) on the gateway, with the one user's password file beside it."""
        gateway = right.node
        hashed = gateway.run(["openssl", "passwd", "-6", "-stdin"], input=password).stdout.strip()
        passwd = env.write(gateway, "ocpasswd", f"vpnlab:*:{hashed}\n")
        net = ipaddress.ip_network(f"{left.tunnel_ip}/24", strict=False)
        routes = [f"route = {right.prefix}"] if right.prefix else []
        if left.subnets:  # site-to-site: the client's LANs, reached through its session
            env.write(gateway, "users/vpnlab", "".join(f"iroute = {net}\n" for net in left.subnets))
            routes += [f"config-per-user = {env.folder(gateway)}/users/",
                       # replace: the chain's own route to those LANs must give way to the tunnel
                       'route-add-cmd = "ip route replace %{R} dev %{D}"',
                       'route-del-cmd = "ip route delete %{R} dev %{D}"']
        return env.write(gateway, "ocserv.conf", "\n".join([
            f'auth = "plain[passwd={passwd}]"',
            f"tcp-port = {PORT}",
            *([f"udp-port = {PORT}"] if dtls else []),
            f"listen-host = {right.underlay_ip}",
            "run-as-user = nobody", "run-as-group = nogroup",
            "socket-file = /run/ocserv-socket", "pid-file = /run/ocserv.pid", "use-occtl = false",
            "isolate-workers = false", f"server-cert = {pki.cert}", f"server-key = {pki.key}",
            "max-clients = 16", "max-same-clients = 4", "keepalive = 32400", "dpd = 90", "mobile-dpd = 1800",
            "try-mtu-discovery = false", f'tls-priorities = "{FIPS_PRIORITIES if profile == "fips" else DEFAULT_PRIORITIES}"',
            "auth-timeout = 240", "cookie-timeout = 300", "deny-roaming = false", "rekey-time = 172800",
            "rekey-method = ssl", "device = vpns", "predictable-ips = true",
            f"ipv4-network = {net.network_address}", f"ipv4-netmask = {net.netmask}",
            *routes, "ping-leases = false", "cisco-client-compat = true", "dtls-legacy = true", "log-level = 2",
        ]) + "\n")

    @staticmethod
    def _client_argv(right, dtls: bool, pki, script: str, dev: str) -> list[str]:
        # The per-run CA authenticates the gateway, whose certificate names its IP.
        client = ["openconnect", "--protocol=anyconnect", "--user=vpnlab", "--passwd-on-stdin", "--non-inter",
                  f"--cafile={pki.ca}", f"--script={script}", f"--interface={dev}",
                  *([] if dtls else ["--no-dtls"]), f"https://{right.underlay_ip}:{PORT}/"]
        if dtls:
            # openconnect sizes its UDP socket's send buffer as MTU x queue length (default 10:
            # about 20 packets). The WAN's bottleneck queue (tbf, netem) sits in the client's own
            # namespace here, and packets waiting in it count against that buffer, which no real
            # client's socket sees. Once it is full, openconnect 9 sends what DTLS could not take
            # over the TLS channel: 30-45% of the packets took the other path, arrived out of order
            # and TCP retransmitted 15-25% of its segments. 4096 x MTU (12 MB, doubled by the kernel
            # and allowed by the namespace's wmem_max) holds the default 50 ms queue up to 1 Gbit/s.
            client[1:1] = ["--queue-len=4096"]
        return client

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """TLS 1.2 in both profiles (the default priorities leave TLS 1.3 out, as Debian's ocserv.conf
        does), ECDHE P-256 with the per-run ECDSA P-256 certificate, AES-256-GCM; with DTLS the data
        moves to DTLS 1.2, keyed from the TLS session (PSK-NEGOTIATE), also AES-256-GCM."""
        data = "DTLS 1.2 (PSK from the TLS session)" if options.transport == "dtls" else "TLS 1.2 (CSTP)"
        return Algorithms(control="TLS 1.2", key_exchange="ECDH P-256", authentication="ECDSA SHA-256",
                          control_cipher="AES-256-GCM", data=data, data_cipher="AES-256-GCM", data_integrity=AEAD,
                          source="ocserv driver")

    def negotiated(self, tunnel, options, profile):
        """openconnect's log: 'Connected to HTTPS ... with ciphersuite ...', 'Established DTLS connection'."""
        return read_logs(tunnel, "openconnect", parse_log)


def parse_log(text: str) -> Algorithms | None:
    """openconnect: 'Connected to HTTPS on 198.19.0.2 with ciphersuite (TLS1.2)-(ECDHE-SECP256R1)-
    (ECDSA-SHA256)-(AES-256-GCM)' and 'Established DTLS connection (using GnuTLS). Ciphersuite
    (DTLS1.2)-(PSK)-(AES-256-GCM).'"""
    tls = re.findall(r"with ciphersuite ((?:\([^)]*\)-?)+)", text)
    dtls = re.findall(r"Established DTLS connection.*?Ciphersuite ((?:\([^)]*\)-?)+)", text)
    if not tls:
        return None
    version, kx, auth, cipher, *mac = re.findall(r"\(([^)]*)\)", tls[-1])
    values = {"control": version.replace("TLS", "TLS "), "key_exchange": group_name(kx.replace("ECDHE-", "")),
              "authentication": auth.replace("-SHA", " SHA-"), "control_cipher": gnutls_cipher(cipher, mac)}
    if dtls:
        d_version, d_kx, d_cipher, *d_mac = re.findall(r"\(([^)]*)\)", dtls[-1])
        values["data"] = d_version.replace("DTLS", "DTLS ") + (" (PSK from the TLS session)" if d_kx == "PSK" else "")
        values["data_cipher"] = gnutls_cipher(d_cipher, [])
        values["data_integrity"] = AEAD if d_cipher.endswith(("GCM", "POLY1305")) else (
            integrity_name(d_mac[0]) if d_mac else "")
    else:
        values["data"] = values["control"] + " (CSTP)"
        values["data_cipher"] = values["control_cipher"].split(" ")[0]
        values["data_integrity"] = AEAD if cipher.endswith(("GCM", "POLY1305")) else (
            integrity_name(mac[0]) if mac else "")
    return Algorithms(**values, source="openconnect log")


def gnutls_cipher(cipher: str, mac: list[str]) -> str:
    name = cipher_name(cipher)
    return name if not mac or name.endswith(("GCM", "Poly1305")) else f"{name} {integrity_name(mac[0])}"
