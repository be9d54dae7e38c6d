"""The statistical core: pure functions on lists of floats, each documenting its method in a sentence
or two the report can quote. Simulations with known truth check them in tests/test_stats_*.py.

Imports only numpy at load time; scipy.special is imported on first use, scipy.stats only for the
rank tests.
"""

from .adaptive import SteinPlan, guarded_stein_interval, stein_interval, stein_total_n
from .comparisons import Comparison, difference_ms, one_sided_p, paired_log_ratio, ratio_of_means, welch_log_ratio
from .decisions import Verdict, repetitions_needed, spread_upper_bound, verdict
from .grades import Grade, band, grade_range
from .intervals import Interval, interval, log_interval, mean_interval
from .loss import loss_interval
from .outliers import outlier_flags
from .significance import (Equivalence, SecondaryTest, holm, min_attainable_p, min_attainable_p_paired,
                           rank_test, secondary_tests, tost_log_ratio)

__all__ = [
    "Comparison", "Equivalence", "Grade", "Interval", "SecondaryTest", "SteinPlan", "Verdict",
    "band", "difference_ms", "grade_range", "holm", "interval", "log_interval", "loss_interval",
    "mean_interval", "min_attainable_p", "min_attainable_p_paired", "one_sided_p", "outlier_flags",
    "paired_log_ratio", "rank_test", "ratio_of_means", "repetitions_needed", "secondary_tests", "spread_upper_bound",
    "guarded_stein_interval", "stein_interval", "stein_total_n", "tost_log_ratio", "verdict", "welch_log_ratio",
]
