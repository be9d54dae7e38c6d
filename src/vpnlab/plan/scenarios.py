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
from datetime import datetime
from functools import cached_property

from ..catalog import DRIVERS, KINDS
from .study import Link, RepetitionRule, Study, VpnConfig
from ..measure.recovery import RECOVERY_WAIT_S
from ..testbed.mesh import MESH_SETTLE_S
from ..workloads import background

# Per repetition (each brings its own testbed and tunnel up), measured here: namespaces + veth +
# shaping ~0.3 s, a userspace tunnel ~1 s, proof ~0.5 s, warm-up 0.2 s, teardown ~0.5 s.
REPETITION_OVERHEAD_S = 2.5
# In the emulated VM (bench vm): a tunnel carries 14-93 Mbit/s, and a scenario's set-up, proof
# and tear-down cost ~10 s more than here. A transfer there runs at that pace, not the link's.
VM_PACE_MBIT = 20
VM_REPETITION_OVERHEAD_S = 15
VM_BOOT_S = 20   # bench vm: an empty guest boots and powers off in about 16 s
# A resumed study's remaining time is also told at the pace its stored repetitions kept (measured_pace).
PACE_MIN_REPETITIONS = 10
PACE_PAUSE = 5
# Under software emulation single tunnels carry 14-93 Mbit/s (bench vm): a faster link would
# measure the emulator. Such a link is run at this rate with the same bandwidth-delay product.
EMULATED_RATE_MBIT = 10


@dataclass
class Scenario:
    index: int
    topology: str
    vpn: VpnConfig
    link: Link
    workload: object
    repetitions: RepetitionRule
    implementations: list[str] = field(default_factory=list)
    vm_twin: bool = False  # a no-VPN baseline measured again in the VM, for the VPNs measured there
    run_link: Link | None = None  # the link as run, when it differs from the study's (emulation)
    run_workload: object = None   # the workload's options as run, likewise
    hosts: dict | None = None     # on real hosts: the pair it runs on, role -> inventory host
    pin: bool = True              # its tunnel ends on cores of their own, where there are enough (placement.py)
    peers: int | None = None      # topology mesh: how many peers, and the idle window of its control bytes
    idle_window_s: float = 0

    @property
    def link_as_run(self) -> Link:
        return self.run_link or self.link

    @property
    def workload_as_run(self):
        return self.run_workload or self.workload

    def scale_for_emulation(self) -> str | None:
        """Under software emulation, run a link faster than it can carry at EMULATED_RATE_MBIT,
        its delay and jitter stretched so the bandwidth-delay product (what a window or a
        utilisation depends on) stays the seed's; returns the note that says so. The scenario's
        id (its identity) stays the study's."""
        link = self.link
        if not link.rate_mbit or link.rate_mbit <= EMULATED_RATE_MBIT:
            return None
        factor = link.rate_mbit / EMULATED_RATE_MBIT
        self.run_link = link.model_copy(update={"rate_mbit": float(EMULATED_RATE_MBIT), "delay_ms": link.delay_ms * factor,
                                                "jitter_ms": link.jitter_ms * factor})
        self.run_workload = self.kind.slowed(self.workload, factor)
        offered = (f", and the {self.workload.label} load offered at {1 / factor:g}x its rate (the same share of the "
                   f"link)") if self.run_workload else ""
        return (f"link scaled for software emulation: {link.rate_mbit:g} Mbit/s run at {EMULATED_RATE_MBIT} Mbit/s"
                f" with {factor:g}x the delay (the same bandwidth-delay product){offered}; compare it with no VPN"
                f" on the same scaled link, not with the study's rate")

    @property
    def key(self) -> dict:
        link = self.link.model_dump(mode="json")
        if link["background"] is None:
            del link["background"]  # ids from before background traffic existed stay valid
        if not link["shape"]:
            del link["shape"]  # nor did `shape` (real hosts)
        if link["mtu"] is None and link["icmp"] == "allowed":
            del link["mtu"], link["icmp"]  # nor did a path's MTU and filtered ICMP (a router in the WAN)
        if not self.link.behind_nat:
            del link["nat"], link["nat_udp_timeout_s"]  # nor did a NAT on the client side
        key = {
            "topology": self.topology,
            "vpn": self.vpn.as_dict(),
            "link": link,
            "workload": self.workload.model_dump(mode="json"),
        }
        if self.topology == "mesh":
            key["mesh"] = {"peers": self.peers, "idle_window_s": self.idle_window_s}
        return key | {"vm_twin": True} if self.vm_twin else key

    @cached_property
    def id(self) -> str:
        """Computed once (a scenario's identity fields are not changed after planning;
        dataclasses.replace makes a new one): the runner asks for ids of every scenario for each
        scenario, and recomputing them held a 208-scenario study in the emulated VM for 4 min 30 s
        before its first repetition, and again before each round."""
        digest = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:10]
        return f"s{digest}"

    @property
    def vpn_label(self) -> str:
        return f"{self.vpn.label} (in the VM)" if self.vm_twin else self.vpn.label

    @property
    def label(self) -> str:
        return f"{self.vpn_label} | {self.link.label} | {self.workload.full_label}"

    @property
    def group(self) -> tuple:
        """What a VPN scenario shares with its no-VPN baseline."""
        return self.topology, json.dumps(self.key["link"], sort_keys=True), json.dumps(self.key["workload"],
                                                                                        sort_keys=True)

    @property
    def kind(self):
        """The workload kind (its module's contract) this scenario runs."""
        return KINDS[self.workload.kind]

    @property
    def drivers(self) -> list:
        """The driver of each tunnel layer, outermost first (none for the baseline)."""
        return [DRIVERS[layer.driver] for layer in self.vpn.layers]

    def repetition_s(self, in_vm: bool = False) -> float:
        rate = self.link_as_run.rate_mbit
        if in_vm:
            rate = min(rate or VM_PACE_MBIT, VM_PACE_MBIT, EMULATED_RATE_MBIT)
        mix = self.link.background
        if mix and rate:  # the workload gets what the background leaves of the link
            rate = max(rate - mix.offered_kbit / 1000, rate / 10)
        mesh = self.idle_window_s + MESH_SETTLE_S if self.topology == "mesh" else 0
        workload = self.workload_as_run
        events = max((e.end_s for e in workload.events), default=0)  # then up to RECOVERY_WAIT_S more
        busy = self.kind.estimate_s(workload, rate)
        return max(busy, events + RECOVERY_WAIT_S if workload.events else 0) + mesh

    def estimate_s(self, in_vm: bool = False, most: bool = False, repetitions: int | None = None) -> float:
        """Here or in the VM. With an adaptive rule, the minimum (the interval may be tight after
        `min` repetitions) unless `most`; `repetitions`: that many (what a resumed run has left)."""
        if repetitions is None:
            repetitions = self.repetitions.max if most else self.repetitions.min
        overhead = VM_REPETITION_OVERHEAD_S if in_vm else REPETITION_OVERHEAD_S
        if self.link.background:
            overhead += background.VM_SETUP_S if in_vm else background.SETUP_S
        return (overhead + self.repetition_s(in_vm)) * repetitions


