"""A study's testbed on real hosts: the two ends of its WAN are inventory hosts, and the WAN is
the real path between them.

A role mapped to a host (`hosts:` in the study, HOST_ROLES) runs in the host's own network
namespace; every other role is a namespace on its neighbour's host, joined to it by a veth pair,
with the namespace testbed's addresses (topology.py). Only the WAN differs: its addresses are the
hosts' own, the address each reaches the other at. Nothing is ever routed across the WAN in
clear: with a VPN, the source namespace reaches the sink namespace through the tunnel only;
without one (the baseline, in the same rounds), the source and the sink are the two hosts
themselves, so the baseline is the real path's own.

Everything a testbed creates on a host is recorded there first (hoststate.py) and removed when the
testbed is destroyed: what the host's record gained since the testbed began. The sysctls' old
values are put back when the run ends, and a host whose SSH connection is lost is cleaned over a
fresh connection then (`SshHost.close`), or by `vpnlab hosts clean` after a crash.

A HostSet holds every host of the study once (one SSH connection each, one record each) and its
pairs (HostPair): a study may list several, each running the whole plan (plan.make_plan), in
parallel where they share no host (runner.py).
"""

from __future__ import annotations

import concurrent.futures
import shlex
import subprocess
from dataclasses import dataclass, field

from ..catalog import DRIVERS, declared
from ..core.features import FEATURES, Capabilities, parse_probe, probe_argv
from ..core.errors import StudyError, VpnlabError
from ..testbed.shaping import shape_commands
from ..testbed.topology import HOST_ROLES, Layout, Testbed, chain_routes
from ..measure.cpu import CpuMeter
from .cpu import HostProc
from .doctor import locate, version_script
from .inventory import Host, load_inventory, select
from .node import RemoteNode
from .ports import SOCKET_TABLES, held_ports, held_text
from .ssh import HostUnreachable, SshHost

# The address a host reaches the other at (the inventory may give it as `vpnlab_address`, else
# the other's ansible_host, resolved there), and on the way to it: the interface, the host's own
# source address, the interface's driver (the device's, else the link kind) and speed in Mbit/s.
WAN_PROBE = r"""
to=$(getent ahostsv4 "$1" | sed -n '1s/ .*//p'); to=${to:-$1}
route=$(ip -o route get "$to") || exit 1
dev=$(echo "$route" | sed -n 's/.* dev \([^ ]*\).*/\1/p'); src=$(echo "$route" | sed -n 's/.* src \([^ ]*\).*/\1/p')
drv=$(basename "$(readlink "/sys/class/net/$dev/device/driver" 2>/dev/null)" 2>/dev/null)
[ -n "$drv" ] || drv=$(ip -d -j link show dev "$dev" 2>/dev/null | sed -n 's/.*"info_kind":"\([^"]*\)".*/\1/p')
speed=$(cat "/sys/class/net/$dev/speed" 2>/dev/null || echo -1)
printf '%s\t%s\t%s\t%s\t%s\n' "$to" "$dev" "$src" "${drv:-unknown}" "${speed:--1}"
"""
SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.core.rmem_max": 64 * 1024 * 1024,  # iperf3 -w is capped by these (as in the namespace testbed)
    "net.core.wmem_max": 64 * 1024 * 1024,
}


# Prints the modules (its arguments) that this python3 cannot import: imported, as the workload will
# (a spec alone is found for an empty directory, a broken install passes it).
FIND_MODULES = ("import importlib, sys\nfor m in sys.argv[1:]:\n    try: importlib.import_module(m)\n"
                "    except Exception: print(m)")


def tools_script() -> str:
    """For each program vpnlab declares that the host has: its name, a tab and its path. Not the
    programs built from Go modules: they live in this machine's cache, and a host's program of that
    name is not the build."""
    lines = [f'{locate(tool)} && printf "%s\\t%s\\n" {shlex.quote(tool.command)} "$p"'
             for tool in declared().values() if tool.debian]
    return "\n".join(lines) + "\ntrue\n"


@dataclass
class Site:
    """One end of the WAN: an inventory host, its SSH connection, and what it is."""

    role: str                  # the study's name for it (client, gateway, left, right)
    host: Host
    ssh: SshHost
    peer: str = ""             # the other host's address, as this one reaches it
    source: str = ""           # this host's own address on the way there
    device: str = ""           # its interface on the way there: the WAN's end
    nic: dict = field(default_factory=dict)  # its interface on the way to the other: driver, speed

    @property
    def name(self) -> str:
        return self.host.name


