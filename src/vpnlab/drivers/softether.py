"""SoftEther VPN 5.01 in its native SSL-VPN protocol: vpnserver on the gateway, vpnclient on the client.

The client's virtual NIC and the server's TAP device (a local bridge of its Virtual Hub) are two
ends of one Ethernet segment; the driver addresses and routes them, as a bridged SoftEther
deployment does. The data runs over the client's TLS connections (`connections` of them), or,
with `transport: udp`, over SoftEther's UDP acceleration beside them; `encryption: false` sends it
in clear after the TLS login, `compression` deflates it. There is no cipher to choose (NO_CIPHER_CHOICE).

Both daemons keep their state in fixed places (/var/lib/softether, /var/log/softether,
/run/softether, /tmp): each runs with empty private ones (a tmpfs in a mount namespace of its own,
gone with it, also in a real host's own network namespace), and so does every vpncmd; the logs
SoftEther writes itself go to the tunnel's folder on the node. Both run as a watchdog that restarts
its worker when the worker dies abnormally: each pair runs in its own PID namespace, so that ending
it ends both, and a restarted worker (a broken tunnel) is reported by `health`. Everything goes
through the node: its commands, its files, the /proc of its processes.
"""

from __future__ import annotations

import re
import secrets as random_secrets
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, model_validator

from ..algorithms import AEAD, Algorithms
from ..core.errors import TunnelError, VpnlabError
from ..testbed.contract import Node
from ..testbed.node import private_run
from ..tools import Tool
from .base import Driver, Implementation, Options, Port, Ports, Tunnel, TunnelEnv, wait_for

SERVER = "/usr/libexec/softether/vpnserver/vpnserver"
CLIENT = "/usr/libexec/softether/vpnclient/vpnclient"
CLIENT_ADMIN_PORT = 9931  # the client daemon listens here once it takes commands (vpncmd finds it as "localhost")
SERVER_ADMIN_PORT = 5555  # the server's listener that vpncmd configures it through ("localhost:5555"), deleted last
DEFAULT_LISTENERS = (443, 992, 1194, SERVER_ADMIN_PORT)  # the server's TCP listeners out of the box
# The fixed places SoftEther writes: private, empty ones for each daemon and vpncmd (/run too, by private_run)
# Its logs go to $1, a folder of the tunnel's on the node (made 0700 and opened before anything hides it).
PRIVATE_DIRS = ('mkdir -p -m 700 "${1%/*}" "$1" && exec 4<"$1" && shift && mount -t tmpfs vpnlab-softether /var/lib && '
                'mount -t tmpfs vpnlab-softether /var/log && mount -t tmpfs vpnlab-softether /tmp && '
                'mkdir /var/lib/softether /var/log/softether && mount --bind /proc/self/fd/4 /var/log/softether && '
                'exec 4<&- && exec "$@"')
# No cipher to choose: ServerCipherSet sets OpenSSL's cipher list, which only TLS 1.2 and older
# read, and 5.01 built with OpenSSL 3 always negotiates TLS 1.3 (it has no setting to turn it off;
# Tls_Disable1_3 came later): OpenSSL's first suite, whatever ServerCipherSet says (seen here).
NO_CIPHER_CHOICE = ("SoftEther 5.01 has no cipher to choose: it always negotiates TLS 1.3 with OpenSSL's first suite, "
                    "TLS_AES_256_GCM_SHA384 (ServerCipherSet reaches only TLS 1.2 and older); options.encryption "
                    "turns the data's encryption off")
SUITES = {"TLS_AES_256_GCM_SHA384": "AES-256-GCM", "TLS_AES_128_GCM_SHA256": "AES-128-GCM",
          "TLS_CHACHA20_POLY1305_SHA256": "ChaCha20-Poly1305"}  # TLS 1.3's, by their cipher
