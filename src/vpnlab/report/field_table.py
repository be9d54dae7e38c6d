"""The report's "In the field" table (issue 47): each VPN (a row) under each field condition (a column:
link and workload), in one word, from the means of the metrics that condition measured:

- a path-mtu workload: `works` when bulk TCP completed, `black hole` when it stalled (bulk_stalled), else
  `fails`;
- a reach workload: `works` when the far side reached the client (far_reachable), else `unreachable`;
- a workload with events: `does not recover` when traffic did not come back by itself after them
  (recovered), `degrades` when it did but the workload itself broke (workload_survived) or took more than
  DEGRADED_S to flow again, else `works`.

A mean between 0 and 1 (repetitions that disagree) counts against the VPN: the word is what happened at
least once. Conditions no scenario measured, and scenarios of other workloads, are left out.
"""

from __future__ import annotations

DEGRADED_S = 1.0  # longer than this without traffic after an event is more than a blip
RECOVERY = ("outage_recovery_s", "address_change_recovery_s", "nat_rebind_recovery_s", "rekey_recovery_s")


def verdict(means: dict[str, float]) -> str | None:
    """One word for what a VPN did under a condition, from its metrics' means; None: not a field condition."""
    if "recovered" in means:
        if means["recovered"] < 1:
            return "does not recover"
        slow = any(means.get(name, 0) > DEGRADED_S for name in RECOVERY)
        return "degrades" if slow or means.get("workload_survived", 1) < 1 else "works"
    if "far_reachable" in means:
        return "works" if means["far_reachable"] == 1 else "unreachable"
    if "bulk_completed" in means:
        if means.get("bulk_stalled", 0) > 0:
            return "black hole"
        return "works" if means["bulk_completed"] == 1 else "fails"
    return None


def field_table(scenarios: list, stat: dict) -> tuple[list[str], list[dict]]:
    """The conditions (columns: "link workload") and a row per VPN, each cell a verdict or "-"."""
    cells: dict[tuple[str, str], str] = {}
    columns: list[str] = []
    vpns: list[str] = []
    for s in sorted(scenarios, key=lambda s: s.idx):
        means = {metric: summary.mean for (sid, metric), summary in stat.items() if sid == s.id}
        word = verdict(means)
        if word is None:
            continue
        column = f"{s.link_label} {s.workload_label}"
        columns += [column] if column not in columns else []
        vpns += [s.vpn_label] if s.vpn_label not in vpns else []
        cells[(s.vpn_label, column)] = word
    return columns, [{"vpn": vpn, "cells": [cells.get((vpn, c), "-") for c in columns]} for vpn in vpns]
