"""The contract every VPN driver keeps (one module per VPN, as Pantheon has one wrapper per scheme).

A driver declares everything about its VPN: the programs and Debian packages it needs, the
kernel modules a VM guest must load for it, what it needs from the kernel (its
implementations, best first), which options it takes (a pydantic model), whether it is the
no-VPN baseline. It brings a tunnel up between two sites of a testbed and says how many bytes
its encapsulation adds to a packet on the wire, and which ports its daemons bind at each end.
`up` returns a Tunnel that knows how to check its health and take itself down.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Literal

import yaml
from pydantic import ConfigDict, ValidationError, model_serializer

from ..core.backend import SLOWDOWN
from ..core.errors import CapabilityError, TunnelError, VpnlabError
from ..core.features import FEATURES, Capabilities
from ..core.files import tail
from ..core.flags import Flag
from ..metrics import declare
from ..core.schema import NumbersAreNumbers
from ..testbed.contract import Node, Process
from ..testbed.mesh import hub_subnet
from ..testbed.state import RunState
from ..testbed.topology import TunnelSite
from ..tools import Tool


# Ends a line of a driver's settings that states what an unset option leaves to the software (its
# default), so that the line is written out for the user yet reads back as unset.
UNSET = "# unset: the default"


def marked_unset(line: str) -> str:
    """A settings line stating the default an unset option leaves to the software."""
    return f"{line}  {UNSET}"


def stated_lines(text: str) -> list[str]:
    """A driver's settings text without its UNSET lines: what the options set."""
    return [line for line in text.splitlines() if not line.endswith(UNSET)]


class Options(NumbersAreNumbers):
    """Base for a driver's options: unknown keys are errors, a number is never true/false."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Options added after runs were stored: left out of the dump at their default, so the ids of
    # scenarios that do not use them (a hash of the dump) stay what they were.
    omit_at_default: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_new_defaults(self, handler):
        data = handler(self)
        for name in self.omit_at_default:
            if isinstance(data, dict) and getattr(self, name) == type(self).model_fields[name].default:
                data.pop(name, None)
        return data


# The security class of a tunable's value, strongest first: what `vpnlab tune`'s security floor compares
# with. fips: FIPS 140-approved; strong: sound, not FIPS-approved (ChaCha20-Poly1305); weak: deprecated or
# breakable (64-bit blocks, MD5, compression before encryption), proposed only when a spec allows it.
SECURITY_CLASSES = ("fips", "strong", "weak")


@dataclass(frozen=True)
class Tunable:
    """A setting `vpnlab tune` may vary: the option it sets, its legal values (the default first), and
    the security class of each value that bears on security (a value not listed bears on none)."""

    option: str
    values: tuple
    security: dict = field(default_factory=dict, hash=False)

    def security_of(self, value) -> str | None:
        return self.security.get(value)


@dataclass(frozen=True)
class Implementation:
    """One way to run a driver, and what it takes from this machine."""

    name: str
    features: tuple[str, ...] = ()   # kernel (or library) features, as probed by capabilities
    tools: tuple[str, ...] = ()      # commands, each declared in its driver's `tools`

    def missing(self, caps: Capabilities) -> list[str]:
        out = [f"feature '{f}' ({FEATURES.get(f, f)})" for f in self.features if not caps.has(f)]
        out += [f"'{t}' ({caps.hint(t)})" for t in self.tools if not caps.tool(t)]
        return out


Port = tuple[str, int]  # ("udp" | "tcp", its number)


@dataclass(frozen=True)
class Ports:
    """The ports a tunnel's daemons bind (UDP) or listen on (TCP) in its ends' network namespaces:
    at the gateway end (the right site: the server) and at the client end (the left site; a client
    that only connects out binds none). ESP and GRE are protocols, not ports: never here."""

    gateway: tuple[Port, ...] = ()
    client: tuple[Port, ...] = ()


@dataclass
class TunnelEnv:
    """What a driver may use while it brings a tunnel up."""

    state: RunState
    layer: int
    log_dir: Path
    implementation: str
    # The MTU vpnlab chose for this layer: for a tunnel inside another, the largest packet whose
    # outer packet the layer around it carries unfragmented (tunnels.py); None: the driver's own.
    # An `mtu` the study sets by hand wins (see `mtu`).
    auto_mtu: int | None = None
    nodes: list[Node] = field(default_factory=list)  # where `write` put files: their folders go with Tunnel.down
    # its folder's name on every node (a layer's number can repeat: a mesh's spokes, a second testbed)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"l{self.layer}-{secrets.token_hex(4)}"

    def log(self, name: str) -> Path:
        return self.log_dir / f"l{self.layer}-{name}.log"

    def folder(self, node: Node) -> str:
        """This tunnel's own folder on `node` (its keys, configurations, its daemons' pid files and
        sockets): under the node's scratch, removed when the tunnel goes down."""
        return f"{node.scratch()}/{self.name}"

    def write(self, node: Node, name: str, content: str | bytes, mode: int = 0o600) -> str:
        """A file of this tunnel's on `node` (`name` may hold folders), mode 0600 unless told; its path there."""
        self.nodes.append(node)
        return node.write_file(f"{self.folder(node)}/{name}", content, mode)

    def mtu(self, options: Options, default: int | None) -> int | None:
        """The tunnel MTU to configure: the study's `mtu` option, else the automatic one, else
        the driver's default."""
        return getattr(options, "mtu", None) or self.auto_mtu or default

    @property
    def unique(self) -> str:
        """Short machine-wide unique tag for names that are not per namespace."""
        return f"{self.state.run_id}{self.layer}"