SUITE = "TLS_AES_256_GCM_SHA384"
# On the WAN, around the client's Ethernet frame (14 bytes):
TCP_OUTER = 20 + 32 + 4 + 4  # IPv4, TCP with timestamps, SoftEther's block count and block size
TLS_RECORD = 5 + 1 + 16      # TLS 1.3 record header, its inner content type, the AEAD tag
# UDP acceleration (version 2): IPv4, UDP, then the 12-byte nonce, cookie, two 8-byte ticks, size,
# flag, and the ChaCha20-Poly1305 tag; in clear (no encryption): no nonce and no tag
UDP_OUTER = 20 + 8 + 4 + 8 + 8 + 2 + 1
UDP_CRYPTO = 12 + 16
UDP_PADDING = 32  # it pads encrypted packets with 0 to 31 random bytes, "to make protocol identification harder"
SECRETS = re.compile(r"(?i)(/PASSWORD:|PasswordSet |Session Key[^,]*,)\S+")  # blanked in vpncmd's logs
DEFLATE = 2 + 5 + 4  # zlib header, one stored block's header, Adler-32: what deflate adds to incompressible data


class SoftEtherOptions(Options):
    transport: Literal["tcp", "udp"] = Field("tcp", description="tcp: data over the TLS connections; udp: over "
                                             "SoftEther's UDP acceleration, the TLS connection kept for control")
    connections: int = Field(1, ge=1, le=32, description="TCP connections per session (the client's /MAXTCP)")
    compression: bool = Field(False, description="SoftEther's own deflate compression of the data")
    encryption: bool = Field(True, description="false: the data crosses in clear after the TLS login (UseEncrypt)")
    port: int = Field(443, ge=1, le=65535, description="the server's listener")

    @model_validator(mode="before")
    @classmethod
    def no_cipher(cls, data):
        if isinstance(data, dict) and "cipher" in data:
            raise ValueError(f"cipher: {NO_CIPHER_CHOICE}")
        return data


@dataclass
class SoftEtherTunnel(Tunnel):
    """A tunnel whose daemons each run as watchdog and worker in their own PID namespace."""

    client: Node | None = None  # where vpncmd reads the live session
    workers: list[tuple[Node, int, int | None, str]] = field(default_factory=list)  # (node, pid, start time, what)
    log_folders: list[tuple[Node, str]] = field(default_factory=list)  # the folders of the logs SoftEther writes

    def status(self) -> dict[str, str]:
        """The client's AccountStatusGet, item -> value: the live session's protocol and cipher."""
        return parse_status(vpncmd(self.client, self.env, "status", ["localhost", "/CLIENT"],
                                   ["AccountStatusGet vpnlab"], check=False))

    def watch_workers(self) -> None:
        """Remember each daemon's processes now that the tunnel is up."""
        for node, proc, log in self.processes:
            self.workers += [(node, pid, start_time(node, pid), log.stem) for pid in descendants(node, proc.pid)]

    def health(self) -> str | None:
        for node, pid, start, what in self.workers:
            if start_time(node, pid) != start:
                return f"{what}: a process of the daemon exited (its watchdog restarts it: the tunnel broke)"
        return super().health()

    def logs(self) -> str:
        """Ours, then the end of each log SoftEther wrote itself on its node (where a refused login shows)."""
        own = [(node, path) for node, folder in self.log_folders
               for path in node.run(["find", folder, "-name", "*.log", "-type", "f"], check=False).stdout.split()]
        return "\n".join([super().logs(), *(f"  {PurePosixPath(path).relative_to(self.env.folder(node))}:\n"
                                            f"{last_lines(self.read_log(path, node))}" for node, path in own)])

    def down(self) -> None:
        for node, proc, _ in reversed(self.processes):
            # unshare ignores SIGTERM. SIGKILL to its child, the first process of the PID namespace,
            # ends every process in it before it is reaped (devices closed, nothing left to adopt);
            # unshare then exits by itself, and stop() reaps it.
            for first in descendants(node, proc.pid)[:1]:
                node.run(["kill", "-KILL", str(first)], check=False)
            node.stop(proc)
        self.processes.clear()
        super().down()


def private(node: Node, env: TunnelEnv, name: str, *argv) -> list:
    """A SoftEther program with empty private copies of the places it writes, its own logs in the folder
    `logs_of(node, env, name)`. Run it under `unshare --mount`: a mount namespace of its own keeps them
    from everything else (`ip netns exec` makes one, but a real host's own namespace has none)."""
    return private_run(["sh", "-c", PRIVATE_DIRS, "sh", logs_of(node, env, name), *argv], keep=node.scratch(),
                       make=("/run/softether",))


