"""tinc 1.0 (Debian's 1.0.36) in router mode: the client's tincd connects to the gateway's (the meta
connection, TCP), both exchange packet keys over it, and the data goes over UDP on the same port.

tinc sends the packets it cannot yet send over UDP through the meta connection instead: those
before the packet keys are known, and, while its path-MTU discovery runs (a few seconds after
connecting), those longer than the shortest size it has found to pass. `up` waits until discovery
has settled on both ends (their node dumps say so), so that a measurement sees the data channel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import Field

from ..algorithms import Algorithms, integrity_name, read_logs
from ..testbed.contract import Process
from ..testbed.idle import signal_when_asleep_in, wait_asleep
from ..testbed.topology import TunnelSite
from ..tools import Tool
from .base import Driver, Implementation, Mesh, Options, Ports, Tunnel, TunnelEnv, route_into, wait_for

TINCD = Tool("tincd", "tinc", ("tincd", "--version"))
RSA_BITS = 2048  # tincd -K's default
ETHERNET = 14  # router mode still carries an Ethernet header in front of each IP packet
SEQNO = 4
# cipher -> (block size, key bytes, OpenSSL NID as tinc's node dump prints it); CBC only: tinc 1.0
# restarts each packet at the key's fixed IV, which its sequence number disguises in CBC's first
# block but would repeat a stream cipher's keystream.
CIPHERS = {"aes-256-cbc": (16, 32, 427), "aes-192-cbc": (16, 24, 423), "aes-128-cbc": (16, 16, 419),
           "camellia-256-cbc": (16, 32, 753), "camellia-128-cbc": (16, 16, 751), "none": (1, 0, 0)}
DIGESTS = {"sha256": (32, 672), "sha512": (64, 674), "sha1": (20, 64), "md5": (16, 4), "none": (0, 0)}
DEFAULT_MAC_LENGTH = 4  # tinc 1.0's MACLength default: a 32-bit truncated HMAC
ZLIB_STORED = 2 + 5 + 4  # zlib header, one stored block's header, Adler-32: what deflate adds to random bytes
LZO_END = 3  # LZO1X's end-of-stream marker
LZO_SHORT_RUN = 238  # the longest first literal run whose length LZO1X writes in one byte
PEER = {"a": "b", "b": "a"}  # the client's end and the gateway's, as tinc names them
PMTU_TIMEOUT_S = 40  # tinc fixes the path MTU after 30 probes at the latest, one burst a second
IDLE_LEARN_S, DUMP_WAIT_S = 5, 1  # to find tincd asleep in its main loop's select: once, and per dump

CipherName = Literal["aes-256-cbc", "aes-192-cbc", "aes-128-cbc", "camellia-256-cbc", "camellia-128-cbc", "none"]


class TincOptions(Options):
    cipher: CipherName = Field("aes-256-cbc", description="data cipher (tinc 1.0.36's default aes-256-cbc; none: "
                                                          "not encrypted)")
    digest: Literal["sha256", "sha512", "sha1", "md5", "none"] = Field("sha256", description="HMAC of each packet")
    mac_length: int | None = Field(None, ge=0, le=64, description=f"bytes of the HMAC sent (default "
                                                                  f"{DEFAULT_MAC_LENGTH}; 0 with digest none)")
    compression: int = Field(0, ge=0, le=11, description="0 off, 1-9 zlib levels, 10 LZO fast, 11 LZO best")
    port: int = Field(655, ge=1, le=65535)
    mtu: int | None = Field(None, ge=576, le=9000, description="the tun MTU by hand (default tinc's 1500, which its "
                            "path-MTU discovery and MSS clamping fit to the path), or for a tunnel inside another what "
                            "fits in it")

    @property
    def mac_bytes(self) -> int:
        if not DIGESTS[self.digest][0]:  # digest none
            return 0
        return DEFAULT_MAC_LENGTH if self.mac_length is None else self.mac_length


def compressed_size(length: int, level: int) -> int:
    """What tinc's compression makes of `length` incompressible bytes (the proof's random probes)."""
    if level == 0:
        return length
    if level <= 9:
        return length + ZLIB_STORED
    # LZO1X: one literal run from the start, its length in one byte up to 238, else a zero byte, a zero
    # byte per further 255, and the rest
    if length <= LZO_SHORT_RUN:
        return length + 1 + LZO_END
    return length + 1 + (length - 18 - 1) // 255 + 1 + LZO_END


class Tinc(Driver):
    name = "tinc"
    summary = "tinc 1.0 (RSA meta connection, CBC + truncated HMAC over UDP): cipher, digest, compression"
    tools = (TINCD, Tool("kill", "procps"))  # kill: a node dump where /proc does not say what tincd does
    Options = TincOptions
    mesh = "full"

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: tinc 1.0 has no FIPS 140 mode: it calls OpenSSL without its FIPS provider, and its "
                    "meta connection exchanges keys with raw RSA encryption without padding, which FIPS 140 "
                    "does not approve")
        size = DIGESTS[options.digest][0]
        if not size and options.mac_length:
            return "options.mac_length: digest none sends no HMAC"
        if (options.mac_length or 0) > size:
            return f"options.mac_length: {options.mac_length} bytes exceed the {size}-byte {options.digest} digest"
        return None

    def describe(self, options, profile):
        parts = ["tinc", options.cipher, options.digest]
        if options.mac_length is not None:
            parts.append(f"mac{options.mac_length}")
        if options.compression:
            parts.append(f"compression-{options.compression}")
        if options.mtu:
            parts.append(f"mtu-{options.mtu}")
        return " ".join(parts + ([profile] if profile != "default" else []))

    def implementations(self, options):
        return [Implementation("tinc", features=("tun",), tools=("tincd",))]

    def ports(self, options):
        # every tincd, on its host file's Port: the data over UDP, the meta connections over TCP
        listen = (("udp", options.port), ("tcp", options.port))
        return Ports(gateway=listen, client=listen)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        block = CIPHERS[options.cipher][0]
        plain = SEQNO + compressed_size(ETHERNET + inner_len, options.compression)
        encrypted = (plain // block + 1) * block if encrypts(options.cipher) else plain  # PKCS#7 padding
        return 20 + 8 + encrypted + options.mac_bytes - inner_len  # IPv4, UDP

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        mtu = env.mtu(options, None)
        tunnel = _tunnel(env, self.ports(options), options, mtu)
        ends = {"b": right, "a": left}
        keys = {end: rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS) for end in ends}
        started = {end: _start(env, tunnel, end, ends, keys, options, mtu, None if end == "b" else "b")
                   for end in ends}  # the gateway first: the client connects to it
        for end, tincd in started.items():
            route_into(tincd.site.node, ends[PEER[end]].subnets, f"vt{env.unique}{end}")
        for end, tincd in started.items():
            wait_for(lambda: _path_mtu_settled(tunnel, tincd, PEER[end]), PMTU_TIMEOUT_S,
                     f"tinc's path-MTU discovery in {tincd.site.node.role}", tunnel, interval=0.25)
        return tunnel

    def up_mesh(self, sites, options, profile, env: TunnelEnv) -> Mesh:
        """Every peer's tincd makes its meta connection to peer 0's (ConnectTo p0) and knows every
        peer's host file; packet keys go over the meta connections, the data directly between peers
        over UDP. `settle` waits for every path-MTU discovery (each pair's starts with its first packet)."""
        mtu = env.mtu(options, None)
        tunnel = _tunnel(env, self.ports(options), options, mtu)
        ends = {f"p{k}": site for k, site in enumerate(sites)}
        keys = {end: rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS) for end in ends}
        started = {}

        def start(end: str) -> None:
            started[end] = _start(env, tunnel, end, ends, keys, options, mtu, None if end == "p0" else "p0")

        def settle() -> None:
            for end, tincd in started.items():
                for other in ends.keys() - {end}:
                    wait_for(lambda: _path_mtu_settled(tunnel, tincd, other), PMTU_TIMEOUT_S,
                             f"tinc's path-MTU discovery from {end} to {other}", tunnel, interval=0.25)

        for end in list(ends)[:-1]:
            start(end)
        return Mesh([tunnel], [site.tunnel_ip for site in sites], lambda: start(f"p{len(sites) - 1}"), settle)

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """tinc 1.0's meta protocol: each side sends a random key encrypted with the other's RSA-2048
        public key (no padding) and proves its own with a SHA-256 challenge; the meta connection then
        runs AES in CFB mode with a key as long as the data cipher's (AES-128 with none). Packet keys
        go over it; the data runs the cipher in CBC with a truncated HMAC."""
        key_bytes = CIPHERS[options.cipher][1]
        meta = 128 if key_bytes <= 16 else 192 if key_bytes <= 24 else 256
        mac = options.mac_bytes
        integrity = f"{integrity_name(options.digest)}-{mac * 8}" if mac else "none"
        return Algorithms(control="tinc 1.0 meta protocol (TCP)", key_exchange=f"RSA-{RSA_BITS} (no padding)",
                          authentication=f"RSA-{RSA_BITS} challenge SHA-256", control_cipher=f"AES-{meta}-CFB",
                          data=_data_channel(options.compression), data_cipher=_cipher_label(options.cipher),
                          data_integrity=integrity, source="tinc driver")

    def negotiated(self, tunnel, options, profile):
        """The client's last node dump (SIGUSR2, sent while `up` waited): the cipher, digest, MAC
        length and compression the gateway asked for, which the client sends with. The meta connection's
        algorithms are not logged."""
        return read_logs(tunnel, "tincd", parse_node_dump)