# What a tunnel costs, measured once per scenario by tunnels.py.
TUNNEL_METRICS = (
    declare("setup_s", "s", "from starting the daemons to the first packet through the tunnel", False,
            level="tunnel", positive=True, producers="tunnel"),
    declare("overhead_bytes", "B", "bytes the tunnel adds to a 1028-byte packet, measured on the WAN capture",
            False, level="tunnel", producers="tunnel"),
    declare("overhead_model_bytes", "B", "the same from the drivers' encapsulation arithmetic; a mismatch is "
            "noted in `show`", False, level="tunnel", producers="tunnel"),
    declare("tunnel_mtu", "B", "MTU of the (innermost) tunnel interface", None, level="tunnel", producers="tunnel"),
)
# What a mesh (mesh_run.py) records beside its workload's values, so that `show` tabulates them against no VPN.
MESH_METRICS = (
    declare("join_s", "s", "mesh: from starting the last peer's daemon to its first ping answered by peer 0 through "
            "the overlay", False, positive=True, producers="mesh"),
    declare("idle_control_bytes_per_s", "B/s", "mesh: bytes all peers sent on their WAN links per second while idle "
            "(the overlay's keepalives, look-ups, meta traffic), over the study's idle_window_s", False,
            judged="added", producers="mesh"),
    declare("worst_pair_throughput_mbps", "Mbit/s", "mesh, pairs all or to-one: the slowest pair's goodput (the "
            "sample's throughput_mbps is all pairs' sum)", True, positive=True, producers="mesh"),
    declare("worst_pair_rtt_avg_ms", "ms", "mesh, pairs all or to-one: the slowest pair's mean round-trip time (the "
            "sample's rtt_avg_ms is the pairs' mean)", False, positive=True, producers="mesh"),
)


