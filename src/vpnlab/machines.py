"""Which machines a run's results came from: this one (namespaces, a VM) or real hosts, each with
its CPU, kernel and NIC as the run recorded them (runs.hosts), and which hosts each scenario's
results came from (scenarios.hosts). The report and `vpnlab show` say it in these words."""

from __future__ import annotations

import json
from collections import defaultdict


def machine_lines(runs, scenarios) -> list[str]:
    """One line per machine measured on, then, on real hosts, which hosts each result came from."""
    machines: dict[str, dict] = {}
    for run in runs:
        machines.update(json.loads(dict(run).get("hosts") or "{}"))
    lines = [_machine(name, facts) for name, facts in machines.items()]
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
    nic = facts.get("nic") or {}
    speed = f", {nic['speed_mbit']} Mbit/s" if (nic.get("speed_mbit") or -1) > 0 else ""
    toward = f" toward {nic['toward']}" if nic.get("toward") else ""
    address = f" at {facts['address']}" if facts.get("address") else ""
    return (f"{name}{role}{address}: {facts.get('cpus', '?')} x {facts.get('cpu_model') or 'unknown CPU'}, "
            f"kernel {facts.get('kernel', '?')}, NIC {nic.get('interface', '?')} ({nic.get('driver', '?')}{speed})"
            f"{toward}")
