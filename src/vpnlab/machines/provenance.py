"""Which machines a run's results came from: this one (namespaces, a VM) or real hosts, each with
its CPU, kernel and NIC as the run recorded them (runs.hosts), which hosts each scenario's results
came from (scenarios.hosts), and the code each sitting ran. The report and `vpnlab show` say it in
these words."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

VM_NOTE = "measured in a VM"
TCG_NOTE = "software emulation (TCG): slow, its CPU-bound rates are lower bounds and delays upper bounds"
_OLD_TCG_NOTE = "software emulation (TCG): slow, CPU-bound figures are lower bounds"  # stored before 1481e45


def current_wording(notes: str) -> str:
    """A scenario's stored notes ("; " between them) with an older vpnlab's wording of a fact replaced
    by today's and each note once, so that sittings of one study before and after a change say it once."""
    return "; ".join(dict.fromkeys(notes.replace(_OLD_TCG_NOTE, TCG_NOTE).split("; ")))


def sitting_versions(runs) -> str:
    """The code each sitting ran: one version, or each with the sittings (1-based, in turn) that ran it."""
    spans: list[list] = []  # [version, first sitting, last sitting]
    for number, run in enumerate(runs, start=1):
        if spans and spans[-1][0] == run["vpnlab_version"]:
            spans[-1][2] = number
        else:
            spans.append([run["vpnlab_version"], number, number])
    if len(spans) == 1:
        return spans[0][0]
    return ", ".join(f"{v} (sitting{f' {a}' if a == b else f's {a}-{b}'})" for v, a, b in spans)


def machine_lines(runs, scenarios) -> list[str]:
    """One line per machine measured on, then, on real hosts, which hosts each result came from."""
    machines: dict[str, dict] = {}
    for run in runs:
        machines.update(json.loads(dict(run).get("hosts") or "{}"))
    lines = [_machine(name, facts) for name, facts in machines.items()] + _vm_lines(scenarios)
    groups = defaultdict(list)
    for s in scenarios:
        if s.host_roles:
            groups[tuple(s.host_roles.items())].append(s)
    for roles, members in groups.items():
        where = ", ".join(f"{role} {host}" for role, host in roles)
        if len(groups) == 1:
            lines.append(f"every result came from {where}")
        else:
            lines.append(f"from {where}: " + "; ".join(f"{s.vpn_label} | {s.link_label} | {s.workload_label}"
                                                     for s in members))
    return lines


def _machine(name: str, facts: dict) -> str:
    role = f" ({facts['role']})" if facts.get("role") else ""
    if not role and not facts.get("address"):
        name = f"host {name}"  # the machine the run ran on (its name may read like "vm")
    nic = facts.get("nic") or {}
    speed = f", {nic['speed_mbit']} Mbit/s" if (nic.get("speed_mbit") or -1) > 0 else ""
    toward = f" toward {nic['toward']}" if nic.get("toward") else ""
    address = f" at {facts['address']}" if facts.get("address") else ""
    return (f"{name}{role}{address}: {facts.get('cpus', '?')} CPUs ({facts.get('cpu_model') or 'unknown model'}), "
            f"kernel {facts.get('kernel', '?')}, NIC {nic.get('interface', '?')} ({nic.get('driver', '?')}{speed})"
            f"{toward}")


def _vm_lines(scenarios) -> list[str]:
    """How many scenarios vpnlab's VM measured (its vCPUs on the machine's cores), and how: the
    accelerator and guest kernel each sitting noted."""
    in_vm = [s for s in scenarios if s.measured_in == "vm"]
    if not in_vm:
        return []
    ways = Counter(note for s in in_vm for note in set(_vm_notes(s.notes)))
    unsaid = Counter("not measured yet" if s.status == "pending" else "how not recorded (a sitting was interrupted "
                     "before the guest said)" for s in in_vm if not _vm_notes(s.notes))
    return ([f"{len(in_vm)} of {len(scenarios)} scenarios in vpnlab's VM on that machine, its vCPUs on the same cores"]
            + [f"{'all' if n == len(in_vm) else n} of them {note}" for note, n in ways.most_common()]
            + [f"{n} of them {why}" for why, n in unsaid.most_common()])


def _vm_notes(notes: str) -> list[str]:
    pattern = re.escape(VM_NOTE) + r" \((?:[^()]|\([^()]*\))*\)"
    return [m.group(0) for m in re.finditer(pattern, current_wording(notes))]


def measured_where(run, scenarios) -> str:
    """One phrase for the results' place: this machine, its VM (how), or both."""
    host = f"host {run['hostname']} (kernel {run['kernel']})" if run else "this machine"
    in_vm = [s for s in scenarios if s.measured_in == "vm"]
    if not in_vm:
        return f"on {host}"
    how = "; ".join(sorted({note.removeprefix(VM_NOTE).strip(" ()") for s in in_vm for note in _vm_notes(s.notes)}))
    vm = f"in vpnlab's VM ({how})" if how else "in vpnlab's VM"
    if len(in_vm) == len(scenarios):
        return f"{vm} on {host}"
    return f"on {host}, {len(in_vm)} of {len(scenarios)} scenarios {vm}"