def logs_of(node: Node, env: TunnelEnv, name: str) -> str:
    """The folder of the logs SoftEther writes itself (server_log/, client_log/ ...) on the node: the tunnel's."""
    return f"{env.folder(node)}/softether-{name}"


def last_lines(text: str, lines: int = 15, indent: str = "    ") -> str:
    return "\n".join(indent + line for line in text.strip().splitlines()[-lines:]) or indent + "(no log)"


def vpncmd(node: Node, env: TunnelEnv, name: str, target: list[str], commands: list[str], check: bool = True) -> str:
    """Run vpncmd's commands against a daemon, from a batch file on the node (they name passwords),
    removed once read; its output, quoted with the passwords blanked when it fails."""
    batch = env.write(node, f"vpncmd-{name}", "\n".join(commands) + "\n")
    try:
        argv = private(node, env, "vpncmd", "vpncmd", *target, f"/IN:{batch}", "/CSV")
        proc = node.run(["unshare", "--mount", *argv], check=False, timeout=60)
    finally:
        node.remove_file(batch)
    output = proc.stdout + proc.stderr
    if check and (proc.returncode != 0 or "Error occurred" in output):
        blanked = SECRETS.sub(r"\1***", output)
        raise TunnelError(f"vpncmd ({name}) in {node.role} failed:\n{last_lines(blanked)}")
    return output


def server_commands(options: SoftEtherOptions, nic: str, password: str, admin: str) -> list[str]:
    """The server: one listener, no other protocol, the DEFAULT hub with one user, bridged to a TAP device."""
    port = options.port
    return [f"ServerPasswordSet {admin}",
            *([f"ListenerCreate {port}"] if port not in DEFAULT_LISTENERS else []),
            *(f"ListenerDelete {p}" for p in DEFAULT_LISTENERS if p not in (port, SERVER_ADMIN_PORT)),
            "ProtoOptionsSet OpenVPN /NAME:Enabled /VALUE:false", "ProtoOptionsSet SSTP /NAME:Enabled /VALUE:false",
            "VpnOverIcmpDnsEnable /ICMP:no /DNS:no", "KeepDisable",
            "Hub DEFAULT", "UserCreate vpnlab /GROUP:none /REALNAME:none /NOTE:none",
            f"UserPasswordSet vpnlab /PASSWORD:{password}", f"BridgeCreate DEFAULT /DEVICE:{nic} /TAP:yes",
            *([f"ListenerDelete {SERVER_ADMIN_PORT}"] if port != SERVER_ADMIN_PORT else [])]  # the admin's own, last


def client_commands(options: SoftEtherOptions, nic: str, password: str, server: str, routes: bool) -> list[str]:
    """The client: its virtual NIC, one connection setting with the options, connected."""
    yes = {True: "yes", False: "no"}
    return [f"NicCreate {nic}",
            f"AccountCreate vpnlab /SERVER:{server}:{options.port} /HUB:DEFAULT /USERNAME:vpnlab /NICNAME:{nic}",
            f"AccountPasswordSet vpnlab /PASSWORD:{password} /TYPE:standard",
            f"AccountEncrypt{'Enable' if options.encryption else 'Disable'} vpnlab",
            f"AccountCompress{'Enable' if options.compression else 'Disable'} vpnlab",
            # /BRIDGE: the client's side routes networks of its own through the session
            f"AccountDetailSet vpnlab /MAXTCP:{options.connections} /INTERVAL:1 /TTL:0 /HALF:no /BRIDGE:{yes[routes]} "
            f"/MONITOR:no /NOTRACK:yes /NOQOS:yes /DISABLEUDP:{yes[options.transport == 'tcp']}",
            "AccountConnect vpnlab"]


def parse_status(text: str) -> dict[str, str]:
    """vpncmd's CSV output ('Item,Value' lines) as a dict."""
    out = {}
    for line in text.splitlines():
        item, comma, value = line.partition(",")
        if comma:
            out[item.strip('"')] = value.strip().strip('"')
    return out