def _data_channel(compression: int) -> str:
    """The data channel's name, with its compression (the node dump's level, or the option)."""
    return "tinc over UDP" + (f" + {'zlib' if compression <= 9 else 'LZO'} level {compression}" if compression else "")


def encrypts(cipher: str) -> bool:
    """Not tinc's cipher `none`."""
    return CIPHERS[cipher][1] > 0


def _cipher_label(cipher: str) -> str:
    return cipher.upper().replace("CAMELLIA", "Camellia") if encrypts(cipher) else cipher


_NODE = re.compile(r"^ (\S+) at (?!MYSELF)\S+ port \d+ cipher (\d+) digest (\d+) maclength (\d+) compression (\d+) "
                   r".* pmtu (\d+) \(min (\d+) max (\d+)\)$", re.M)
_CIPHER_NIDS = {nid: name for name, (_, _, nid) in CIPHERS.items()}
_DIGEST_NIDS = {nid: name for name, (_, nid) in DIGESTS.items()}


def last_dump(text: str) -> str:
    """The last complete node dump in a tincd log ('Nodes:' ... 'End of nodes.')."""
    end = text.rfind("End of nodes.")
    start = text.rfind("Nodes:", 0, end)
    return text[start:end] if start >= 0 and end >= 0 else ""


def parse_node_dump(text: str) -> Algorithms | None:
    """' b at 198.19.0.2 port 655 cipher 427 digest 672 maclength 4 compression 0 options c status 001a
    nexthop b via b pmtu 1451 (min 1451 max 1451)': what this node sends to b with."""
    found = _NODE.findall(last_dump(text))
    if not found:
        return None
    _, cipher, digest, mac, compression, *_ = found[-1]
    cipher_name = _CIPHER_NIDS.get(int(cipher))  # NID 0: none
    digest_name = _DIGEST_NIDS.get(int(digest), f"OpenSSL NID {digest}")
    integrity = f"{integrity_name(digest_name)}-{int(mac) * 8}" if int(digest) and int(mac) else "none"
    data_cipher = _cipher_label(cipher_name) if cipher_name else f"OpenSSL NID {cipher}"
    return Algorithms(data=_data_channel(int(compression)), data_cipher=data_cipher, data_integrity=integrity,
                      source="tincd node dump (the meta connection's algorithms are not logged)")


