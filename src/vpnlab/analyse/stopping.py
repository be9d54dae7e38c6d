"""The stopping rule's statistics, as the analysis reads a stored scenario: Stein's final interval of
an adaptive scenario, whether it met its target, and the scenario's stored notes without Stein's
(said afresh from the intervals as computed now). run/stopping.py applies the rule while a run
measures; the rule a stored study ran by is its StoredStudy's (plan/stored.py)."""

from __future__ import annotations

import math
import re

from .stats import Interval, guarded_stein_interval, stein_total_n
from ..plan.study import RepetitionRule


def final_interval(values: list[float], rule: RepetitionRule, pilot: list[float] | None = None) -> Interval | None:
    """Stein's final interval of an adaptive scenario's primary metric (values in repetition order):
    the geometric mean of all values, the pilot's spread and df (the first `min` values, unless the
    pilot the rule ran on is given: flagged values left out do not make a new one), widened where the
    t interval of all of them reaches further (stats.guarded_stein_interval); None without a positive pilot."""
    pilot = values[:rule.min] if pilot is None else pilot
    if not rule.adaptive or len(pilot) < max(rule.min, 2) or min(values + pilot) <= 0:
        return None
    plan = stein_total_n(pilot, rule.ci_target_pct / 100)
    return guarded_stein_interval(values, plan.pilot_sd_log, plan.pilot_df)


STEIN_NOTE = "adaptive repetitions by Stein's two-stage rule on the log scale"  # (one note: no '; ' in it)
# Stein's note as stored when the scenario settled (before 2026-11-26 split in three at '; '): the report,
# `show` and the export say it afresh from the intervals as computed now (target_met), not from it.
STEIN_PARTS = re.compile(rf"^({re.escape(STEIN_NOTE)}|\d+ ran \(whole rounds|final interval )")


def lasting_notes(notes: str) -> list[str]:
    """A scenario's stored notes, Stein's left out."""
    return [note for note in notes.split("; ") if note and not STEIN_PARTS.match(note)]


def target_met(final, rule: RepetitionRule | None) -> bool | None:
    """Whether an adaptive scenario's final interval (a Summary of its primary metric, as computed now)
    is within the rule's target; None without an adaptive rule or a summary."""
    if rule is None or not rule.adaptive or final is None:
        return None
    return not math.isnan(final.ci_high) and final.ci_high <= final.centre * (1 + rule.ci_target_pct / 100)
