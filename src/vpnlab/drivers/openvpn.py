"""OpenVPN 2.x with a per-run PKI (TLS, client/server), or a per-run static key (`key: static`).

The left site is the client, the right site the server. Data cipher, HMAC, compression, transport
and the key mode are the knobs the seed studies turned (Jaha 2014 ran OpenVPN 2.0.9 with a static key).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator

from ..algorithms import AEAD, Algorithms, cipher_name, fips_approved, group_name, integrity_name, read_logs
from ..tools import Tool
from .base import Driver, Implementation, Options, Ports, Tunable, Tunnel, TunnelEnv, marked_unset, route_into, stated_lines, wait_for
from .pki import OPENSSL, make_pki

# cipher -> (block size in bytes, AEAD?)
CIPHERS = {
    "AES-128-GCM": (16, True),
    "AES-256-GCM": (16, True),
    "CHACHA20-POLY1305": (1, True),
    "AES-128-CBC": (16, False),
    "AES-256-CBC": (16, False),
    "DES-EDE3-CBC": (8, False),
    "BF-CBC": (8, False),
}
HMAC_BYTES = {"MD5": 16, "SHA1": 20, "SHA256": 32, "SHA512": 64}
LEGACY_CIPHERS = {"BF-CBC"}  # only in OpenSSL 3's legacy provider
FIPS_CIPHERS = {cipher for cipher in CIPHERS if fips_approved(cipher_name(cipher))}
FIPS_AUTH = {auth for auth in HMAC_BYTES if fips_approved(integrity_name(auth))}  # HMAC-SHA1 is still approved
DEFAULT_CIPHER = "AES-256-GCM"  # what OpenVPN 2.6 negotiates out of the box
DEFAULT_AUTH = {"default": "SHA1", "fips": "SHA256"}

CipherName = Literal["AES-128-GCM", "AES-256-GCM", "CHACHA20-POLY1305", "AES-128-CBC", "AES-256-CBC",
                     "DES-EDE3-CBC", "BF-CBC"]


class OpenVpnOptions(Options):
    cipher: CipherName | None = Field(None, description="data-channel cipher (default: the profile's)")
    auth: Literal["MD5", "SHA1", "SHA256", "SHA512"] | None = Field(None, description="HMAC for CBC ciphers")
    compression: Literal["off", "lzo", "lz4-v2"] = "off"
    transport: Literal["udp", "tcp"] = "udp"
    port: int = Field(1194, ge=1, le=65535)
    mtu: int | None = Field(None, ge=576, le=9000, description="--tun-mtu, by hand (default 1500, or for a tunnel "
                            "inside another what fits in it); TCP's MSS is clamped to fit it")
    socket_buffer: int | None = Field(None, ge=4096, le=64 * 1024 * 1024, description="--sndbuf and --rcvbuf in "
                                      "bytes (default: the system's)")
    key: Literal["tls", "static"] = Field("tls", description="tls: a TLS handshake with per-run certificates; "
                                          "static: a pre-shared static key, no handshake (--secret, CBC ciphers "
                                          "only; deprecated in 2.6, to go in 2.7)")

    omit_at_default = ("mtu", "socket_buffer", "key")

    @field_validator("cipher", "auth", mode="before")
    @classmethod
    def upper_case(cls, value):
        return value.upper() if isinstance(value, str) else value

    @field_validator("compression", mode="before")
    @classmethod
    def yaml_off(cls, value):
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false


def effective(options: OpenVpnOptions, profile: str) -> tuple[str, str | None]:
    """(cipher, auth) that will run; auth is None for AEAD ciphers, which authenticate themselves."""
    cipher = options.cipher or DEFAULT_CIPHER
    aead = CIPHERS[cipher][1]
    return cipher, None if aead else (options.auth or DEFAULT_AUTH[profile])


def _both_ends(options: OpenVpnOptions, profile: str, dev: str, mtu: int | None) -> list:
    """The arguments server and client share: device, data channel, compression, MTU, TLS policy."""
    cipher, auth = effective(options, profile)
    args = ["--dev-type", "tun", "--dev", dev, "--verb", "3", "--suppress-timestamps",
            "--ping", "10", "--ping-restart", "60", "--mute-replay-warnings"]
    args += (["--cipher", cipher] if options.key == "static" else
             ["--dh", "none", "--data-ciphers", cipher, "--data-ciphers-fallback", cipher])
    if auth:
        args += ["--auth", auth]
    if cipher in LEGACY_CIPHERS:
        args += ["--providers", "legacy", "default"]
    if options.compression != "off":
        args += ["--allow-compression", "yes", "--compress", options.compression]
    if mtu:
        args += ["--tun-mtu", mtu, "--mssfix", mtu, "fixed"]  # TCP segments that fill the MTU, no more
    if options.socket_buffer:
        args += ["--sndbuf", options.socket_buffer, "--rcvbuf", options.socket_buffer]
    if profile == "fips":
        # --tls-groups, not --ecdh-curve: OpenSSL 3 builds ignore the curve ("using default curves")
        # and the key exchange was X25519, which FIPS 140 does not approve (parse_log reads it).
        args += ["--tls-version-min", "1.2", "--tls-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384",
                 "--tls-ciphersuites", "TLS_AES_256_GCM_SHA384", "--tls-groups", "prime256v1"]
    return args


# The TLS policy of the fips profile, as configuration lines (_both_ends passes them as arguments).
FIPS_TLS = (("tls-version-min", "1.2"), ("tls-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"),
            ("tls-ciphersuites", "TLS_AES_256_GCM_SHA384"), ("tls-groups", "prime256v1"))


def _security(cipher: str) -> str:
    return "fips" if cipher in FIPS_CIPHERS else "weak" if CIPHERS[cipher][0] == 8 else "strong"  # 64-bit blocks


def _tls_ends(left, right, options: OpenVpnOptions, env: TunnelEnv, common: list, udp: bool) -> tuple[list, list]:
    """The server's and the client's arguments in client/server mode over TLS, with a per-run PKI."""
    pki = make_pki(right.underlay_ip)
    server_pki = pki.install("server", lambda name, data: env.write(right.node, name, data))
    client_pki = pki.install("client", lambda name, data: env.write(left.node, name, data))
    # Client/server mode: the server pushes the client its address the moment the handshake
    # ends, and the tunnel is up. In point-to-point mode OpenVPN 2.6 waited for the next tick of
    # a whole-second timer instead (and a TCP server looks for a new connection once a second):
    # 1.1-2.2 s of every set-up. Ciphers, key exchange and data-channel packets (P_DATA_V2 with
    # a peer-id) are the same in both modes.
    ccd = env.write(right.node, "ccd/vpnlab-client",  # named after the client certificate's CN (pki.py)
                    f"ifconfig-push {left.tunnel_ip} 255.255.255.0\n"  # the layer's /24 (topology.py)
                    + "".join(f"iroute {net.network_address} {net.netmask}\n"  # its LANs, site-to-site
                              for net in map(ipaddress.ip_network, left.subnets)))
    server = common + ["--mode", "server", "--tls-server", "--ca", server_pki.ca,
                       "--cert", server_pki.cert, "--key", server_pki.key,
                       "--proto", "udp" if udp else "tcp-server", "--lport", options.port,
                       "--topology", "subnet", "--ifconfig", right.tunnel_ip, "255.255.255.0",
                       "--push", "topology subnet", "--client-config-dir", PurePosixPath(ccd).parent]
    client = common + ["--client", "--remote-cert-tls", "server", "--ca", client_pki.ca,
                       "--cert", client_pki.cert, "--key", client_pki.key,
                       "--proto", "udp" if udp else "tcp-client",
                       "--remote", right.underlay_ip, options.port, "--nobind"]
    return server, client


def static_key() -> str:
    """A new OpenVPN static key file (2048 random bits: two keys each way, cipher and HMAC), as
    `openvpn --genkey secret` writes one."""
    hexed = secrets.token_hex(256)
    return ("-----BEGIN OpenVPN Static key V1-----\n" + "".join(f"{hexed[i:i + 32]}\n" for i in range(0, 512, 32))
            + "-----END OpenVPN Static key V1-----\n")


def _static_ends(left, right, options: OpenVpnOptions, env: TunnelEnv, common: list, udp: bool) -> tuple[list, list]:
    """The server's and the client's arguments in point-to-point mode with one pre-shared static key
    (direction 0 at the server, 1 at the client: each way its own keys). No handshake: each end is up
    once the other's first packet arrived (about 5 s after the client starts, measured)."""
    key = static_key()
    server = common + ["--secret", env.write(right.node, "static.key", key), "0",
                       "--proto", "udp" if udp else "tcp-server", "--lport", options.port,
                       "--ifconfig", right.tunnel_ip, left.tunnel_ip]
    client = common + ["--secret", env.write(left.node, "static.key", key), "1",
                       "--proto", "udp" if udp else "tcp-client",
                       "--remote", right.underlay_ip, options.port, "--nobind",
                       "--ifconfig", left.tunnel_ip, right.tunnel_ip]
    return server, client