@dataclass
class Tincd:
    site: TunnelSite
    proc: Process
    log: Path
    idle_call: str | None  # the system call it sleeps in when idle (None: this kernel does not say)


def _path_mtu_settled(tunnel: Tunnel, tincd: Tincd, peer: str) -> bool:
    """Has this end's path-MTU discovery towards the peer settled (min = max)? Asks for a new node
    dump for the next look: tinc 1.0 writes it from its SIGUSR2 handler, allocating as it goes, so
    the signal goes only while tincd sleeps in its idle call (one landing mid-malloc can corrupt the heap:
    in one of ~10 suite runs tincd died of 'malloc assertion failure in sysmalloc' in a dump)."""
    settled = any(name == peer and int(low) == int(high) > 0
                  for name, *_, low, high in _NODE.findall(last_dump(tunnel.read_log(tincd.log))))
    if not settled:
        node = tincd.site.node
        if tincd.idle_call is None:
            node.run(["kill", "-s", "USR2", str(tincd.proc.pid)], check=False, timeout=10)
        elif not signal_when_asleep_in(node, tincd.proc.pid, tincd.idle_call, "USR2", DUMP_WAIT_S):
            # learnt while it slept elsewhere? (kept if it is not seen asleep now: a busy machine is when
            # an unguarded signal is likeliest to land mid-malloc)
            tincd.idle_call = wait_asleep(node, tincd.proc, IDLE_LEARN_S) or tincd.idle_call
    return settled


