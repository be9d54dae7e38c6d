"""What a run owns on a remote host, and the rules that keep the host reachable.

The record lives on the host itself, in /run/vpnlab/<run-id>/state.json, and is
written *before* each thing it lists is created, so that whatever ends the run
(the controller crashing, the SSH connection dropping) a later `clean` over a
fresh connection removes exactly that. Teardown is one shell script built from
the record, so it is a single round trip and needs nothing but POSIX sh,
iproute2, procps and coreutils on the host.

Commands that run in the host's own network namespace (a role mapped onto the
host itself) could cut the branch vpnlab sits on, so `ip` lines there pass
`guard_ip_line` first: routes and addresses only inside the benchmarking
ranges, no policy rules, and the interface that carries the SSH session is
never taken down, moved, deleted or stripped of its addresses.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import asdict, dataclass, field

from ..core.errors import VpnlabError
from ..core.networks import BENCHMARK_NETWORKS

REMOTE_ROOT = "/run/vpnlab"  # tmpfs on every systemd host: a reboot clears record and resources alike

# RFC 2544 benchmarking ranges: the only networks vpnlab adds to a host's own namespace.

# Shell functions every remote teardown and stop uses. A process is ours only while its PID
# still has the start time we recorded (field 22 of /proc/PID/stat, counted after the
# command name, which may hold spaces); a zombie counts as gone, here and in a session.
# A spawned program runs in the session sshd made for its channel; what it forked (pppd's pptp,
# pptp's call manager) stays in that session even once orphaned, so `stop` given the session ends
# all of it. The session is ours unless its leader's PID now belongs to another session leader (a
# reused PID). `stop` waits by the clock (/proc/uptime, in hundredths of a second), not by a count
# of checks: each check is itself slow on a busy or emulated host. /proc is read with the shell's
# own `read`, never a program: on an emulated host each program started costs a tenth of a second.
PROCSTAT = r"""procstat() { r=; read -r r 2>/dev/null < "/proc/$1/stat"; }"""  # $r: the line, or empty
SHELL_FUNCTIONS = r"""
""" + PROCSTAT + r"""
alive() { want=$2; procstat "$1"; [ -n "$r" ] || return 1
  set -- ${r##*") "}; [ "$1" != Z ] && [ "${20}" = "$want" ]; }
members() { m=$1; for f in /proc/[0-9]*/stat; do r=; read -r r 2>/dev/null < "$f" || continue
  set -- ${r##*") "}; [ "$4" = "$m" ] && [ "$1" != Z ] && return 0; done; return 1; }
ours() { procstat "$1"; [ -n "$r" ] || return 0
  set -- "$1" "$2" ${r##*") "}; [ "$6" != "$1" ] || [ "${22}" = "$2" ]; }
now() { read -r t _ < /proc/uptime; t=${t%.*}${t#*.}; }
stop() { if alive "$1" "$2"; then kill -TERM "$1" 2>/dev/null; now; end=$((t + $3))
  while alive "$1" "$2" && now && [ "$t" -lt "$end" ]; do sleep 0.02; done
  alive "$1" "$2" && kill -KILL "$1" 2>/dev/null; now; end=$((t + 100))
  while alive "$1" "$2" && now && [ "$t" -lt "$end" ]; do sleep 0.01; done; fi
  [ "${4:-0}" -gt 1 ] && ours "$4" "$5" || return 0; pkill -TERM -s "$4"; now; end=$((t + $3))
  while members "$4" && now && [ "$t" -lt "$end" ]; do sleep 0.05; done
  pkill -KILL -s "$4"; true; }
"""

# `ip` objects in the order ip(8) matches abbreviations ("r" is route, "ru" is rule).
IP_OBJECTS = ("address", "addrlabel", "maddress", "route", "rule", "neighbour", "ntable", "link")
READ_ONLY_VERBS = ("show", "list", "lst", "get", "save")
ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit",
               "blackhole", "nat", "anycast", "to"}


# What a testbed may add to the record and remove again when it is destroyed (HostState.since).
RESOURCES = ("namespaces", "processes", "files", "dirs", "links", "addresses", "routes", "qdiscs")


@dataclass
class HostState:
    """The record of one run's resources on one host, as JSON on that host."""

    run_id: str
    controller: str                    # "hostname pid" of the vpnlab that made it
    owner: dict                        # the sshd process of that controller's connection: {pid, start}
    created: float
    namespaces: list[str] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)         # made in the host's own namespace
    addresses: list[str] = field(default_factory=list)     # "ADDR dev DEV" in the host's own namespace
    routes: list[str] = field(default_factory=list)        # route specs, deleted with `ip route del`
    sysctls: dict[str, str] = field(default_factory=dict)  # key: value before the run
    qdiscs: list[str] = field(default_factory=list)        # devices whose root/ingress qdisc was set

    @property
    def directory(self) -> str:
        return f"{REMOTE_ROOT}/{self.run_id}"

    @property
    def path(self) -> str:
        return f"{self.directory}/state.json"

    def to_json(self, compact: bool = False) -> str:
        """Readable on the host; `compact`: one line."""
        return json.dumps(asdict(self), indent=None if compact else 1)

    @classmethod
    def from_json(cls, text: str) -> "HostState":
        data = json.loads(text)
        if "controller" not in data:  # a local `vpnlab run` on that host: its own `vpnlab clean` owns it
            raise ValueError("not a remote run's record")
        return cls(**data)

    def teardown_script(self, grace: float = 3.0) -> str:
        """Remove everything recorded, newest processes first, then the record itself."""
        return self.undo_script(grace) + f"rm -rf -- {shlex.quote(self.directory)}\ntrue\n"

    def since(self, mark: "HostState") -> "HostState":
        """What was recorded after `mark` (a copy of this record taken earlier): one testbed's
        resources, to remove when it is destroyed (the sysctls' old values wait for the run's end)."""
        def added(kind):
            return [item for item in getattr(self, kind) if item not in getattr(mark, kind)]
        return HostState(self.run_id, self.controller, self.owner, self.created,
                         **{kind: added(kind) for kind in RESOURCES})

    def undo_script(self, grace: float = 3.0) -> str:
        """Remove the recorded resources (not the record), newest processes first."""
        q = shlex.quote
        steps = [SHELL_FUNCTIONS]
        steps += [f"stop {p['pid']} {p['start']} {round(grace * 100)} {p.get('session', 0)} {p.get('session_start', 0)}"
                  for p in reversed(self.processes)]
        steps += [f"ip netns pids {q(ns)} 2>/dev/null | xargs -r kill -KILL 2>/dev/null; "
                  f"ip netns del {q(ns)} 2>/dev/null" for ns in self.namespaces]
        steps += [f"ip route del {route} 2>/dev/null" for route in self.routes]
        steps += [f"ip addr del {address} 2>/dev/null" for address in self.addresses]
        steps += [f"ip link del {q(link)} 2>/dev/null" for link in self.links]
        steps += [f"sysctl -q -w {q(f'{key}={value}')}" for key, value in self.sysctls.items()]
        steps += [f"tc qdisc del dev {q(dev)} root 2>/dev/null; tc qdisc del dev {q(dev)} ingress 2>/dev/null"
                  for dev in self.qdiscs]
        steps += [f"rm -f -- {q(path)}" for path in self.files]
        steps += [f"rm -rf -- {q(path)}" for path in self.dirs]
        return "\n".join(steps) + "\ntrue\n"


@dataclass(frozen=True)
class ManagementPath:
    """How the controller reaches the host: never to be cut."""

    controller_ip: str
    host_ip: str
    device: str


def _expand(word: str, choices: tuple[str, ...]) -> str:
    """ip(8)'s abbreviations: the first choice the word is a prefix of."""
    return next((choice for choice in choices if choice.startswith(word)), word)


def _benchmark(value: str) -> bool:
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return any(net.version == b.version and net.subnet_of(b) for b in BENCHMARK_NETWORKS)


def _holds(value: str, address: str) -> bool:
    """Does the network `value` (an address with its prefix, or a route's destination) hold `address`?"""
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False


def _device(words: list[str]) -> str | None:
    """The device a `link` or `address` command names (after `dev`, or the first bare word)."""
    for i, word in enumerate(words):
        if word == "dev" and i + 1 < len(words):
            return words[i + 1]
    return words[0] if words and words[0] not in ("link", "name", "up", "down") else None


def guard_ip_line(line: str, path: ManagementPath) -> tuple[str, str] | None:
    """Refuse an `ip` line that could cut the host's management access.

    Returns what the line will create and must be recorded first, as (kind, value)
    with kind one of links, addresses, routes; None if it creates nothing.
    """
    words = shlex.split(line)
    if len(words) < 2:
        return None
    obj, verb, rest = _expand(words[0], IP_OBJECTS), words[1], words[2:]
    if any(read.startswith(verb) for read in READ_ONLY_VERBS):
        return None

    def refuse(why: str):
        raise VpnlabError(f"refusing `ip {line}` in the host's own namespace: {why}")

    if obj == "route":
        dest = next((w for w in rest if w not in ROUTE_TYPES), "")
        if verb.startswith("f") or not _benchmark(dest):
            refuse("routes there are limited to 198.18.0.0/15 and 2001:2::/48, so the default "
                   f"route and the SSH path to {path.controller_ip} stay as they are")
        if _holds(dest, path.controller_ip):
            refuse(f"{dest} holds {path.controller_ip}, the controller: the SSH path would leave its interface")
        return ("routes", " ".join(rest)) if verb[0] in "arc" else None
    if obj == "rule":
        refuse("policy rules could send the SSH session into a tunnel")
    if obj == "address":
        if verb.startswith("a") and not _benchmark(rest[0] if rest else ""):
            refuse("addresses added there must be inside 198.18.0.0/15 or 2001:2::/48")
        if verb.startswith("a") and _holds(rest[0], path.controller_ip):
            refuse(f"{rest[0]} is on the network of {path.controller_ip}, the controller: its route would "
                   "compete with the SSH path's")
        if _device(rest) == path.device and not verb.startswith("a"):
            refuse(f"{path.device} carries the SSH session")
        return ("addresses", " ".join(rest)) if verb.startswith("a") else None
    if obj == "link":
        if verb.startswith("a"):
            return "links", _link_name(rest)
        if _device(rest) == path.device:
            refuse(f"{path.device} carries the SSH session")
    return None


def _link_name(words: list[str]) -> str:
    """The NAME of `ip link add [link DEV] [name] NAME ...`."""
    i = 0
    while i < len(words):
        if words[i] == "link":
            i += 2
        elif words[i] in ("name", "dev"):
            return words[i + 1]
        else:
            return words[i]
    raise VpnlabError(f"`ip link add {' '.join(words)}` names no link")


def root_qdisc_device(line: str) -> str | None:
    """The device of a `tc qdisc add|replace ... dev D root|ingress|clsact` line, to undo later."""
    words = shlex.split(line)
    if len(words) < 2 or not "qdisc".startswith(words[0]) or words[1][0] not in "arc":
        return None
    if not {"root", "ingress", "clsact"} & set(words) or "dev" not in words[:-1]:
        return None
    return words[words.index("dev") + 1]
