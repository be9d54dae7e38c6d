"""From a study to an ordered list of scenarios, each checked against this machine.

A scenario is one VPN configuration over one link profile under one workload,
measured `repetitions` times on a testbed of its own. Its id is a hash of what
it is, so a resumed run recognises the scenarios it already finished.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from .capabilities import Capabilities
from .drivers import REGISTRY as DRIVERS
from .errors import CapabilityError
from .study import Link, RepetitionRule, Study, VpnConfig
from .workloads import REGISTRY as WORKLOADS
from .workloads import background

# Measured here: namespaces + veth + shaping ~0.3 s, a userspace tunnel ~1 s, teardown ~0.5 s.
SCENARIO_OVERHEAD_S = 2.5

WORKLOAD_TOOLS = {
    "tcp": lambda w: ("iperf3",),
    "udp": lambda w: ("iperf3",),
    "ping": lambda w: ("ping",),
    "transfer": lambda w: {"http": ("nginx", "curl"), "https": ("nginx", "curl"), "ftp": ("vsftpd", "curl"),
                           "ssh": ("sshd", "scp", "ssh-keygen")}[w.protocol],
}


@dataclass
class Scenario:
    index: int
    topology: str
    vpn: VpnConfig
    link: Link
    workload: object
    repetitions: RepetitionRule
    implementations: list[str] = field(default_factory=list)

    @property
    def key(self) -> dict:
        link = self.link.model_dump(mode="json")
        if link["background"] is None:
            del link["background"]  # ids from before background traffic existed stay valid
        return {
            "topology": self.topology,
            "vpn": self.vpn.as_dict(),
            "link": link,
            "workload": self.workload.model_dump(mode="json"),
        }

    @property
    def id(self) -> str:
        digest = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:10]
        return f"s{digest}"

    @property
    def label(self) -> str:
        return f"{self.vpn.label} | {self.link.label} | {self.workload.label}"

    def repetition_s(self) -> float:
        return WORKLOADS[self.workload.kind].estimate_s(self.workload, self.link)

    def estimate_s(self) -> float:
        """With an adaptive rule, the minimum: the interval may be tight after `min` repetitions."""
        return SCENARIO_OVERHEAD_S + self.repetition_s() * self.repetitions.min


@dataclass
class Plan:
    study: Study
    scenarios: list[Scenario]

    def estimate_s(self) -> float:
        return sum(s.estimate_s() for s in self.scenarios)

    def drop(self, indices) -> None:
        """Leave out these scenarios (by index) and number the rest again."""
        self.scenarios = [s for s in self.scenarios if s.index not in indices]
        for i, scenario in enumerate(self.scenarios):
            scenario.index = i


def make_plan(study: Study) -> Plan:
    """The cartesian product vpns x links x workloads, in the study's order."""
    scenarios = []
    for vpn in study.vpns:
        for link in study.links:
            for workload in study.workloads:
                scenarios.append(Scenario(0, study.topology, vpn, link, workload, study.repetitions))
    if study.order == "shuffled":
        random.Random(study.seed).shuffle(scenarios)
    for i, scenario in enumerate(scenarios):
        scenario.index = i
    return Plan(study, scenarios)


def check_scenario(scenario: Scenario, caps: Capabilities) -> list[str]:
    """Resolve the scenario's implementations on `caps`; what they lack (empty: it can run)."""
    missing = []
    if not caps.has("netns") or not caps.has("veth"):
        missing.append("network namespaces and veth pairs")
    if scenario.link.rate_mbit and not caps.has("tbf"):
        missing.append("the tbf qdisc (link rate)")
    if scenario.link.needs_netem and not caps.has("netem"):
        missing.append("the netem qdisc (link delay, jitter or loss)")
    scenario.implementations = []
    for layer in scenario.vpn.layers:
        driver = DRIVERS[layer.driver]
        try:
            scenario.implementations.append(driver.resolve(layer.options, caps).name)
        except CapabilityError as exc:
            if str(exc) not in missing:  # the same driver nested in itself lacks the same things
                missing.append(str(exc))
    tools = set(WORKLOAD_TOOLS[scenario.workload.kind](scenario.workload))
    if scenario.link.background:
        tools |= background.tools(scenario.link.background)
    for tool in sorted(tools):
        if not caps.tool(tool):
            missing.append(f"'{tool}'")
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


BACKENDS = ("auto", "netns", "vm")


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


def place(plan: Plan, backend: str) -> tuple[Capabilities, dict[int, str], set[str]]:
    """Detect this host (and whether a VM can run here) and assign the backends: this host's
    capabilities, scenario index -> why it cannot run, ids of the scenarios for the VM."""
    from . import vm
    from .capabilities import detect, vm_capabilities

    caps = detect()
    vm_problem = vm.available() if backend != "netns" else "not asked for"
    vm_caps = None
    if vm_problem is None:
        vm_caps = vm_capabilities(caps, vm.describe().get("kernel", "distribution kernel"))
    problems, in_vm = assign_backends(plan, caps, backend, vm_caps, vm_problem)
    return caps, problems, in_vm
