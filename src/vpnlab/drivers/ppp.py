"""What PPTP and L2TP share: pppd with MS-CHAPv2, its secrets, and a private view of /etc/ppp.

pppd reads fixed paths (/etc/ppp/options, /etc/ppp/chap-secrets) and runs /etc/ppp/ip-up,
whose Debian hooks may rewrite system files. Every pppd-launching daemon is started with
those paths bind-mounted, in a mount namespace of its own (on a host's own network namespace
too, where `ip netns exec` gives none), onto this tunnel's files on its node: an empty options
file, the per-tunnel secrets, and `true` for the hooks.
"""

from __future__ import annotations

import re
import secrets

from ..algorithms import Algorithms
from ..testbed.contract import Node
from ..testbed.node import PRIVATE_MOUNTS
from ..tools import Tool
from .base import Tunnel, TunnelEnv, wait_for

PPPD = Tool("pppd", "ppp", ("pppd", "--version"), path="/usr/sbin/pppd")
# What PPP needs in the VM guest (no udev there).
PPP_MODULES = ("ppp_generic", "ppp_async", "ppp_synctty")

CLIENT_NAME = "vpnlab"
SERVER_NAME = "vpnlab-gw"
MTU = 1400  # what Windows and most PPTP/L2TP set-ups use: room for the encapsulation under 1500
HOOKS = ("/etc/ppp/ip-pre-up", "/etc/ppp/ip-up", "/etc/ppp/ip-down", "/etc/ppp/ipv6-up", "/etc/ppp/ipv6-down")


def auth_options(gateway: bool, mppe: str | None) -> list[str]:
    """MS-CHAPv2 only (the gateway asks for it, the client offers nothing else), and MPPE at
    the given strength when asked for (PPTP's encryption)."""
    lines = ["auth", "require-mschap-v2"] if gateway else ["noauth", "refuse-pap", "refuse-chap", "refuse-mschap",
                                                          "refuse-eap"]
    if mppe:
        lines += [f"require-mppe-{mppe}", "nomppe-128" if mppe == "40" else "nomppe-40",
                  "nomppe-stateful"]
    else:
        lines += ["nomppe"]
    return lines


# No header compression, so the per-packet overhead is the same on every set-up; `debug`
# logs the negotiation (not the data) into the tunnel's log. `noipv6`: vpnlab carries IPv4
# through PPP, and a repeated IPV6CP request from the gateway (seen under emulation) took the
# link's interface down just as IPCP had brought it up.
COMMON = ["nodefaultroute", "noipdefault", "noipv6", "novj", "novjccomp", "nobsdcomp", "nodeflate", "nopcomp",
          "noaccomp", "noproxyarp", f"mtu {MTU}", f"mru {MTU}", "lcp-echo-interval 0", "debug"]


def write_etc(env: TunnelEnv, nodes: list[Node]) -> None:
    """This tunnel's /etc/ppp files on each node of its pppds: an empty options file and the one
    MS-CHAPv2 secret both ends share."""
    password = secrets.token_urlsafe(18)
    for node in nodes:
        env.write(node, "chap-secrets", f'"{CLIENT_NAME}" "{SERVER_NAME}" "{password}" *\n')
        env.write(node, "options", "")


def private_etc(env: TunnelEnv, node: Node, argv: list) -> list:
    """Wrap a pppd-launching daemon so it sees this tunnel's /etc/ppp files on `node` (write_etc) only."""
    folder = env.folder(node)
    binds = [f"mount --bind {folder}/options /etc/ppp/options",
             f"mount --bind {folder}/chap-secrets /etc/ppp/chap-secrets",
             *(f"{{ [ ! -e {hook} ] || mount --bind /bin/true {hook}; }}" for hook in HOOKS),
             "mount -t tmpfs vpnlab-lock /run/lock"]
    return [*PRIVATE_MOUNTS, "sh", "-c", " && ".join(binds) + ' && exec "$@"', "sh", *map(str, argv)]


def wait_for_link(node: Node, dev: str, tunnel: Tunnel, timeout: float = 30) -> None:
    """Until pppd has configured the interface (IPCP done, address set, link up: pppd sets the
    address, runs ip-pre-up, then brings the link up, and a route into it fails before that)."""
    wait_for(lambda: node.ipv4_address_once_up(dev) is not None, timeout, f"PPP interface {dev} in {node.role}", tunnel,
             interval=0.2)


def negotiated_ppp(tunnel: Tunnel) -> Algorithms | None:
    """What the client's pppd logged (its `logfile` on its node, fetched beside the other logs)."""
    tunnel.fetch_logs()
    return parse_pppd_log(tunnel.read_log(tunnel.env.log("pppd-client")))


def parse_pppd_log(text: str) -> Algorithms | None:
    """pppd (debug): 'MPPE 128-bit stateless compression enabled' and the CHAP exchange
    ('CHAP authentication succeeded', MS-CHAPv2 as negotiated in 'auth chap MS-v2')."""
    mppe = re.findall(r"MPPE (\d+)-bit (stateless|stateful) compression enabled", text)
    chap = re.search(r"auth chap MS-v2|MS-CHAP-?[vV]2|CHAP authentication succeeded", text)
    if not mppe and not chap:
        return None
    values = {}
    if chap:
        values["authentication"] = "MS-CHAPv2"
    if mppe:
        bits, mode = mppe[-1]
        values["data_cipher"] = f"RC4-{bits} (MPPE {mode})"
        values["data_integrity"] = "none"
    elif "nomppe" in text or "MPPE" not in text:
        values["data_cipher"], values["data_integrity"] = "none", "none"
    return Algorithms(**values, source="pppd log")