class OpenVpn(Driver):
    name = "openvpn"
    summary = "OpenVPN (TLS with a per-run PKI, or a static key): cipher, auth, compression, UDP or TCP"
    tools = (Tool("openvpn", "openvpn", ("openvpn", "--version")), OPENSSL)
    Options = OpenVpnOptions
    mesh = "hub"  # a server that its clients reach each other through (the default up_mesh)
    # Compression before encryption lets packet sizes betray the contents (VORACLE): OpenVPN 2.6
    # refuses it unless allowed, so it is weak. MD5 and SHA1 HMACs are left out: SHA256 is as fast.
    tunables = (
        Tunable("cipher", ("AES-256-GCM", "AES-128-GCM", "CHACHA20-POLY1305", "AES-256-CBC", "BF-CBC"),
                {c: _security(c) for c in CIPHERS}),
        Tunable("auth", (None, "SHA256"), {"MD5": "weak", "SHA1": "fips", "SHA256": "fips", "SHA512": "fips"}),
        Tunable("transport", ("udp", "tcp")),
        Tunable("compression", ("off", "lz4-v2"), {"lzo": "weak", "lz4-v2": "weak"}),
        Tunable("mtu", (None, 1400)),
        Tunable("socket_buffer", (None, 512 * 1024)),
    )

    def check(self, options, profile):
        cipher, auth = effective(options, profile)
        if options.auth and CIPHERS[cipher][1]:
            return f"options.auth: {options.auth} applies only to CBC ciphers; {cipher} authenticates itself"
        if options.key == "static" and CIPHERS[cipher][1]:
            return f"options.cipher: a static key carries CBC ciphers only ({cipher} needs TLS's per-session keys)"
        if options.key == "static" and profile == "fips":
            return "options.key: the fips profile holds TLS to FIPS 140's algorithms; a static key has no TLS"
        if profile == "fips":
            if cipher not in FIPS_CIPHERS:
                return f"options.cipher: {cipher} is not FIPS 140-approved (use AES-128/256-GCM or -CBC)"
            if auth and auth not in FIPS_AUTH:
                return f"options.auth: {auth} is not FIPS 140-approved (use SHA1, SHA256 or SHA512)"
        return None

    def describe(self, options, profile):
        cipher, auth = effective(options, profile)
        parts = ["openvpn", cipher.lower() + (f"-{auth.lower()}" if auth else ""), options.transport]
        if options.compression != "off":
            parts.append(options.compression)
        if options.mtu:
            parts.append(f"mtu-{options.mtu}")
        if options.socket_buffer:
            parts.append(f"buffers-{options.socket_buffer // 1024}k")
        if options.key == "static":
            parts.append("static-key")
        if profile != "default":
            parts.append(profile)
        return " ".join(parts)

    def settings(self, options, profile):
        """Lines of an OpenVPN configuration file, the same at both ends."""
        cipher, auth = effective(options, profile)
        lines = [f"# {self.describe(options, profile)}: the same at both ends",
                 f"proto {options.transport}" + ("  # tcp-server at the server, tcp-client at the client"
                                                 if options.transport == "tcp" else ""),
                 *([f"secret static.key  # 0 at the server, 1 at the client", f"cipher {cipher}"]
                   if options.key == "static" else [f"data-ciphers {cipher}", f"data-ciphers-fallback {cipher}"])]
        lines += [f"auth {auth}" if options.auth else marked_unset(f"auth {auth}")] if auth else []
        lines += ["providers legacy default"] if cipher in LEGACY_CIPHERS else []
        if options.compression != "off":
            lines += ["allow-compression yes", f"compress {options.compression}"]
        lines += [f"tun-mtu {options.mtu}", f"mssfix {options.mtu} fixed"] if options.mtu else []
        if options.socket_buffer:
            lines += [f"sndbuf {options.socket_buffer}", f"rcvbuf {options.socket_buffer}"]
        lines += [f"{key} {value}" for key, value in FIPS_TLS] if profile == "fips" else []
        return "\n".join(lines) + "\n"

    def from_settings(self, text):
        """The options of a configuration fragment as `settings` writes it."""
        found = {}
        for line in stated_lines(text):
            words = line.split("#", 1)[0].split()
            key, value = (words[0], words[1]) if len(words) > 1 else (None, None)
            target = {"proto": "transport", "data-ciphers": "cipher", "cipher": "cipher", "auth": "auth",
                      "compress": "compression", "tun-mtu": "mtu", "sndbuf": "socket_buffer", "secret": "key"}.get(key)
            if target:
                found[target] = ("tcp" if target == "transport" and value.startswith("tcp") else
                                 "static" if target == "key" else value)
        return OpenVpnOptions.model_validate(found)

    def implementations(self, options):
        features = ("tun", "openssl-legacy") if options.cipher in LEGACY_CIPHERS else ("tun",)
        return [Implementation("openvpn", features=features, tools=("openvpn", "openssl"))]

    def overhead(self, options, profile, implementation, inner_len):
        """For incompressible data: compressible data shrinks instead."""
        cipher, auth = effective(options, profile)
        block, aead = CIPHERS[cipher]
        outer = 20 + (8 if options.transport == "udp" else 32 + 2)  # IPv4 + UDP, or TCP w/ timestamps + length
        static = options.key == "static"
        opcode = 0 if static else 4  # P_DATA_V2: opcode and peer-id; a static key's packets have no opcode
        packet_id = 8 if static else 4  # a static key's packet-id carries a timestamp (the long form)
        # lzo framing always adds a flag byte; lz4-v2 adds none to a packet it leaves uncompressed.
        plain = inner_len + (1 if options.compression == "lzo" else 0)
        if aead:
            return outer + opcode + 4 + 16 + plain - inner_len  # packet-id, tag
        encrypted = -(-(packet_id + plain + 1) // block) * block  # packet-id + payload + PKCS#7 padding
        return outer + opcode + HMAC_BYTES[auth] + block + encrypted - inner_len  # ... + IV

    def ports(self, options):
        return Ports(gateway=((options.transport, options.port),))  # the client: --nobind, or it connects out

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        dev = f"vo{env.unique}"
        mtu = env.mtu(options, None)  # None: OpenVPN's own 1500, with MSS clamped for 1492-byte outer packets
        (server_port,) = self.ports(options).gateway  # its packets on the WAN
        tunnel = Tunnel(env, server_port, mtu=mtu or 1500)
        common = _both_ends(options, profile, dev, mtu)
        udp = options.transport == "udp"
        ends = (_static_ends if options.key == "static" else _tls_ends)(left, right, options, env, common, udp)
        logs = {}
        for site, argv in zip((right, left), ends):
            log = env.log(f"openvpn-{site.node.role}")
            proc = site.node.spawn(["openvpn", *argv], log, what="openvpn")
            tunnel.processes.append((site.node, proc, log))
            logs[site.node.role] = log
            if site is right:
                # The client starts once the server's socket exists: a UDP client that starts first
                # gets "port unreachable" and tries again only after OpenVPN's 2 s handshake timeout.
                wait_for(lambda: right.node.listening(options.port, udp), 15,
                         "the OpenVPN server's socket", tunnel, interval=0.01)
        ready = "Initialization Sequence Completed"
        wait_for(lambda: all(ready in tunnel.read_log(log) for log in logs.values()), 30,
                 "OpenVPN to complete its initialisation", tunnel, interval=0.01)
        route_into(left.node, right.subnets, dev)
        route_into(right.node, left.subnets, dev)
        return tunnel

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """TLS 1.3 (OpenSSL 3: both ends speak it; fips allows 1.2 too) with TLS_AES_256_GCM_SHA384 and
        the per-run ECDSA P-256 certificates (pki.py) in both profiles. The key exchange is OpenSSL's
        default X25519, under fips P-256. The data channel: the cipher, and the HMAC of CBC ciphers. A
        static key has no control channel: the one key, given to both ends beforehand, is all there is."""
        cipher, auth = effective(options, profile)
        if options.key == "static":
            return Algorithms(control="none (static key)", key_exchange="none (pre-shared static key)",
                              authentication="pre-shared static key", data=f"OpenVPN over {options.transport.upper()}",
                              data_cipher=cipher_name(cipher), data_integrity=integrity_name(auth),
                              source="openvpn driver")
        return Algorithms(control="TLS 1.3", key_exchange="ECDH P-256" if profile == "fips" else "X25519",
                          authentication="ECDSA P-256 SHA-256", control_cipher="AES-256-GCM",
                          data=f"OpenVPN over {options.transport.upper()}", data_cipher=cipher_name(cipher),
                          data_integrity=AEAD if auth is None else integrity_name(auth), source="openvpn driver")

    def negotiated(self, tunnel, options, profile):
        """Its log: 'Control Channel: TLSv1.3, cipher ..., peer temporary key: ...' and 'Data Channel: ...'."""
        return read_logs(tunnel, "openvpn", parse_log)


def parse_log(text: str) -> Algorithms | None:
    """OpenVPN 2.x: 'Control Channel: TLSv1.3, cipher TLSv1.3 TLS_AES_256_GCM_SHA384, peer certificate:
    256 bits ECprime256v1, signature: ecdsa-with-SHA256, peer temporary key: 253 bits X25519' and
    "Data Channel: cipher 'AES-128-CBC', auth 'SHA256', peer-id: 0"."""
    control = re.findall(r"Control Channel: (TLSv[\d.]+), cipher \S+ ([\w-]+)(.*)", text)
    data = re.findall(r"Data Channel: cipher '([^']+)'(?:, auth '([^']+)')?", text)
    if not control and not data:
        return None
    values = {}
    if control:
        version, suite, rest = control[-1]
        values["control"] = version.replace("TLSv", "TLS ")
        values["control_cipher"] = tls_suite_cipher(suite)
        key = re.search(r"peer temporary key: \d+ bits? ([\w-]+)", rest)
        if key:
            values["key_exchange"] = group_name(key.group(1))
        cert = re.search(r"peer certificate: (\d+) bits? (\w+?)(prime256v1|secp384r1|secp521r1)?, signature: "
                         r"([\w-]+)", rest)
        if cert:
            bits, kind, curve, signature = cert.groups()
            digest = re.search(r"SHA-?(\d+)", signature, re.I)
            if kind.upper().startswith("EC"):
                named = group_name(curve).replace("ECDH ", "") if curve else f"{bits}-bit"
                values["authentication"] = f"ECDSA {named}" + (f" SHA-{digest.group(1)}" if digest else "")
            else:
                values["authentication"] = f"{kind.upper()}-{bits}" + (f" SHA-{digest.group(1)}" if digest else "")
    if data:
        cipher, auth = data[-1]
        values["data_cipher"] = cipher_name(cipher)
        aead = "GCM" in cipher.upper() or "POLY1305" in cipher.upper()
        values["data_integrity"] = AEAD if aead else (integrity_name(auth) if auth and "null" not in auth else "none")
    return Algorithms(**values, source="OpenVPN log")


def tls_suite_cipher(suite: str) -> str:
    """TLS_AES_256_GCM_SHA384 / ECDHE-ECDSA-AES256-GCM-SHA384 / TLS_CHACHA20_POLY1305_SHA256 -> the cipher."""
    key = suite.upper().replace("_", "-")
    if "CHACHA20" in key:
        return "ChaCha20-Poly1305"
    m = re.search(r"AES-?(\d+)-(GCM|CBC|CCM)", key)
    return f"AES-{m.group(1)}-{m.group(2)}" if m else suite
