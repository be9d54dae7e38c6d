"""How the numbers were obtained, in one paragraph the report and `vpnlab show` print the way a
methods section would: design, order, intervals, grades, tests, correction, stopping rule, outliers."""

from __future__ import annotations

import yaml

from .compare import ALPHA
from .judging import settings_of
from .stats.grades import MIN_N
from .stats.outliers import K as OUTLIER_K
from .stats.outliers import MIN_N as OUTLIER_MIN_N


def study_order(study_text: str) -> str:
    """The order of each round the stored study asked for ("shuffled" unless it says "listed")."""
    try:
        study = yaml.safe_load(study_text)
    except yaml.YAMLError:
        return "shuffled"
    return study.get("order", "shuffled") if isinstance(study, dict) else "shuffled"


def paragraph(study_text: str, rules: list[str]) -> str:
    """The methods paragraph of the stored study; rules: the stopping rules that ran, as stored with
    the scenarios."""
    order, settings = study_order(study_text), settings_of(study_text)
    threshold = settings.threshold_pct
    design = ("in an order randomised per round (seeded and recorded)" if order != "listed" else
              "in the order the study lists (`order: listed`: drift over time can then favour a position)")
    return (
        "Design: repetitions run in rounds; each round runs every configuration once, " + design + ", and "
        "each repetition brings its tunnel up afresh with a warm-up that is not stored; failed repetitions "
        "and scenarios are kept in the store but left out of every statistic. "
        "Intervals (95%): a t interval on the log scale for positive quantities (it estimates the geometric "
        "mean and never goes below zero), of the arithmetic mean clipped at zero otherwise, and for loss "
        "Korn and Graubard's Clopper-Pearson interval with the repetition as the unit (loss comes in bursts). "
        "Against no VPN, measured in the same place: throughput as the ratio of geometric means with the "
        "paired t interval by round, latency and jitter as the ms the VPN adds (paired difference), loss in "
        f"percentage points; Jaha's grades need n >= {MIN_N} on both sides and, for latency, a baseline of at "
        f"least {settings.latency_floor_ms:g} ms, and show a range where the interval spans bands. "
        "Tests: each comparison's primary test is the paired t test on log(B/A) by round (Welch's t on logs "
        "when the two were not measured in the same rounds), Holm-corrected over every comparison of VPN "
        "configurations the study defines; one-sided t and rank tests are secondary and uncorrected. "
        f"A configuration is called ahead only when its corrected p < {ALPHA:g} and the difference exceeds "
        f"{threshold:g}%, equivalent only when a TOST shows it within {threshold:g}%; otherwise the "
        "rounds a clear answer would need are given (power 80%, from an upper bound of the spread). "
        f"Stopping: {'; '.join(rules) or 'fixed repetitions'}"
        + (" (the primary metric's interval is then Stein's final one, from the pilot's spread and degrees "
           "of freedom, not a stop-when-tight rule)" if any("Stein" in rule for rule in rules) else "") + ". "
        f"Outliers: from n >= {OUTLIER_MIN_N}, samples beyond {OUTLIER_K:g} modified z-scores (median and MAD) are "
        "flagged, as are samples taken while another vpnlab run shared the machine; the study fixed before "
        "the run that they " + ("count (the report also shows the results without them)." if settings.counts_flagged
                               else "are left out (the report also shows the results with them).")
    )