@dataclass
class Tunnel:
    """A running tunnel: its processes, how to recognise it on the wire, how to end it."""

    env: TunnelEnv
    outer: tuple[str, int | None]           # its packets on the WAN: ("udp"|"tcp"|"esp"|"gre", port)
    mtu: int | None = None
    processes: list[tuple[Node, Process, Path]] = field(default_factory=list)
    control: list[tuple[str, int | None]] = field(default_factory=list)  # other channels of its own on the WAN
    encrypted: bool = True  # plain L2TP is not: its contents are readable on the WAN
    left_behind: list[tuple[Node, Path]] = field(default_factory=list)  # files its daemons may leave (leave())
    own_logs: list[tuple[Node, str, Path]] = field(default_factory=list)  # logs its daemons write on their nodes
    rekey: Callable[[], None] | None = None  # forces a rekey now (a workload event's `rekey`; Driver.rekeys)

    @property
    def channels(self) -> list[tuple[str, int | None]]:
        """Everything of this tunnel's that may cross the WAN, the data channel first."""
        return [self.outer, *self.control]

    def health(self) -> str | None:
        """None when healthy, else what is wrong (quoting the daemon's log)."""
        for node, proc, log in self.processes:
            if proc.poll() is not None:
                return f"{log.stem} exited with {proc.returncode}\n{tail(log)}"
        return None

    def own_log(self, node: Node, name: str) -> str:
        """Where a daemon of this tunnel writes a log itself on `node` (pppd's `logfile`): in the
        tunnel's folder there, copied into the local `env.log(name)` by `fetch_logs`."""
        self.own_logs.append((node, f"{self.env.folder(node)}/{name}.log", self.env.log(name)))
        return self.own_logs[-1][1]

    def fetch_logs(self) -> None:
        """Copy the logs its daemons write on their nodes into the local log folder (read_log: what a
        node cannot give yet leaves the copy as it was)."""
        for node, path, local in self.own_logs:
            text = self.read_log(path, node)
            if text:
                local.write_text(text)

    def logs(self) -> str:
        """The end of each of its daemons' logs, for an error message: their output and the logs
        they write themselves (pppd's `logfile`, where a PPP link's failure shows)."""
        self.fetch_logs()
        written = sorted(self.env.log_dir.glob(f"l{self.env.layer}-*.log"))
        logs = dict.fromkeys([*(log for _, _, log in self.processes), *written])
        return "\n".join(f"  {log.name}:\n{tail(log)}" for log in logs)

    def read_log(self, log: Path | str, node: Node | None = None) -> str:
        """A daemon's log as text, whatever the node: the local file `node.spawn` streams its output
        into (both kinds of node), or, given its `node`, a log the daemon writes itself there (read
        through that node); "" while it does not exist."""
        try:
            data = Path(log).read_bytes() if node is None else node.read_file(log)
        except (OSError, VpnlabError):
            return ""
        return data.decode(errors="replace")

    def leave(self, node: Node, path: Path) -> None:
        """A file a daemon of this tunnel may leave on `node` if it is killed: recorded before the
        daemon starts, removed when the tunnel goes down."""
        node.record_file(path)
        self.left_behind.append((node, path))

    def down(self) -> None:
        for node, proc, _ in reversed(self.processes):
            node.stop(proc)
        self.processes.clear()
        self.fetch_logs()  # kept beside the other logs once the tunnel's folders are gone
        for node, path in self.left_behind:
            node.remove_file(path)
        self.left_behind.clear()
        for node in {id(node): node for node in self.env.nodes}.values():
            node.remove_tree(self.env.folder(node))


@dataclass
class Mesh:
    """A VPN joining the peers of a mesh, all but the last started: `join()` starts the last one (what
    the join time times, until its first packet is answered through the overlay). `addresses` are
    each peer's address in the overlay, in peer order. `settle()`, called once every pair has
    exchanged a packet, returns when the data path is what a measurement should see."""

    tunnels: list[Tunnel]
    addresses: list[str]
    join: Callable[[], None]
    settle: Callable[[], None] = lambda: None


