"""The report's "In the field" table (issue 47): each VPN (a row) under each field condition (a column:
link and workload), in one word, from the means of the metrics that condition measured:

- a path-mtu workload: `works` when bulk TCP completed, `black hole` when it stalled (bulk_stalled), else
  `fails`;
- a reach workload: `works` when the far side reached the client (far_reachable), else `unreachable`;
- a workload with events: `does not recover` when traffic did not come back by itself after them
  (recovered), `degrades` when it did but the workload itself broke (workload_survived) or took more than
  DEGRADED_S to flow again, else `works`.

A mean between 0 and 1 (repetitions that disagree) counts against the VPN: the word is what happened at
least once; `failed` where no repetition was measured (the tunnel did not come up, say, as the report's
failures list shows). Conditions no scenario measured, and scenarios of other workloads, are left out.
The README quotes a committed field study with the Markdown form (a test checks it against the store):
  python -m vpnlab.report.field_table DIR      the table of the results directory DIR
  python -m vpnlab.report.field_table DIR --only TEXT    its rows whose condition holds TEXT
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..analyse.analysed import Analysed, analyse
from ..analyse.analysis import centre_text
from ..catalog import unit

# The figures under the report's table: what each word rests on, each with its interval.
FIGURE_METRICS = ("path_mtu_bytes", "wan_fragments", "bulk_goodput_mbps", "bulk_longest_gap_s", "far_reach_s",
                  "outage_recovery_s", "outage_lost_probes", "address_change_recovery_s", "address_change_lost_probes",
                  "nat_rebind_recovery_s", "nat_rebind_lost_probes", "rekey_recovery_s", "rekey_lost_probes",
                  "rekey_gap_s")
DEGRADED_S = 1.0  # longer than this without traffic after an event is more than a blip
RECOVERY = ("outage_recovery_s", "address_change_recovery_s", "nat_rebind_recovery_s", "rekey_recovery_s")
# The figures a Markdown cell gives after its word, each the mean over the repetitions that measured it:
# a size to the byte the search finds, a time to the recovery probes' 0.02 s pace.
FIGURES = (("path_mtu_bytes", "{:.0f} B"), ("outage_recovery_s", "outage {:.2f} s"),
           ("address_change_recovery_s", "address change {:.2f} s"), ("nat_rebind_recovery_s", "NAT rebind {:.2f} s"),
           ("rekey_recovery_s", "rekey {:.2f} s"))


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


def judged(scenarios: list, stat: dict) -> list[tuple]:
    """(scenario, its metrics' means, its word) for each scenario of a field condition, in the plan's order.
    A failed scenario's word is `failed` when another scenario of its workload has a word (a field
    workload: any other failure belongs to the report's failures list alone)."""
    rows = []
    for s in sorted(scenarios, key=lambda s: s.idx):
        means = {metric: summary.mean for (sid, metric), summary in stat.items() if sid == s.id}
        rows.append((s, means, verdict(means)))
    field = {s.workload_label for s, _, word in rows if word}
    return [(s, means, "failed" if s.status == "failed" else word) for s, means, word in rows
            if s.workload_label in field and (word or s.status == "failed")]


def field_table(scenarios: list, stat: dict) -> tuple[list[str], list[dict]]:
    """The conditions (columns: "link workload") and a row per VPN, each cell a verdict or "-"."""
    cells: dict[tuple[str, str], str] = {}
    columns: list[str] = []
    vpns: list[str] = []
    for s, _, word in judged(scenarios, stat):
        column = f"{s.link_label} {s.workload_label}"
        columns += [column] if column not in columns else []
        vpns += [s.vpn_label] if s.vpn_label not in vpns else []
        cells[(s.vpn_label, column)] = word
    return columns, [{"vpn": vpn, "cells": [cells.get((vpn, c), "-") for c in columns]} for vpn in vpns]


def field_figures(scenarios: list, stat: dict) -> tuple[list[str], list[dict]]:
    """What the table's words rest on, for the report to show under it: the FIGURE_METRICS the field
    scenarios measured (the columns, with their units) and a row per measured scenario, grouped by
    condition, each figure its centre with its 95% interval ("-": not measured by that workload)."""
    rows = [(s, word) for s, _, word in judged(scenarios, stat) if word != "failed"]
    columns = [m for m in FIGURE_METRICS if any((s.id, m) in stat for s, _ in rows)]
    conditions = list(dict.fromkeys(f"{s.link_label} {s.workload_label}" for s, _ in rows))
    rows.sort(key=lambda row: conditions.index(f"{row[0].link_label} {row[0].workload_label}"))
    return ([f"{m} ({unit(m)})" for m in columns],
            [{"condition": f"{s.link_label} {s.workload_label}", "vpn": s.vpn_label, "word": word,
              "n": max((stat[(s.id, m)].n for m in columns if (s.id, m) in stat), default=0),
              "cells": [centre_text(stat[(s.id, m)]) if (s.id, m) in stat else "-" for m in columns]}
             for s, word in rows])


def _figures(means: dict[str, float]) -> str:
    shown = [form.format(means[name]) for name, form in FIGURES if name in means]
    if "bulk_completed" in means and means.get("wan_fragments", 0) > 0:  # it works, by fragmenting its packets
        shown.append(f"{means['wan_fragments']:.0f} WAN fragments")
    shown += ["the transfer broke"] if means.get("workload_survived", 1) < 1 else []
    return f" ({', '.join(shown)})" if shown else ""


def _why_failed(failure: str | None, limit: int = 100) -> str:
    """The last repetition's reason, its first line, cut short for a cell (`vpnlab show` has it whole)."""
    reason = (failure or "no reason recorded").split("the last: ", 1)[-1].splitlines()[0].strip()
    return (reason if len(reason) <= limit else reason[:limit].rstrip() + "...").replace("|", "/")


def markdown(analysed: Analysed, only: str = "") -> str:
    """The field table turned round for a page: a row per condition (link and workload) whose label holds
    `only`, a column per VPN, each cell its word and figures (the largest inner packet that crossed; the
    time traffic took to flow again after each kind of event)."""
    cells: dict[tuple[str, str], str] = {}
    conditions: list[str] = []
    vpns: list[str] = []
    for s, means, word in judged(analysed.scenarios, analysed.stat):
        condition = f"{s.link_label}, {s.workload_label}"
        if only not in condition:
            continue
        conditions += [condition] if condition not in conditions else []
        vpns += [s.vpn_label] if s.vpn_label not in vpns else []
        cells[(condition, s.vpn_label)] = f"failed ({_why_failed(s.failure)})" if word == "failed" else word + _figures(means)
    lines = ["| condition | " + " | ".join(vpns) + " |", "|---|" + "---|" * len(vpns)]
    lines += [f"| {c} | " + " | ".join(cells.get((c, vpn), "-") for vpn in vpns) + " |" for c in conditions]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4) or len(sys.argv) == 4 and sys.argv[2] != "--only":
        print("  " + __doc__.split("\n  ", 1)[1], file=sys.stderr)
        raise SystemExit(2)
    print(markdown(analyse(Path(sys.argv[1])), only=sys.argv[3] if len(sys.argv) == 4 else ""))
