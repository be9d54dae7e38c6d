"""The ports a host's own network namespace already holds, read from its kernel's socket tables
before a run. A VPN daemon the run starts there (the WAN's ends are the hosts themselves) would
fail to bind a held one late, with an obscure log; the run refuses its scenario first instead
(HostSet.ports_held).
"""

from __future__ import annotations

from ..drivers.base import Port
from ..testbed.netns import LISTEN_TCP, sockets

# Each table after a line naming it, copied with the shell's own `read` (no program started: on an
# emulated host each costs a tenth of a second). A host without IPv6 has no udp6 or tcp6.
SOCKET_TABLES = r"""
for table in udp udp6 tcp tcp6; do
  [ -r "/proc/net/$table" ] || continue
  echo "== $table"
  while read -r line; do echo "$line"; done < "/proc/net/$table"
done
"""


def held_ports(tables: str) -> set[Port]:
    """The ports SOCKET_TABLES's output shows held: every UDP socket's, on any address, and every
    listening TCP socket's. A TCP connection's own port is not held: a daemon listens beside it."""
    held = set()
    for section in tables.split("== ")[1:]:
        name, _, table = section.partition("\n")
        proto = name.strip().removesuffix("6")
        held |= {(proto, port) for port, state in sockets(table) if proto == "udp" or state == LISTEN_TCP}
    return held


def held_text(host: str, port: Port) -> str:
    """A held port, as its user is told: what it is, what to do, how to see its holder."""
    proto, number = port
    shown = "ss -uanp" if proto == "udp" else "ss -ltnp"
    return (f"host {host}: {proto.upper()} {number} is held by another program: stop it, or run on other hosts; "
            f"`{shown} 'sport = :{number}'` on {host} shows which")