class HostPair:
    """Two hosts at the ends of the WAN, for the scenarios that run on them."""

    def __init__(self, sites: list[Site]) -> None:
        self.sites = sites

    @property
    def left(self) -> Site:
        return self.sites[0]

    @property
    def right(self) -> Site:
        return self.sites[1]

    @property
    def roles(self) -> dict[str, str]:
        """Role -> inventory host, as a scenario's results record it."""
        return {site.role: site.name for site in self.sites}

    @property
    def text(self) -> str:
        return " and ".join(f"{site.role} {site.name}" for site in self.sites)

    @property
    def lost(self) -> str | None:
        """Why the pair cannot go on (a host's SSH connection was lost), or None."""
        gone = [site for site in self.sites if site.ssh.state is not None and site.ssh.lost]
        return (f"host {gone[0].host}: the SSH connection was lost; the scenarios on it cannot go on"
                if gone else None)

    def own_namespaces(self, layout: Layout) -> dict[int, Site]:
        """The nodes of `layout` that run in a host's own network namespace, the WAN's two ends, each
        with its host; every other node is a namespace of its own on its neighbour's host."""
        return {layout.wan: self.left, layout.wan + 1: self.right}

    def testbed(self, state, layout: Layout, link, tag: str, direct: bool) -> "RemoteTestbed":
        return RemoteTestbed.build_on(self, state, layout, link, tag, direct)