def _tunnel(env: TunnelEnv, ports: Ports, options: TincOptions, mtu: int | None) -> Tunnel:
    data, meta = ports.gateway
    return Tunnel(env, data, mtu or 1500, control=[meta], encrypted=encrypts(options.cipher))


def _start(env: TunnelEnv, tunnel: Tunnel, end: str, ends: dict, keys: dict, options: TincOptions,
           mtu: int | None, connect_to: str | None) -> Tincd:
    """Write this end's configuration, start its tincd, address its interface once tincd is ready."""
    site = ends[end]
    there = _config(env, end, ends, keys, options, connect_to)
    dev = f"vt{env.unique}{end}"
    log = env.log(f"tincd-{site.node.role}")
    proc = site.node.spawn(["tincd", "-c", there, "-D", "-d1", f"--pidfile={there}/tinc.pid"], log, what="tincd")
    tunnel.processes.append((site.node, proc, log))
    wait_for(lambda: "\nReady\n" in tunnel.read_log(log), 15, f"tincd in {site.node.role}", tunnel)
    site.node.ip(f"addr add {site.tunnel_ip}/24 dev {dev}", f"link set {dev} {f'mtu {mtu} ' if mtu else ''}up")
    return Tincd(site, proc, log, wait_asleep(site.node, proc, IDLE_LEARN_S))


def _config(env: TunnelEnv, end: str, ends: dict, keys: dict, options: TincOptions, connect_to: str | None) -> str:
    """This end's configuration folder (0700) on its node: tinc.conf, its private key, every end's
    host file; its path there."""
    node = ends[end].node
    private = keys[end].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()).decode()
    env.write(node, f"tinc-{end}/rsa_key.priv", private)
    for name, site in ends.items():
        public = keys[name].public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.PKCS1).decode()
        subnets = "".join(f"Subnet = {net}\n" for net in [f"{site.tunnel_ip}/32", *site.subnets])
        env.write(node, f"tinc-{end}/hosts/{name}",
                  f"Address = {site.underlay_ip}\nPort = {options.port}\n{subnets}\n{public}")
    settings = [f"Name = {end}", f"Interface = vt{env.unique}{end}", "DeviceType = tun", "Mode = router",
                "AddressFamily = ipv4", f"Cipher = {options.cipher}", f"Digest = {options.digest}",
                f"MACLength = {options.mac_bytes}", f"Compression = {options.compression}"]
    if connect_to:
        settings.append(f"ConnectTo = {connect_to}")
    return str(PurePosixPath(env.write(node, f"tinc-{end}/tinc.conf", "\n".join(settings) + "\n")).parent)