@dataclass
class Plan:
    study: Study
    scenarios: list[Scenario]

    def estimate_s(self, in_vm: set[str] = frozenset(), most: bool = False) -> float:
        """The whole plan, with the scenarios whose ids are `in_vm` in the VM (one boot for all);
        with an adaptive rule, at its minimum repetitions unless `most`."""
        boot = VM_BOOT_S if any(s.id in in_vm for s in self.scenarios) else 0
        return boot + sum(s.estimate_s(s.id in in_vm, most) for s in self.scenarios)

    def drop(self, indices) -> None:
        """Leave out these scenarios (by index) and number the rest again."""
        self.scenarios = [s for s in self.scenarios if s.index not in indices]
        for i, scenario in enumerate(self.scenarios):
            scenario.index = i


def measured_pace(completions, scenarios, in_vm: set[str]) -> tuple[int, float] | None:
    """(repetitions timed, their wall-clock time / their estimate) from a resumed study's stored
    (run, scenario, completed_at), each repetition timed from the one completed before it in the same
    sitting: a sitting's first (it paid for the start, a VM's boot) and gaps over PACE_PAUSE times the
    estimate (a pause) are left out. None: fewer than PACE_MIN_REPETITIONS to tell by."""
    estimate = {s.id: s.estimate_s(s.id in in_vm, repetitions=1) for s in scenarios}
    timed, spent, expected, previous = 0, 0.0, 0.0, None
    for run_id, scenario_id, completed_at in completions:
        at = datetime.fromisoformat(completed_at).timestamp()
        if previous and previous[0] == run_id and scenario_id in estimate:
            gap = at - previous[1]
            if gap < PACE_PAUSE * estimate[scenario_id]:
                timed, spent, expected = timed + 1, spent + gap, expected + estimate[scenario_id]
        previous = (run_id, at)
    return (timed, spent / expected) if timed >= PACE_MIN_REPETITIONS else None


def duration(seconds: float) -> str:
    """An estimate as people say it: '45 s', '12 min 05 s', '3 h 04 min'."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def make_plan(study: Study) -> Plan:
    """The cartesian product vpns x links x workloads, as listed (the runner orders each round); on
    several pairs of real hosts, all of it on each pair, whose path is a link of its own (its label
    names the pair, so each VPN is judged against no VPN on the same hosts)."""
    scenarios = []
    pairs = study.hosts or [None]
    for pair in pairs:
        for vpn in study.vpns:
            for link in study.links:
                if len(pairs) > 1:
                    link = link.model_copy(update={"name": f"{link.label} ({', '.join(pair.values())})"})
                for workload in study.workloads:
                    scenarios.append(Scenario(0, study.topology, vpn, link, workload, study.repetitions, hosts=pair,
                                              pin=study.pin_tunnel_ends, peers=study.peers,
                                              idle_window_s=study.idle_window_s))
    for i, scenario in enumerate(scenarios):
        scenario.index = i
    return Plan(study, scenarios)


def round_order(study: Study, scenarios: list[Scenario], round_no: int) -> list[Scenario]:
    """The order of one round: as listed, or shuffled by a generator seeded with the study's seed
    and the round's number, so a rerun or a resumed run repeats it."""
    order = sorted(scenarios, key=lambda s: s.index)
    if study.order == "shuffled":
        random.Random(f"{study.seed}:{round_no}").shuffle(order)
    return order
