"""A capacity study's results as one Markdown table (docs/capacity.md quotes the committed run of
capacity-2026 with it, and a test checks the page against the store): each configuration's TCP goodput
with one stream and with four, its UDP capacity and its CPU per GB, each the geometric mean of its
repetitions with the 95% interval, as the report computes them.
  python -m vpnlab.report.capacity_table DIR      the table of the results directory DIR"""

from __future__ import annotations

import sys
from pathlib import Path

from ..analyse.analysed import Analysed, analyse
from ..analyse.analysis import fmt

# (the column's heading, the workload's kind, whether it runs several streams, the metric)
COLUMNS = (("TCP, 1 stream (Mbit/s)", "tcp", False, "throughput_mbps"),
           ("TCP, 4 streams (Mbit/s)", "tcp", True, "throughput_mbps"),
           ("UDP at most 1% lost (Mbit/s)", "udp_capacity", False, "udp_capacity_mbps"),
           ("CPU per GB, TCP 1 stream (s)", "tcp", False, "cpu_s_per_gb"))


def _cell(analysed: Analysed, scenario, metric: str) -> str:
    if scenario.status == "failed":
        return "failed"
    summary = analysed.stat.get((scenario.id, metric))
    if summary is None:
        return "-"
    interval = f" [{fmt(summary.ci_low)}, {fmt(summary.ci_high)}]" if summary.ci_low == summary.ci_low else ""
    return f"{fmt(summary.centre)}{interval}"


def markdown(analysed: Analysed) -> str:
    """One row per VPN configuration (its cores in its label), one column per COLUMNS entry, on the links
    without a rate (where the VPN is the bottleneck)."""
    rows: dict[str, list[str]] = {}
    for sc in (s for s in analysed.scenarios if s.link_rate_mbit is None):
        row = rows.setdefault(sc.vpn_label, ["-"] * len(COLUMNS))
        streams = sc.params.get("streams", 1) > 1
        for n, (_, kind, several, metric) in enumerate(COLUMNS):
            if sc.workload == kind and streams == several:
                row[n] = _cell(analysed, sc, metric)
    lines = ["| configuration | " + " | ".join(heading for heading, *_ in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.rsplit("\n", 1)[1], file=sys.stderr)
        raise SystemExit(2)
    print(markdown(analyse(Path(sys.argv[1]))))