def descendants(node: Node, pid: int) -> list[int]:
    """The process's children on its node, theirs, and so on."""
    children = [int(c) for c in read_proc(node, f"{pid}/task/{pid}/children").split()]
    return [grand for child in children for grand in (child, *descendants(node, child))]


def start_time(node: Node, pid: int) -> int | None:
    """A process's start time on its node, in clock ticks since boot (None: gone): with its PID, it
    tells a worker from the one its watchdog restarted."""
    stat = read_proc(node, f"{pid}/stat")
    # The command name may contain spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19]) if stat else None


def read_proc(node: Node, path: str) -> str:
    """/proc/<path> on the node ("" when the process is gone)."""
    try:
        return node.read_file(f"/proc/{path}").decode()
    except (OSError, VpnlabError):
        return ""


class SoftEther(Driver):
    name = "softether"
    summary = "SoftEther VPN, native SSL-VPN protocol (TLS over TCP, or UDP acceleration), Ethernet over it"
    tools = (Tool("vpnserver", "softether-vpnserver", path=SERVER),
             Tool("vpnclient", "softether-vpnclient", path=CLIENT),
             Tool("vpncmd", "softether-vpncmd"), Tool("unshare", "util-linux"),
             Tool("kill", "procps"), Tool("find", "findutils"))  # its PID namespace ended, its own logs found
    Options = SoftEtherOptions
    mesh = "hub"  # a server its clients reach each other through (the default up_mesh)

    def check(self, options, profile):
        if profile == "fips":
            return ("profile: SoftEther 5.01 has no FIPS 140 configuration (its TLS takes OpenSSL's defaults, X25519 "
                    "included, with no setting to change them; its UDP acceleration runs ChaCha20-Poly1305)")
        return None

    def describe(self, options, profile):
        parts = ["softether", options.transport]
        if options.connections != 1:
            parts.append(f"{options.connections}-tcp")
        if options.compression:
            parts.append("deflate")
        if not options.encryption:
            parts.append("unencrypted")
        return " ".join(parts + ([] if options.port == 443 else [f"port-{options.port}"]))

    def implementations(self, options):
        return [Implementation("softether", features=("tun",), tools=("vpnserver", "vpnclient", "vpncmd", "unshare"))]

    def ports(self, options):
        """The server's listener, and each daemon's admin port, which vpncmd configures it through (a
        held one would answer in its place). Not here: the server's other listeners out of the box, deleted
        at once (one held only fails to open), and UDP acceleration's ports, chosen at random."""
        return Ports(gateway=(("tcp", options.port), ("tcp", SERVER_ADMIN_PORT)),
                     client=(("tcp", CLIENT_ADMIN_PORT),))

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        nic = f"s{env.unique}"  # SoftEther names the devices tap_<nic> (server) and vpn_<nic> (client)
        udp = options.transport == "udp"
        listener, server_admin = self.ports(options).gateway
        (client_admin,) = self.ports(options).client
        tunnel = SoftEtherTunnel(env, ("udp", None) if udp else listener, mtu=1500, control=[listener] if udp else [],
                                 encrypted=options.encryption, client=left.node)
        password = random_secrets.token_urlsafe(18)
        self._start(tunnel, right.node, SERVER, "vpnserver", server_admin)
        vpncmd(right.node, env, "server", [f"localhost:{server_admin[1]}", "/SERVER"],
               server_commands(options, nic, password, random_secrets.token_urlsafe(18)))
        self._start(tunnel, left.node, CLIENT, "vpnclient", client_admin)
        vpncmd(left.node, env, "client", ["localhost", "/CLIENT"],
               client_commands(options, nic, password, right.underlay_ip, bool(left.subnets)))
        for site, peer, dev in ((left, right, f"vpn_{nic}"), (right, left, f"tap_{nic}")):
            wait_for(lambda: site.node.run(["ip", "link", "show", dev], check=False).returncode == 0, 15,
                     f"SoftEther's {dev}", tunnel)
            site.node.ip(f"addr add {site.tunnel_ip}/24 dev {dev}", f"link set {dev} up",
                         *(f"route replace {net} via {peer.tunnel_ip} dev {dev}" for net in peer.subnets))
        wait_for(lambda: left.node.run(["ping", "-n", "-c", "1", "-W", "0.2", right.tunnel_ip], check=False,
                                       timeout=5).returncode == 0, 30, "the SoftEther session", tunnel)
        if udp:  # measure nothing before the data has moved to UDP (after 10 s of stable UDP, by design)
            wait_for(lambda: tunnel.status().get("UDP Acceleration is Active") == "Yes", 30, "UDP acceleration", tunnel,
                     interval=0.5)
        tunnel.watch_workers()
        return tunnel

    @staticmethod
    def _start(tunnel: SoftEtherTunnel, node, program: str, what: str, admin: Port) -> None:
        log = tunnel.env.log(what)
        tunnel.log_folders.append((node, logs_of(node, tunnel.env, what)))
        proc = node.spawn(["unshare", "--pid", "--fork", "--kill-child", "--mount",
                           *private(node, tunnel.env, what, program, "execsvc")], log, what=what)
        tunnel.processes.append((node, proc, log))
        wait_for(lambda: node.listening(admin[1]), 15, f"{what} to listen", tunnel)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        """For incompressible data, and over UDP without its random padding (0 to 31 bytes a packet,
        so that a single packet's overhead exceeds this by up to 31 bytes)."""
        frame = 14 + (DEFLATE if options.compression else 0)
        if options.transport == "udp":
            return UDP_OUTER + (UDP_CRYPTO if options.encryption else 0) + frame
        return TCP_OUTER + (TLS_RECORD if options.encryption else 0) + frame

    def full_packet_overhead(self, options, profile, implementation, mtu: int) -> int:
        padding = UDP_PADDING - 1 if options.transport == "udp" and options.encryption else 0
        return self.overhead(options, profile, implementation, mtu) + padding

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """TLS 1.3 (OpenSSL 3's defaults: X25519, TLS_AES_256_GCM_SHA384) against the server's
        self-signed RSA 2048 certificate, which the client does not check (SoftEther's default), and
        the user's password; the data inside that TLS, or with `transport: udp` in UDP acceleration
        version 2 (ChaCha20-Poly1305, keyed through the TLS session); none with `encryption: false`."""
        suite = SUITES[SUITE]
        if not options.encryption:
            data_cipher = integrity = "none"
        else:
            data_cipher, integrity = ("ChaCha20-Poly1305" if options.transport == "udp" else suite), AEAD
        return Algorithms(control="TLS 1.3", key_exchange="X25519", authentication="RSA-2048 (unchecked) + password",
                          control_cipher=suite, data=data_channel(options.transport == "udp", options.encryption), data_cipher=data_cipher,
                          data_integrity=integrity, source="softether driver")

    def negotiated(self, tunnel, options, profile):
        """The client's live session (AccountStatusGet): the TLS suite, whether data is encrypted,
        whether UDP acceleration carries it. The key exchange and the certificate are not shown."""
        return status_algorithms(tunnel.status())