class HostSet:
    """The study's hosts, one SSH connection each for the whole run, and its pairs of them."""

    def __init__(self, study, inventory) -> None:
        roles = HOST_ROLES[study.topology]
        if not study.hosts:
            raise StudyError(f"--inventory: study {study.name!r} maps no role to a host; add `hosts:` "
                             f"({' and '.join(roles)} -> inventory hosts) or leave --inventory out to run it in "
                             "namespaces here")
        if inventory is None:
            named = ", ".join(f"{r}: {h}" for pair in study.hosts for r, h in pair.items())
            raise StudyError(f"hosts: study {study.name!r} runs on real hosts ({named}): give their Ansible "
                             "inventory with --inventory FILE")
        names = list(dict.fromkeys(pair[role] for pair in study.hosts for role in roles))
        self.ssh = {host.name: SshHost(host, run_id="") for host in select(load_inventory(inventory), names, inventory)}
        self.pairs = [HostPair([Site(role, self.ssh[pair[role]].host, self.ssh[pair[role]]) for role in roles])
                      for pair in study.hosts]
        self.facts: dict[str, dict] = {}
        self.held_ports: dict[str, set] = {}  # per host, what its own network namespace holds (ports.py)

    @property
    def text(self) -> str:
        return "; ".join(pair.text for pair in self.pairs)

    def pair_of(self, scenario) -> HostPair:
        return next(pair for pair in self.pairs if pair.roles == scenario.hosts)

    # -- before the run ------------------------------------------------------
    def probe(self, commands: set[str], modules: tuple[str, ...] = ()) -> dict[int, Capabilities]:
        """Connect to every host and learn what it offers, the versions of `commands` there, which of
        the Python `modules` its python3 lacks, the ports its own network namespace holds, and how the
        hosts of each pair reach each other. Per pair (by its index), what it can run: what both of
        its hosts can."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(self.ssh))) as pool:
            list(pool.map(lambda ssh: self._probe_host(ssh, commands, modules), self.ssh.values()))
            list(pool.map(lambda site_other: self._probe_path(*site_other),
                          [(p.sites[i], p.sites[1 - i]) for p in self.pairs for i in (0, 1)]))
        caps = {}
        for index, pair in enumerate(self.pairs):
            a, b = (self.facts[site.name] for site in pair.sites)
            kernels = self.kernels([site.name for site in pair.sites])
            tools = {name: a["paths"].get(name) if b["paths"].get(name) else None for name in declared()}
            caps[index] = Capabilities(kernels.kernel, kernels.features, tools, kernels.hints)
        return caps

    def kernels(self, names: list[str]) -> Capabilities:
        """What the kernels of these probed hosts offer together, with every program taken as present:
        what a scenario lacks there is what those kernels lack."""
        facts = [self.facts[name] for name in names]
        features = {f: all(fact["features"].get(f, False) for fact in facts) for f in FEATURES}
        return Capabilities(" / ".join(dict.fromkeys(fact["kernel"] for fact in facts)), features,
                            {name: name for name in declared()}, {name: tool.hint for name, tool in declared().items()})

    def lacks_modules(self, name: str, modules) -> list[str]:
        """Which of these Python modules the probed host's python3 cannot import."""
        return [m for m in modules if m in self.facts[name]["lacks_modules"]]

    def _probe_host(self, ssh: SshHost, commands: set[str], modules: tuple[str, ...]) -> None:
        ssh.attach()
        try:
            kernel = parse_probe(ssh.run(probe_argv()).stdout)
            paths = dict(line.split("\t", 1) for line in ssh.script(tools_script()).stdout.splitlines() if "\t" in line)
            versions = dict(line.split("\t", 1) for line in ssh.script(version_script(commands), timeout=300)
                            .stdout.splitlines() if "\t" in line)
            self.held_ports[ssh.host.name] = held_ports(ssh.script(SOCKET_TABLES).stdout)
            lacks = ssh.run(["python3", "-c", FIND_MODULES, *modules]).stdout.split() if modules else []
        except (ValueError, KeyError) as exc:
            raise HostUnreachable(f"host {ssh.host}: could not be examined ({exc})") from exc
        self.facts[ssh.host.name] = {"address": ssh.host.address, "kernel": kernel["kernel"],
                                     "cpu_model": kernel["cpu_model"], "cpus": kernel["cpus"],
                                     "features": kernel["features"], "paths": paths, "tools": versions,
                                     "lacks_modules": lacks}

    def ports_held(self, scenario) -> list[str]:
        """What the probed hosts' own network namespaces already hold of the ports the scenario's
        tunnel ends would bind there, as its user is told (ports.held_text). A layer's end in a
        namespace of its own (a nested layer's) has ports of its own."""
        pair = self.pair_of(scenario)
        layout = Layout.for_topology(scenario.topology, len(scenario.vpn.layers))
        on_hosts = pair.own_namespaces(layout)
        held = []
        for layer, (client, gateway) in zip(scenario.vpn.layers, layout.tunnels):
            ports = DRIVERS[layer.driver].ports(layer.options)
            for node, bound in ((client, ports.client), (gateway, ports.gateway)):
                if node in on_hosts:
                    host = on_hosts[node].name
                    held += [(host, port) for port in bound if port in self.held_ports[host]]
        return [held_text(host, port) for host, port in dict.fromkeys(held)]

    def ports_taken(self, scenario) -> list[str]:
        """ports_held, read afresh on the scenario's hosts: what another program took there since the
        probe, after a repetition failed (a daemon that could not bind fails late and obscurely).
        Nothing if a host cannot be read now: the failure's own reason stands."""
        try:
            for site in self.pair_of(scenario).sites:
                self.held_ports[site.name] = held_ports(site.ssh.script(SOCKET_TABLES).stdout)
        except (VpnlabError, subprocess.SubprocessError):
            return []
        return self.ports_held(scenario)

    @staticmethod
    def _probe_path(site: Site, other: Site) -> None:
        target = str(other.host.vars.get("vpnlab_address") or other.host.address)
        shown = site.ssh.run(["sh", "-c", WAN_PROBE, "sh", target]).stdout.strip().split("\t")
        try:
            site.peer, site.device, site.source, driver, speed = shown
        except ValueError:
            raise HostUnreachable(f"host {site.name}: cannot tell its way to {other.name} ({target})") from None
        if not (site.device and site.source):
            raise HostUnreachable(f"host {site.name}: no route to {other.name} ({target})")
        site.nic = {"toward": other.name, "interface": site.device, "driver": driver,
                      "speed_mbit": int(speed) if speed.lstrip("-").isdigit() else -1}

    def describe(self) -> dict[str, dict]:
        """Per host, for the run's record: address, role(s), kernel, CPU, NIC toward the other host
        of its pair(s), tool versions."""
        out = {}
        for name in self.ssh:  # in the study's order
            facts = self.facts[name]
            sites = [site for pair in self.pairs for site in pair.sites if site.name == name]
            nics = [site.nic for site in sites]
            out[name] = {"role": ", ".join(dict.fromkeys(site.role for site in sites)),
                         **{k: v for k, v in facts.items() if k not in ("paths", "features")},
                         "nic": nics[0], **({"nics": nics} if len(nics) > 1 else {})}
        return out

    # -- the run -------------------------------------------------------------
    def begin(self, run_id: str) -> None:
        """The run's record and folder on each host (the connections are open from `probe`)."""
        for ssh in self.ssh.values():
            ssh.run_id = run_id
            ssh.begin()

    def close(self) -> list[str]:
        """Tear down everything of the run on every host; what could not be removed, if anything."""
        problems = []
        for ssh in self.ssh.values():
            try:
                ssh.close()
            except VpnlabError as exc:
                problems.append(str(exc))
        return problems


