"""One results directory read once and analysed once, for everything that shows it: `report`,
`show`, `stats`, `export` and the verdict table take an Analysed and pass it along.

Its store is read once (store.Stored: every table in one query, the raw output of the tools the
analysis reads); each part of the analysis is computed the first time a command asks for it and
kept: the summaries, the study's family of comparisons, the verdicts on a seed's findings, and what
each workload kind shows of its scenarios (its interval series, its notes), which comes from the kind.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import findings, methods
from .algorithms import TOOL as ALGORITHMS_TOOL
from .analysis import Summary, summarise
from ..catalog import KINDS
from .compare import Comparison, comparison_family, cost_family
from ..plan.analysis_settings import AnalysisSettings
from ..plan.stored import StoredStudy
from ..store.results_dir import read_store
from ..store import Stored

# the raw output the analysis reads: each kind's (its series and notes), the negotiated algorithms,
# how CPU was counted, each mesh pair's own values
RAW_TOOLS = {kind.series_tool for kind in KINDS.values() if kind.series_tool} | {ALGORITHMS_TOOL, "cpu", "pairs"}


@dataclass
class Analysed:
    """A results directory's analysis: `stored`, its store as read once, and each part of the analysis
    made from it the first time it is asked for."""

    stored: Stored

    @classmethod
    def of(cls, store) -> "Analysed":
        """The analysis of an open store (read here, once)."""
        return cls(Stored(store, RAW_TOOLS))

    @property
    def runs(self) -> list:
        return self.stored.runs()

    @property
    def scenarios(self) -> list:
        return self.stored.scenarios()

    @property
    def study(self) -> StoredStudy:
        """The study as the last sitting ran it."""
        return self.stored.study()

    @property
    def settings(self) -> AnalysisSettings:
        return self.study.analysis

    @cached_property
    def summaries(self) -> dict[str, list[Summary]]:
        """Scenario id -> one Summary per metric (analysis.summarise)."""
        return summarise(self.stored, self.settings)

    @cached_property
    def stat(self) -> dict[tuple[str, str], Summary]:
        """(scenario id, metric) -> its Summary."""
        return {(sid, s.metric): s for sid, ss in self.summaries.items() for s in ss}

    @cached_property
    def family(self) -> list[Comparison]:
        """Every comparison the study defines, tested, corrected together and decided (compare.py)."""
        return comparison_family(self.stored)

    @cached_property
    def cost_family(self) -> list[Comparison]:
        """The same pairs on CPU per GB where the VPN ran at its capacity, corrected apart (compare.py)."""
        return cost_family(self.stored)

    @cached_property
    def against(self) -> findings.Section | None:
        """The verdicts on the study's findings, as this vpnlab encodes a seed's (findings.py)."""
        return findings.against_the_original(self.stored)

    @cached_property
    def cpu_text(self) -> str:
        """How each tunnel end's CPU was counted, for the methods paragraph."""
        return methods.cpu_text(self.stored)

    @cached_property
    def pairing_text(self) -> str:
        """How the rounds held the scenarios and how far apart paired samples lay, for the methods paragraph."""
        return methods.pairing_text(self.stored.samples())

    @cached_property
    def series(self) -> dict[str, list[list[tuple[float, float]]]]:
        """Scenario id -> per valid repetition, its kind's interval-by-interval series."""
        valid = {(row.scenario_id, row.repetition) for row in self.stored.samples()}  # no failed repetition or scenario
        out: dict[str, list] = defaultdict(list)
        for scenario, kind, raw in self._raw_by_kind():
            for row in raw:
                if (scenario.id, row["repetition"]) in valid:
                    out[scenario.id].append(kind.series(row["output"]))
        return dict(out)

    @cached_property
    def kind_notes(self) -> list[tuple[str, list[str]]]:
        """Each note a kind makes of its scenarios' raw output, with what it found in each (by label)."""
        groups: dict[str, list[str]] = defaultdict(list)
        for scenario, kind, raw in sorted(self._raw_by_kind(), key=lambda found: found[0].label):
            for note, found in kind.notes(kind.Options(**scenario.params), [row["output"] for row in raw]):
                groups[note].append(f"{scenario.label}: {found}")
        return list(groups.items())

    def _raw_by_kind(self):
        """(scenario, its kind, the raw output of the kind's tool in every repetition), for each scenario
        whose kind keeps one."""
        raw: dict[str, list] = defaultdict(list)
        for tool in {kind.series_tool for kind in KINDS.values() if kind.series_tool}:
            for row in self.stored.raw_outputs(tool):
                raw[row["scenario_id"]].append(row)
        return [(s, KINDS[s.workload], raw[s.id]) for s in self.scenarios
                if s.workload in KINDS and KINDS[s.workload].series_tool and raw[s.id]]


def analyse(directory: Path) -> Analysed:
    """The analysis of a results directory, its store read once (read-only: results_dir.read_store)."""
    store = read_store(Path(directory))
    try:
        return Analysed.of(store)
    finally:
        store.close()