def data_channel(udp: bool, encrypted: bool) -> str:
    if udp:
        return "SoftEther UDP acceleration v2"
    return "SoftEther over TLS" if encrypted else "SoftEther over TCP (the TLS left after the login)"


def status_algorithms(status: dict[str, str]) -> Algorithms | None:
    """'Encryption: Enabled (Algorithm: TLS_AES_256_GCM_SHA384)', 'UDP Acceleration is Active: Yes'."""
    encryption = status.get("Encryption", "")
    if not encryption:
        return None
    suite = re.search(r"Algorithm: (\w+)", encryption)
    values = {"control": "TLS 1.3"} if suite and suite[1] in SUITES else {}
    if suite:
        values["control_cipher"] = SUITES.get(suite[1], suite[1])
    udp = status.get("UDP Acceleration is Active") == "Yes"
    values["data"] = data_channel(udp, encryption.startswith("Enabled"))
    if not encryption.startswith("Enabled"):
        values["data_cipher"] = values["data_integrity"] = "none"
    elif udp:
        values["data_cipher"], values["data_integrity"] = "ChaCha20-Poly1305", AEAD
    elif suite:
        values["data_cipher"], values["data_integrity"] = values["control_cipher"], AEAD
    return Algorithms(**values, source="vpncmd AccountStatusGet")
