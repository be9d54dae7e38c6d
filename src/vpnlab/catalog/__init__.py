"""The catalog: every VPN driver, workload kind, metric and program vpnlab knows.

It sits above everything it lists. A driver, a workload kind, the observers, the CPU meter, the
background traffic and the real-hosts controller each declare their own (a class, `metrics.declare`,
`tools.Tool`) and never ask the catalog; the stages above them (study, plan, runner, store, the
reports, the CLI) ask it. A new driver or workload kind is one module plus one line here.
"""

from __future__ import annotations

from ..measure import cpu  # noqa: F401  (their metrics declare themselves)
from ..measure import observers
from ..drivers.base import MESH_METRICS, TUNNEL_METRICS, Driver  # noqa: F401  (a tunnel's metrics, a mesh's)
from ..drivers.l2tp import L2tp
from ..drivers.libreswan import Libreswan
from ..drivers.nebula import Nebula
from ..drivers.none import NoVpn
from ..drivers.ocserv import Ocserv
from ..drivers.openvpn import OpenVpn
from ..drivers.pptp import Pptp
from ..drivers.softether import SoftEther
from ..drivers.strongswan import StrongSwan
from ..drivers.tailscale import Tailscale
from ..drivers.tinc import Tinc
from ..drivers.wireguard import WireGuard
from ..drivers.yggdrasil import Yggdrasil
from ..metrics import REGISTRY, Level, Metric
from ..tools import BASE_PACKAGES, BUILD, CORE, HOSTS, REPORT, VM, Tool
from ..workloads import background, office
from ..workloads.base import WorkloadKind
from ..workloads.path_mtu import PathMtu
from ..workloads.ping import Ping
from ..workloads.reach import Reach
from ..workloads.tcp import Tcp
from ..workloads.transfer import Transfer
from ..workloads.udp import Udp
from ..workloads.udp_capacity import UdpCapacity

DRIVERS: dict[str, Driver] = {d.name: d for d in (NoVpn(), WireGuard(), OpenVpn(), StrongSwan(), Ocserv(), Pptp(), L2tp(),
                                               Libreswan(), Nebula(), Tinc(), Yggdrasil(), SoftEther(),
                                               Tailscale())}

# In the order of Jaha 2014's Table VI (TCP throughput, RTT, UDP throughput, jitter, loss): the
# report's graded table takes its columns in this order.
KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (Tcp(), Ping(), Udp(), UdpCapacity(), Transfer(), PathMtu(), Reach())}

# Every metric vpnlab can record (the producers above declared them as they were imported), by level:
# a workload's, the tunnel's, CPU accounting's, the background's.
METRICS: dict[str, Metric] = {m.name: m for level in Level.__args__ for m in REGISTRY.values() if m.level == level}

# The programs the workloads and the WAN capture run, not the VPN: the CPU meters leave them out of
# a tunnel end's daemons (a remote-access transfer's curl or scp, and its ssh, run beside them).
TRAFFIC_TOOLS = frozenset({"tcpdump", office.NAME} | {tool.command for kind in KINDS.values() for tool in kind.tools})


def metric(name: str) -> Metric:
    """A metric's facts; a name this vpnlab does not know (a store written by another) gets blank ones."""
    if name not in METRICS:
        return Metric(name, "", "", None)
    return METRICS[name]


def recorded_by(kind: WorkloadKind) -> set[str]:
    """The metrics a scenario of this workload kind records: its own, the tunnel's, and those whose
    producers (the observers, the CPU meters) name the kind."""
    return ({m.name for m in kind.metrics} | {name for name, m in METRICS.items()
                                              if m.level == "tunnel" or kind.kind in m.producers.split(", ")})


def unit(name: str) -> str:
    return metric(name).unit


def declared(extra: tuple[Tool, ...] = ()) -> dict[str, Tool]:
    """Command -> declaration, over the testbed, the VM backend, every driver and workload kind."""
    tools = [*CORE, *REPORT, *VM, *background.TOOLS, *HOSTS, *BUILD, *extra]
    for driver in DRIVERS.values():
        tools += driver.tools
    for kind in KINDS.values():
        tools += kind.tools
    return {t.command: t for t in tools}


def packages(extra: tuple[Tool, ...] = ()) -> list[str]:
    """The Debian packages to install: every declared tool's (but the privately unpacked) and
    those the drivers need without a program of their own (plugins, libraries)."""
    wanted = {t.package for t in declared(extra).values() if t.debian and not t.private}
    wanted |= {p for driver in DRIVERS.values() for p in driver.packages}
    wanted |= {p for kind in KINDS.values() for p in kind.packages} | set(background.PACKAGES)
    return sorted(wanted | set(BASE_PACKAGES))


def gobuilds(extra: tuple[Tool, ...] = ()) -> list[Tool]:
    """The declared programs built from Go modules (bootstrap.sh builds them into vpnlab's cache)."""
    return [t for t in declared(extra).values() if t.go]


def markdown_table() -> str:
    """The metric table of docs/metrics.md, generated from the registry (a test keeps the two equal)."""
    lines = ["| metric | unit | direction | recorded by | meaning |", "|---|---|---|---|---|"]
    levels = list(Level.__args__)
    ordered = sorted(METRICS.values(), key=lambda m: (levels.index(m.level), m.name))
    lines += [f"| `{m.name}` | {m.unit} | {m.direction} | {m.producers} | {m.meaning} |" for m in ordered]
    return "\n".join(lines)


def hosts_table() -> str:
    """The "what runs on real hosts" tables of docs/real-hosts.md, generated from the drivers' implementations (with
    their default options) and the workloads' and background's programs (a test keeps the two equal)."""
    def packages(tools, extra=()) -> str:
        return ", ".join(sorted({t.package for t in tools if t.debian} | set(extra))) or "-"

    lines = ["| VPN | implementations, the first the hosts' kernels allow, and the kernel pieces each needs on "
             "both hosts | Debian packages |", "|---|---|---|"]
    for name, driver in DRIVERS.items():
        ways = "; else ".join(f"{way.name}: {', '.join(f'`{f}`' for f in way.features)}"
                              for way in driver.on_hosts(driver.Options()))
        if not ways:
            continue  # only built programs (Tailscale): nothing of it runs on real hosts
        lines.append(f"| `{name}` | {ways} | {packages(driver.tools, driver.packages)} |")
    lines += ["", "| workload | programs (Debian packages) |", "|---|---|"]
    rows = [(f"`{kind}`", tools.tools) for kind, tools in KINDS.items()] + [("`background` (a link's)", background.TOOLS)]
    for name, tools in rows:
        lines.append(f"| {name} | {', '.join(f'{t.command} ({t.package})' for t in tools)} |")
    return "\n".join(lines)
