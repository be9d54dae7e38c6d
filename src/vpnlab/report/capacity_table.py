"""A capacity study's results in Markdown (docs/capacity.md quotes the committed run of capacity-2026
with them, and a test checks the page against the store): a table of each configuration's TCP goodput
with one stream and with four, its UDP capacity and its CPU per GB, each the geometric mean of its
repetitions with the 95% interval, as the report computes them; a table of each current build against
the release Debian ships, from the study's comparisons (paired by round, Holm-corrected); and what
`vpnlab run` says at its end: which is fastest and which cheapest, as far as the tests say.
  python -m vpnlab.report.capacity_table DIR      the three parts, of the results directory DIR
  python -m vpnlab.report.capacity_table DIR --builds TEXT    the builds table's rows whose label holds TEXT"""

from __future__ import annotations

import sys
from pathlib import Path

from ..analyse.analysed import Analysed, analyse
from ..analyse.analysis import centre_text
from ..analyse.compare import Comparison, p_text, ratio_text
from ..analyse.recommend import at_capacity

CURRENT = "-current"  # a current build's implementation: Debian's name with this after it

# (the column's heading, the workload's kind, whether it runs several streams, the metric)
COLUMNS = (("TCP, 1 stream (Mbit/s)", "tcp", False, "throughput_mbps"),
           ("TCP, 4 streams (Mbit/s)", "tcp", True, "throughput_mbps"),
           ("UDP at most 1% lost (Mbit/s)", "udp_capacity", False, "udp_capacity_mbps"),
           ("CPU per GB, TCP 1 stream (s)", "tcp", False, "cpu_s_per_gb"))


def _cell(analysed: Analysed, scenario, metric: str) -> str:
    if scenario.status == "failed":
        return "failed"
    summary = analysed.stat.get((scenario.id, metric))
    return "-" if summary is None else centre_text(summary)


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


def _against_debian(c: Comparison) -> tuple[str, str, float, float, float] | None:
    """A comparison of a current build with Debian's release of the same configuration: (Debian's label,
    the current one's, the current build against Debian's as a relative difference with its interval);
    None for any other comparison."""
    if CURRENT in c.b and c.b.replace(CURRENT, "", 1) == c.a:
        return c.a, c.b, c.relative_diff_pct, c.rel_ci_low, c.rel_ci_high
    if CURRENT in c.a and c.a.replace(CURRENT, "", 1) == c.b:  # B against A turned round: A/B = 1 / (B/A)
        def turned(pct: float) -> float:
            return 100 * (100 / (100 + pct) - 1)
        return c.b, c.a, turned(c.relative_diff_pct), turned(c.rel_ci_high), turned(c.rel_ci_low)
    return None


def builds_markdown(analysed: Analysed, only: str = "") -> str:
    """One row per current build against Debian's release and workload, on the links without a rate
    (`only`: the configurations whose label holds it, "on 1 core" for the README's)."""
    lines = ["| Debian's | current build | workload | current against Debian's [95% CI] | Holm p | verdict |",
             "|---|---|---|---|---|---|"]
    unshaped = {s.link_label for s in analysed.scenarios if s.link_rate_mbit is None}
    for c in analysed.family:
        if c.link in unshaped and (pair := _against_debian(c)) and only in pair[0]:
            debian, current, pct, low, high = pair
            verdict = {"ahead": "behind", "behind": "ahead"}.get(c.verdict, c.verdict) if current == c.a else c.verdict
            lines.append(f"| {debian} | {current} | {c.workload} | {ratio_text(pct, low, high)} | {p_text(c.holm_p)} "
                         f"| {verdict or '-'} |")
    return "\n".join(lines)


def page_parts(analysed: Analysed) -> str:
    """What docs/capacity.md quotes of a run, in its order."""
    return "\n\n".join([markdown(analysed), builds_markdown(analysed),
                        "\n".join(f"- {sentence}" for sentence in at_capacity(analysed))])


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4) or len(sys.argv) == 4 and sys.argv[2] != "--builds":
        print("  " + __doc__.split("\n  ", 1)[1], file=sys.stderr)
        raise SystemExit(2)
    found = analyse(Path(sys.argv[1]))
    print(builds_markdown(found, only=sys.argv[3]) if len(sys.argv) == 4 else page_parts(found))
