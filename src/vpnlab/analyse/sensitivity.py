"""The results with flagged samples counted and left out, side by side.

The study fixes one way before its run (`analysis: flagged_samples`, judging.py) and every
statistic follows it; the report shows the other way beside it, so a reader sees what the flagged
samples (far from the rest, or taken while another vpnlab run shared the machine) change.
"""

from __future__ import annotations

from .. import catalog
from .analysis import Summary, summarise, summary_text
from .judging import values_of
from ..store import Store

HEADINGS = ["scenario", "metric", "flagged", "with them counted", "with them left out"]


def both_ways(store: Store, summaries: dict[str, list[Summary]]) -> tuple[str, list[list[str]]]:
    """How the study counted flagged samples, and one row per scenario and judged metric with
    flagged samples: its summary with them counted and with them left out (no rows: none flagged)."""
    settings = store.study().analysis
    chosen = "counted" if settings.counts_flagged else "left out"
    flagged = {key: n for key, n in values_of(store, settings)[1].items() if n and catalog.metric(key[1]).judged}
    if not flagged:
        return chosen, []
    other = summarise(store, settings.other_way())
    counted, left_out = (summaries, other) if settings.counts_flagged else (other, summaries)
    labels = {row.id: row.label for row in store.scenarios()}

    def find(by_scenario: dict, sid: str, metric: str) -> Summary | None:
        return next((s for s in by_scenario.get(sid, []) if s.metric == metric), None)

    return chosen, [[labels[sid], metric, str(n), summary_text(find(counted, sid, metric)), summary_text(find(left_out, sid, metric))]
                    for (sid, metric), n in sorted(flagged.items(), key=lambda kv: (labels[kv[0][0]], kv[0][1]))]
