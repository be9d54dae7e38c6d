"""Where each scenario of a plan runs: on this machine's namespaces, in the VM, or on a pair of real
hosts; and why the rest cannot run anywhere. `place` answers for `vpnlab run`, `tune`, `doctor` and
the benchmarks alike; the command line only prints it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..catalog import DRIVERS
from ..core.errors import CapabilityError, VpnlabError
from ..hosts.prepare import TESTBED_TOOLS
from ..machines import vm
from ..testbed import cgroups
from ..machines.capabilities import Capabilities, detect, vm_capabilities
from ..workloads import background
from .scenarios import Plan, Scenario

BACKENDS = ("auto", "netns", "vm")


@dataclass
class Placement:
    caps: Capabilities                                      # this machine's, or the first pair of hosts'
    in_vm: set[str] = field(default_factory=set)            # ids of the scenarios for the VM
    cannot: dict[int, str] = field(default_factory=dict)    # index -> why no place can run it
    refused: dict[str, str] = field(default_factory=dict)   # id -> why it fails before it starts (hosts' kernels)

    def enforce(self, plan: Plan, drop: bool) -> list[str]:
        """What cannot run is an error, or (`drop`: the default study, "every VPN this machine can
        run") left out of the plan; the reasons of what was left out."""
        if self.cannot and not drop:
            raise VpnlabError("this machine cannot run the study as written:\n  " + "\n  ".join(self.said())
                              + "\n(`vpnlab doctor` lists what is missing and which packages provide it)")
        plan.drop(self.cannot)
        return list(self.cannot.values())

    def said(self) -> list[str]:
        """Why scenarios cannot run, a line per reason: the scenarios that lack the same things share one."""
        by_reason: dict[str, list[str]] = {}
        for why in self.cannot.values():
            scenario, _, reason = why.partition(" needs: ")
            by_reason.setdefault(reason, []).append(scenario)
        return [f"{names[0]} needs: {reason}" if len(names) == 1 else
                f"{names[0]} and {len(names) - 1} more scenarios need: {reason}"
                for reason, names in by_reason.items()]


def place(plan: Plan, backend: str, hosts=None) -> Placement:
    """Where each scenario runs. On real hosts (a hosts.testbed.HostSet), each on its pair; else
    this machine is detected, with whether a VM can run here, and `backend` says where to run:
    `netns` everything here, `vm` everything in the VM, `auto` in the VM only what this machine
    cannot run. The VM's scenarios bring their no-VPN baselines' twins into the plan."""
    if hosts is not None:
        return _on_hosts(plan, hosts)
    caps = detect()
    vm_problem = vm.available() if backend != "netns" else "not asked for"
    vm_caps = None
    if vm_problem is None:
        vm_caps = vm_capabilities(caps, vm.describe().get("kernel", "distribution kernel"))
    cannot, in_vm = assign_backends(plan, caps, backend, vm_caps, vm_problem)
    in_vm |= add_vm_twins(plan, in_vm)
    return Placement(caps, in_vm, cannot)


def check_scenario(scenario: Scenario, caps: Capabilities) -> list[str]:
    """Resolve the scenario's implementations on `caps`; what they lack (empty: it can run)."""
    missing = []
    if not caps.has("netns") or not caps.has("veth"):
        missing.append("network namespaces and veth pairs")
    if scenario.link.rate_mbit and not caps.has("tbf"):
        missing.append("the tbf qdisc (link rate)")
    if scenario.link.needs_netem and not caps.has("netem"):
        missing.append("the netem qdisc (link delay, jitter or loss)")
    if scenario.vpn.cores and scenario.vpn.cores > len(cgroups.cores()):
        missing.append(f"{scenario.vpn.cores} cores for each tunnel end (cores); this machine gives "
                       f"{len(cgroups.cores())}")
    scenario.implementations = []
    for layer in scenario.vpn.layers:
        driver = DRIVERS[layer.driver]
        try:
            scenario.implementations.append(driver.resolve(layer.options, caps).name)
        except CapabilityError as exc:
            if str(exc) not in missing:  # the same driver nested in itself lacks the same things
                missing.append(str(exc))
    tools = set(scenario.kind.needs(scenario.workload))
    if scenario.link.background:
        tools |= background.needs(scenario.link.background)
    if scenario.link.icmp == "blocked" or scenario.link.behind_nat or scenario.workload.events:
        tools.add("nft")  # the router's filter (testbed/router.py), its NAT (nat.py), outages (faults.py)
    if scenario.link.nat_udp_timeout_s and not caps.has("nat-timeout"):
        missing.append("a namespace's own UDP NAT timeout (nat_udp_timeout_s): this kernel's conntrack keeps "
                       "nf_conntrack_udp_timeout for all namespaces, or has no nftables masquerade")
    for tool in sorted(tools):
        if not caps.tool(tool):
            missing.append(f"'{tool}' ({caps.hint(tool)})")
    return missing


def _needs(scenario: Scenario, missing: list[str]) -> str:
    return f"scenario {scenario.index} ({scenario.label}) needs: " + "; ".join(missing)


def check_plan(plan: Plan, caps: Capabilities) -> dict[int, str]:
    """Resolve each scenario's implementations; scenario index -> what this machine lacks for it."""
    problems = {}
    for scenario in plan.scenarios:
        missing = check_scenario(scenario, caps)
        if missing:
            problems[scenario.index] = _needs(scenario, missing)
    return problems


def assign_backends(plan: Plan, caps: Capabilities, backend: str,
                    vm_caps: Capabilities | None, vm_problem: str | None) -> tuple[dict[int, str], set[str]]:
    """Where each scenario runs: (index -> why it cannot run anywhere, ids of those that go to the VM).

    `netns` runs everything on this host; `vm` everything in the VM; `auto` runs in the VM only
    what this host's kernel or tools cannot. `vm_caps` is what the guest will offer (None when no
    VM can be booted here, `vm_problem` says why)."""
    if backend == "netns":
        return check_plan(plan, caps), set()
    problems, to_vm = {}, set()
    for scenario in plan.scenarios:
        host_missing = check_scenario(scenario, caps) if backend == "auto" else ["the VM backend (asked for)"]
        if not host_missing:
            continue
        if vm_caps is None:
            problems[scenario.index] = _needs(scenario, host_missing + [f"a VM to run in, but {vm_problem}"])
            continue
        vm_missing = check_scenario(scenario, vm_caps)
        if vm_missing:
            problems[scenario.index] = _needs(scenario, vm_missing) + " (even in the VM)"
        else:
            to_vm.add(scenario.id)
    return problems, to_vm


def add_vm_twins(plan: Plan, in_vm: set[str]) -> set[str]:
    """A VPN measured in the VM is graded against no VPN measured in the VM: emulation slows
    both. For each such VPN whose baseline runs on this host, add the baseline's twin to the
    plan, for the VM. Returns the twins' ids."""
    baselines = {s.group: s for s in plan.scenarios if not s.vpn.layers}
    wanted = {s.group for s in plan.scenarios if s.vpn.layers and s.id in in_vm}
    twins = set()
    for group in sorted(wanted):
        base = baselines.get(group)
        if base is None or base.id in in_vm:
            continue
        twin = dataclasses.replace(base, index=len(plan.scenarios), vm_twin=True, implementations=[])
        plan.scenarios.append(twin)
        twins.add(twin.id)
    return twins


def _on_hosts(plan: Plan, hosts) -> Placement:
    """Connect to the study's hosts and check each scenario against its pair: a scenario their
    kernels cannot run (no ESP, PPP, L2TP, netem ...) fails before it starts, with the host that
    lacks it; a program they lack is an error naming it (`hosts prepare` installs it), as is a port
    its VPN binds on a host that another program there holds, and a study none of whose scenarios
    can run."""
    commands = set(TESTBED_TOOLS)
    for scenario in plan.scenarios:
        commands |= set(scenario.kind.needs(scenario.workload))
        commands |= {tool.command for driver in scenario.drivers for tool in driver.tools}
        commands |= background.needs(scenario.link.background) if scenario.link.background else set()
    modules = {s.id: _python_modules(s) for s in plan.scenarios}
    try:
        caps = hosts.probe(commands, tuple(sorted({m for ms in modules.values() for m in ms})))
        problems, held, refused = [], [], {}
        for scenario in plan.scenarios:
            pair = hosts.pair_of(scenario)
            if why := _kernels_lack(scenario, pair, hosts) or _only_built(scenario):
                refused[scenario.id] = why
                continue
            missing = check_scenario(scenario, caps[hosts.pairs.index(pair)])
            missing += [f"on host {site.name}, the Python modules " + ", ".join(f"{m} ({modules[scenario.id][m]})"
                                                                       for m in lacks)
                        for site in pair.sites if (lacks := hosts.lacks_modules(site.name, modules[scenario.id]))]
            if missing:
                problems.append(f"scenario {scenario.index} ({scenario.label}) on {pair.text} needs: "
                                + "; ".join(missing))
            if taken := hosts.ports_held(scenario):
                held.append(f"scenario {scenario.index} ({scenario.label}) on {pair.text}: " + "; ".join(taken))
        if not problems and len(refused) == len(plan.scenarios):
            problems = [f"scenario {s.index} ({s.label}): {refused[s.id]}" for s in plan.scenarios]
    except BaseException:
        hosts.close()
        raise
    if problems or held:
        hosts.close()
        hint = ("\n(`vpnlab hosts prepare --inventory FILE --study STUDY` installs the packages; "
                "`vpnlab hosts doctor` lists what each host has)") if problems else ""
        raise VpnlabError("the hosts cannot run the study as written:\n  " + "\n  ".join(held + problems) + hint)
    return Placement(caps[0], refused=refused)


def _python_modules(scenario: Scenario) -> dict[str, str]:
    """The Python modules (-> their package) a scenario's workload and background import on a node."""
    return {**scenario.kind.modules, **(background.MODULES if scenario.link.background else {})}


def _only_built(scenario: Scenario) -> str | None:
    """Why a scenario cannot run on real hosts because a VPN of it runs only as a program built from
    its Go module, in this machine's cache (vpnlab does not copy builds to hosts); None: it can."""
    for layer in scenario.vpn.layers:
        if not DRIVERS[layer.driver].on_hosts(layer.options):
            return (f"{layer.driver} runs only as built from its Go module (into this machine's cache), and vpnlab "
                    "does not copy builds to real hosts")
    return None


def _kernels_lack(scenario: Scenario, pair, hosts) -> str | None:
    """Why the kernels of a pair of hosts cannot run a scenario, naming the host that lacks a piece
    (or the two, when only their combination does); None: they can."""
    names = [site.name for site in pair.sites]
    both = check_scenario(scenario, hosts.kernels(names))
    if not both:
        return None
    alone = [f"host {name}: " + "; ".join(lacks) for name in names
             if (lacks := check_scenario(scenario, hosts.kernels([name])))]
    return "the kernel cannot run it: " + ("; ".join(alone) or f"{pair.text} together: " + "; ".join(both))
