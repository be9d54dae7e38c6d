"""The values each statistic sees of a store: its valid samples, with or without the flagged ones, as
the study's `analysis:` block (plan/analysis_settings.py) fixed before the run."""

from __future__ import annotations

from collections import defaultdict

from ..core.flags import any_of
from ..plan.analysis_settings import AnalysisSettings
from .stats import outlier_flags
from ..store import Stored

Paired = list[tuple[int | None, float]]   # (round, value) per repetition


def values_of(store, settings: AnalysisSettings) -> tuple[dict[tuple[str, str], Paired], dict[tuple[str, str], int]]:
    """(scenario, metric) -> (round, value) of its valid samples, and how many of them are flagged
    (far from the rest, or taken while the machine was busy with something else); with
    `flagged_samples: exclude` the flagged ones are left out. Of a store read once (store.Stored),
    made once for each way of counting flagged samples: every statistic reads the same."""
    if isinstance(store, Stored):
        return store.derived(("values_of", settings.flagged_samples), lambda: _values(store.samples(), settings))
    return _values(store.samples(), settings)


def _values(samples: list, settings: AnalysisSettings) -> tuple[dict[tuple[str, str], Paired], dict[tuple[str, str], int]]:
    values: dict[tuple[str, str], Paired] = defaultdict(list)
    busy: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for row in samples:
        values[(row.scenario_id, row.metric)].append((row.round, row.value))
        busy[(row.scenario_id, row.metric)].append(any_of(row.flags, "disturbed"))
    flagged: dict[tuple[str, str], int] = {}
    for key, pairs in values.items():
        far = outlier_flags([v for _, v in pairs])
        marks = [a or b for a, b in zip(far, busy[key])]
        flagged[key] = sum(marks)
        if not settings.counts_flagged and flagged[key]:
            values[key] = [pair for pair, mark in zip(pairs, marks) if not mark]
    return dict(values), flagged  # (a plain dict: a key looked up and missing is no new entry of what is kept)
