"""What a study fixes before its run about how its data are judged (its `analysis:` block), and the
values each statistic then sees.

Fixed before the run, stored with it (the study text), never chosen after seeing the data: the
smallest baseline latency graded as a multiple, the practical threshold of "ahead" and
"equivalent", whether flagged samples count, and whether a seed's own grading is shown beside
vpnlab's. A stored study without the block is judged by the defaults.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from .schema import Strict
from ..analyse.stats import outlier_flags
from ..analyse.stats.grades import DEFAULT_FLOOR_MS
from ..store import Stored

Paired = list[tuple[int | None, float]]   # (round, value) per repetition
# A repetition flag that starts so says the machine was busy with something else than the run.
DISTURBED = "disturbed: "


class AnalysisSettings(Strict):
    latency_floor_ms: float = Field(DEFAULT_FLOOR_MS, ge=0, le=10_000, description=(
        "the smallest no-VPN latency graded as a multiple; below it the ms a VPN adds are shown ungraded"))
    threshold_pct: float = Field(2.0, gt=0, le=50, description=(
        "the smallest difference called 'ahead', and the margin of 'equivalent' (TOST), in %"))
    flagged_samples: Literal["count", "exclude"] = Field("count", description=(
        "whether samples far from the rest (median and MAD, from n >= 5) and samples taken while the "
        "machine was busy with something else count in the statistics; the report shows both"))
    seed_grading: Literal["none", "jaha-2014"] = Field("none", description=(
        "also grade as a seed did: jaha-2014 grades every metric as a share or multiple of no VPN's mean "
        "(Table VI), without vpnlab's floor and sample-size rules; shown beside vpnlab's grades, marked"))

    @property
    def threshold(self) -> float:
        return self.threshold_pct / 100

    def other_way(self) -> "AnalysisSettings":
        """The same settings with flagged samples treated the other way: the report shows both."""
        return self.model_copy(update={"flagged_samples": "exclude" if self.counts_flagged else "count"})

    @property
    def counts_flagged(self) -> bool:
        return self.flagged_samples == "count"


def settings_of(study_text: str) -> AnalysisSettings:
    """The settings a stored study fixed; the defaults for a study without the block (validated at
    load, so a stored block is valid unless it was written by another version)."""
    try:
        block = (yaml.safe_load(study_text) or {}).get("analysis") or {}
        return AnalysisSettings.model_validate(block)
    except (yaml.YAMLError, AttributeError, ValidationError):
        return AnalysisSettings()


def stored_settings(store) -> AnalysisSettings:
    runs = store.runs()
    return settings_of(runs[-1]["study_text"] if runs else "")


def shared_machine_flag(others) -> str:
    """The flag of a repetition measured while other vpnlab runs (their ids and PIDs) were going on."""
    return (f"{DISTURBED}another vpnlab run shared this machine ({', '.join(sorted(set(others)))}): its load is "
            "in these CPU and throughput figures")


def disturbed(flags: str) -> bool:
    return any(flag.startswith(DISTURBED) for flag in flags.split(";"))


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
        busy[(row.scenario_id, row.metric)].append(disturbed(row.flags))
    flagged: dict[tuple[str, str], int] = {}
    for key, pairs in values.items():
        far = outlier_flags([v for _, v in pairs])
        marks = [a or b for a, b in zip(far, busy[key])]
        flagged[key] = sum(marks)
        if not settings.counts_flagged and flagged[key]:
            values[key] = [pair for pair, mark in zip(pairs, marks) if not mark]
    return dict(values), flagged  # (a plain dict: a key looked up and missing is no new entry of what is kept)