class Driver:
    name: ClassVar[str]
    summary: ClassVar[str]
    Options: ClassVar[type[Options]]
    baseline: ClassVar[bool] = False             # no VPN: what every VPN is graded against
    tools: ClassVar[tuple[Tool, ...]] = ()       # every program it runs, with its Debian package
    packages: ClassVar[tuple[str, ...]] = ()     # Debian packages it needs that carry no program (plugins)
    guest_modules: ClassVar[tuple[str, ...]] = ()  # kernel modules a VM guest (no udev) must load for it
    tunables: ClassVar[tuple[Tunable, ...]] = ()  # what `vpnlab tune` may vary; none: its default options only
    proposed: ClassVar[bool] = True              # in `vpnlab tune`'s space unless a spec names its drivers
    # How it joins the peers of a mesh (topology `mesh`): "full", every peer to every other (its own
    # up_mesh); "hub", peer 0 the hub with a two-site tunnel to each spoke (the default up_mesh); None: not at all.
    mesh: ClassVar[Literal["full", "hub"] | None] = None
    # How its tunnel is made to rekey on demand (a workload event's `rekey`: its up() sets Tunnel.rekey);
    # empty: its software offers no way, and a study asking for one is refused, saying this
    rekeys: ClassVar[str] = ""

    # -- study time --------------------------------------------------------
    def check(self, options: Options, profile: str) -> str | None:
        """A problem with this combination as 'field: message', or None."""
        return None

    def describe(self, options: Options, profile: str) -> str:
        """A short label for reports."""
        return self.name if profile == "default" else f"{self.name} {profile}"

    def settings(self, options: Options, profile: str) -> str:
        """This configuration as its user writes it down (`vpnlab tune`'s answer): by default the
        vpnlab options; a driver with a configuration syntax of its own gives a fragment of it."""
        return yaml.safe_dump({"driver": self.name, "profile": profile,
                               "options": options.model_dump(mode="json", exclude_defaults=True)}, sort_keys=False)

    def from_settings(self, text: str) -> Options:
        """The options `settings` wrote (the inverse, for the fragment this driver writes; a line it
        marks UNSET states a default the option leaves to the software, and reads back as unset)."""
        data = yaml.safe_load(text)
        try:
            return self.Options.model_validate((data or {}).get("options") or {})
        except (ValidationError, AttributeError) as exc:
            raise ValueError(f"{self.name}: not settings of this driver: {exc}") from exc

    # -- machine -----------------------------------------------------------
    def implementations(self, options: Options) -> list[Implementation]:
        """Ways to run this configuration, preferred first."""
        raise NotImplementedError

    def on_hosts(self, options: Options) -> list[Implementation]:
        """The implementations that can run on real hosts: those that need no program built from its Go
        module (built into this machine's cache, which vpnlab does not copy to hosts)."""
        built = {tool.command for tool in self.tools if tool.go}
        return [way for way in self.implementations(options) if not built & set(way.tools)]

    def resolve(self, options: Options, caps: Capabilities) -> Implementation:
        """The implementation that will run here, or a CapabilityError naming what to install."""
        candidates = self.implementations(options)
        wanted = getattr(options, "implementation", "auto")
        if wanted != "auto":
            candidates = [c for c in candidates if c.name == wanted]
        reasons = []
        for candidate in candidates:
            missing = candidate.missing(caps)
            if not missing:
                return candidate
            reasons.append(f"{candidate.name} needs {', '.join(missing)}")
        raise CapabilityError(f"{self.name}: cannot run here: " + "; ".join(reasons))

    def ports(self, options: Options) -> Ports:
        """The ports its daemons bind at each end with these options: `up` takes its tunnel's channels
        on the WAN from them, and a run on real hosts (whose own network namespaces are the WAN's
        ends) refuses a scenario whose host already holds one."""
        raise NotImplementedError

    # -- run time ----------------------------------------------------------
    def up(self, left: TunnelSite, right: TunnelSite, options: Options, profile: str, env: TunnelEnv) -> Tunnel:
        raise NotImplementedError

    def up_mesh(self, sites: list[TunnelSite], options: Options, profile: str, env: TunnelEnv) -> Mesh:
        """Join the peers of a mesh (all but the last started; Mesh.join starts it). This default is hub
        and spoke from the two-site `up`, as such VPNs are deployed: peer 0 the hub (the server), one
        tunnel to each spoke in a subnet of its own (mesh.hub_subnet), each on its own port (the port
        option plus the spoke's number less one), the other spokes' subnets routed through the hub."""
        if self.mesh != "hub":
            raise NotImplementedError(f"{self.name} joins no mesh as hub and spoke")
        hub, spokes = sites[0], range(1, len(sites))
        ends = {k: (str(hub_subnet(k).network_address + 1), str(hub_subnet(k).network_address + 2)) for k in spokes}
        tunnels: list[Tunnel] = []

        def spoke_up(k: int) -> None:
            others = [str(hub_subnet(j)) for j in spokes if j != k]
            hub_end = TunnelSite(hub.node, hub.underlay_ip, ends[k][0], others, None)
            spoke_end = TunnelSite(sites[k].node, sites[k].underlay_ip, ends[k][1], [], None)
            own = TunnelEnv(env.state, k, env.log_dir, env.implementation)  # k tags its names, logs and secrets
            port = {"port": options.port + k - 1} if "port" in type(options).model_fields else {}
            tunnels.append(self.up(spoke_end, hub_end, options.model_copy(update=port), profile, own))

        for k in list(spokes)[:-1]:
            spoke_up(k)
        return Mesh(tunnels, [ends[1][0], *(ends[k][1] for k in spokes)], lambda: spoke_up(len(sites) - 1))

    def overhead(self, options: Options, profile: str, implementation: str, inner_len: int) -> int:
        """Bytes the tunnel adds on the WAN to an inner IP packet of `inner_len` bytes (IPv4 outer)."""
        raise NotImplementedError

    def full_packet_overhead(self, options: Options, profile: str, implementation: str, mtu: int) -> int:
        """Bytes the tunnel adds to a packet as large as its MTU (where padding may be capped)."""
        return self.overhead(options, profile, implementation, mtu)

    def nat_traversal_overhead(self, options: Options, implementation: str) -> int:
        """Bytes more per packet when a NAT sits between the ends: ESP that IKE's NAT detection then puts
        in UDP (RFC 3948) by itself; none for a tunnel whose packets are UDP or TCP already."""
        return 0

    # -- what its cryptography is (algorithms.py) ---------------------------
    def algorithms(self, options: Options, profile: str, implementation: str = ""):
        """The algorithms this configuration runs on its control and data channels, as the driver
        configures them or the software's defaults give them (an algorithms.Algorithms); None: no VPN."""
        return None

    def negotiated(self, tunnel: Tunnel, options: Options, profile: str):
        """What the live tunnel negotiated, read from its daemons' logs or the kernel's SAs (an
        algorithms.Algorithms; what could not be read left empty), or None when nothing was read."""
        return None

    # -- what its software does to a sample ---------------------------------
    def sample_flags(self, implementation: str, workload: str, params: dict, loss_pct: float,
                     values: dict[str, float]) -> list[Flag]:
        """The flags this VPN's software puts on a sample of a workload (its kind and options) over a
        link that loses `loss_pct`, from the sample's values (pptpd's hold: drivers/pptp.py)."""
        return []


def wait_for(predicate, timeout: float, what: str, tunnel: Tunnel | None = None, interval: float = 0.05) -> None:
    """Poll until predicate() is true; fail early, with the log, if a daemon died."""
    timeout *= SLOWDOWN
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if tunnel is not None:
            problem = tunnel.health()
            if problem:  # with the logs: an exit status alone does not say why (pppd's 16 is any hang-up)
                raise TunnelError(f"{what}: {problem}\n{tunnel.logs()}".rstrip())
        time.sleep(interval)
    logs = tunnel.logs() if tunnel else ""
    raise TunnelError(f"timed out after {timeout:g} s waiting for {what}" + (f"\n{logs}" if logs else ""))


def route_into(node: Node, subnets: list[str], dev: str) -> None:
    """Send these networks into the tunnel interface instead of along the chain."""
    if subnets:
        node.ip(*(f"route replace {net} dev {dev}" for net in subnets))