@dataclass
class RemoteTestbed(Testbed):
    """The Testbed of a scenario on a HostPair (see the module's docstring)."""

    pair: HostPair | None = None
    direct: bool = False      # no VPN: the source and the sink are the WAN's ends themselves
    ifnames: dict = field(default_factory=dict)  # (node, link) -> its interface, where not l<link>
    marks: list = field(default_factory=list)    # (SshHost, its record when the testbed began)

    remote = True

    @classmethod
    def build_on(cls, pair: HostPair, state, layout: Layout, link, tag: str, direct: bool) -> "RemoteTestbed":
        bed = cls(state, layout, pair=pair, direct=direct)
        bed.marks = [(site.ssh, site.ssh.mark()) for site in pair.sites]
        try:
            bed._build(link, tag)
        except BaseException:
            bed.destroy()
            raise
        return bed

    def _build(self, link, tag: str) -> None:
        layout, wan = self.layout, self.layout.wan
        ends = self.pair.own_namespaces(layout)
        for n, role in enumerate(layout.roles):
            if n in ends:
                self.nodes.append(RemoteNode(role, ends[n].ssh))
                continue
            site = self.pair.left if n < wan else self.pair.right
            node = RemoteNode(role, site.ssh, self.state.namespace_name(f"{tag}{role}"))
            self.nodes.append(node)
            site.ssh.add_namespace(node.namespace)
        count = len(self.nodes)
        for i in range(count - 1):
            if i == wan:
                continue  # the real path
            left, right = self.nodes[i], self.nodes[i + 1]
            if left.own_namespace or right.own_namespace:
                # made from the host's own side, so that its name (unique on the host) is recorded there
                own, other, n_own = (left, right, i) if left.own_namespace else (right, left, i + 1)
                self.ifnames[(n_own, i)] = name = f"vl{self.state.run_id}{tag}l{i}"
                own.ip(f"link add {name} type veth peer name l{i} netns {other.namespace}")
            else:
                left.ip(f"link add l{i} type veth peer name l{i} netns {right.namespace}")
        for n, node in enumerate(self.nodes):
            node.sysctl(**SYSCTLS)
            node.ip(*self._node_commands(n))
        if link.shape:
            for side, node in enumerate(self.wan_nodes):
                node.tc(*shape_commands(self.wan_device(side), link))

    def _node_commands(self, n: int) -> list[str]:
        """Addresses and routes of node n, as Testbed.build gives them, but none across the WAN."""
        layout, wan, count = self.layout, self.layout.wan, len(self.nodes)
        cmds = []
        for j in (n - 1, n):
            if 0 <= j < count - 1 and j != wan:
                dev = self.ifname(n, j)
                cmds += [f"addr add {self.address(n, j)}/24 dev {dev}", f"link set {dev} up"]
        return cmds + chain_routes(layout, n, self.address, wan)

    def ifname(self, node: int, link: int) -> str:
        return self.ifnames.get((node, link), f"l{link}")

    # -- what differs from the namespace testbed --------------------------------
    def address(self, node: int, link: int) -> str:
        if link == self.layout.wan:  # the hosts' own: the left's source, the right as the left reaches it
            return self.pair.left.source if node == link else self.pair.left.peer
        return super().address(node, link)

    @property
    def source(self):
        return self.wan_nodes[0] if self.direct else self.nodes[0]

    @property
    def sink(self):
        return self.wan_nodes[1] if self.direct else self.nodes[-1]

    @property
    def sink_ip(self) -> str:
        if self.direct:
            return self.address(self.layout.wan + 1, self.layout.wan)
        return super().sink_ip

    def wan_device(self, side: int) -> str:
        return self.pair.sites[side].device

    def wan_filter(self, side: int) -> list[str]:
        """Only what passes between the two hosts, and never the SSH session that drives them."""
        site = self.pair.sites[side]
        management = site.ssh.management
        return ["host", site.source, "and", "host", site.peer, "and", "not", "(", "host", management.controller_ip,
                "and", "tcp", "port", str(site.host.port), ")"]

    def cpu_meter(self, layers: int):
        ends = [self.layout.tunnels[layer] for layer in range(layers)]
        sides = {"client": [self.nodes[a] for a, _ in ends], "gateway": [self.nodes[b] for _, b in ends]}
        return CpuMeter([HostProc(site, sides, self.nodes) for site in self.pair.sites])

    def destroy(self) -> None:
        """Remove what the hosts' records gained since the testbed began; on a lost host it stays
        recorded there, for `close` to remove over a fresh connection."""
        for ssh, mark in self.marks:
            if ssh.lost:
                continue
            try:
                ssh.undo(mark)
            except VpnlabError:
                continue
        self.marks.clear()
        self.nodes.clear()
