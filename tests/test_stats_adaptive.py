"""Stein's two-stage rule and outlier flags against known truth (seeded simulations), with and
without "bad runs": 10% of runs that lose a fixed share of throughput (a busy machine, a stall)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from vpnlab.analyse.stats import (guarded_stein_interval, log_interval, outlier_flags, paired_log_ratio, stein_interval,
                          stein_total_n)
from vpnlab.plan.study import RepetitionRule
from vpnlab.analyse.stopping import final_interval
from vpnlab.run.stopping import rounds_wanted

STUDIES = 4000
TARGET = 0.02   # relative half-width asked for
MAX_ROUNDS = 60


def draw(rng, size, cv, bad_share=0.0, bad_factor=1.0):
    """Throughput-like runs: lognormal with coefficient of variation cv around 900, a bad_share of
    them multiplied by bad_factor."""
    sigma = math.sqrt(math.log1p(cv ** 2))
    bad = rng.random(size) < bad_share
    return 900 * np.exp(rng.normal(0, sigma, size)) * np.where(bad, bad_factor, 1.0)


def true_geometric_mean(bad_share, bad_factor):
    return 900 * math.exp(bad_share * math.log(bad_factor))


def stein_study(rng, pilot_n, cv, bad_share=0.0, bad_factor=1.0):
    pilot = draw(rng, pilot_n, cv, bad_share, bad_factor)
    plan = stein_total_n(pilot, TARGET, max_n=MAX_ROUNDS)
    rest = draw(rng, plan.total_n - pilot_n, cv, bad_share, bad_factor)
    return plan, stein_interval(np.concatenate([pilot, rest]), plan.pilot_sd_log, plan.pilot_df)


def stein_coverage(seed, pilot_n, cv, bad_share=0.0, bad_factor=1.0):
    rng = np.random.default_rng(seed)
    truth = true_geometric_mean(bad_share, bad_factor)
    studies = [stein_study(rng, pilot_n, cv, bad_share, bad_factor) for _ in range(STUDIES)]
    return float(np.mean([result.low <= truth <= result.high for _, result in studies])), studies


@pytest.mark.parametrize("pilot_n", [3, 5])
@pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
def test_stein_interval_covers_and_keeps_the_width_it_promised(pilot_n, cv):
    measured, studies = stein_coverage(pilot_n * 100 + int(100 * cv), pilot_n, cv)
    assert 0.94 <= measured <= 0.96
    for plan, result in studies:
        assert result.n == plan.total_n and (plan.total_n == MAX_ROUNDS or not plan.capped)
        if not plan.capped:   # the half-width is fixed by the pilot: at most the target
            assert result.high / result.estimate <= 1 + TARGET + 1e-12


def test_stein_total_follows_the_rule():
    pilot = [900.0, 930.0, 880.0]
    sd = float(np.log(pilot).std(ddof=1))
    expected = math.ceil((4.302652729911275 * sd / math.log(1.02)) ** 2)  # t(0.975, 2)
    plan = stein_total_n(pilot, 0.02)
    assert (plan.total_n, plan.pilot_n, plan.pilot_df, plan.capped) == (expected, 3, 2, False)
    assert stein_total_n(pilot, 0.02, max_n=10).capped
    assert stein_total_n([900.0, 900.5, 900.2], 0.05).total_n == 3   # the pilot is already enough


def test_stein_needs_a_pilot_of_two():
    with pytest.raises(ValueError):
        stein_total_n([900.0], 0.02)


# 10% bad runs whose loss is within about 3 run-to-run standard deviations
MILD_BAD_RUNS = [(0.02, 0.95), (0.05, 0.90), (0.10, 0.90)]   # (cv, bad_factor): 2.6, 2.1, 1.1 sd


@pytest.mark.parametrize("cv,bad_factor", MILD_BAD_RUNS)
def test_stein_covers_with_bad_runs_close_to_the_spread(cv, bad_factor):
    measured, _ = stein_coverage(7, 3, cv, bad_share=0.1, bad_factor=bad_factor)
    assert 0.94 <= measured <= 0.96


def test_bad_runs_far_outside_the_spread_break_every_t_interval_not_only_steins():
    """Found by this simulation: with 10% bad runs losing 30% while runs otherwise vary by 2%
    (18 sd), Stein's interval covers the mixture's geometric mean in only about 58% of studies, and
    fixed-n t intervals on logs no better (about 51% at n = 5, 65% at n = 10): a small sample
    usually holds no bad run, and its tight spread says nothing of them. No stopping rule repairs
    this. Coverage holds while bad runs stay within about 3 sd (test above); far ones are what the
    outlier flags catch (next test), and the report must show them."""
    measured, _ = stein_coverage(8, 3, 0.02, bad_share=0.1, bad_factor=0.7)
    assert measured < 0.75
    rng, truth = np.random.default_rng(9), true_geometric_mean(0.1, 0.7)
    for n in (5, 10):
        fixed = [log_interval(draw(rng, n, 0.02, 0.1, 0.7)) for _ in range(STUDIES)]
        assert np.mean([r.low <= truth <= r.high for r in fixed]) < 0.8


def guarded_coverage(seed, pilot_n, cv, bad_share=0.0, bad_factor=1.0):
    """Coverage of Stein's interval and of its union with the all-n t interval, on the same studies."""
    rng, truth = np.random.default_rng(seed), true_geometric_mean(bad_share, bad_factor)
    stein = guarded = 0
    for _ in range(STUDIES):
        pilot = draw(rng, pilot_n, cv, bad_share, bad_factor)
        plan = stein_total_n(pilot, TARGET, max_n=MAX_ROUNDS)
        values = np.concatenate([pilot, draw(rng, plan.total_n - pilot_n, cv, bad_share, bad_factor)])
        plain = stein_interval(values, plan.pilot_sd_log, plan.pilot_df)
        wide = guarded_stein_interval(values, plan.pilot_sd_log, plan.pilot_df)
        assert wide.low <= plain.low and wide.high >= plain.high and wide.estimate == plain.estimate
        stein += plain.low <= truth <= plain.high
        guarded += wide.low <= truth <= wide.high
    return stein / STUDIES, guarded / STUDIES


@pytest.mark.parametrize("pilot_n,cv,bad_share,bad_factor", [(3, 0.02, 0, 1), (5, 0.10, 0, 1), (3, 0.05, 0.1, 0.9)])
def test_the_guarded_interval_keeps_at_least_95_percent_where_stein_does(pilot_n, cv, bad_share, bad_factor):
    stein, guarded = guarded_coverage(11, pilot_n, cv, bad_share, bad_factor)
    assert 0.94 <= stein <= 0.96 and 0.94 <= guarded <= 0.99


def test_the_guarded_interval_covers_more_often_when_later_runs_spread_wider():
    stein, guarded = guarded_coverage(12, 3, 0.02, bad_share=0.1, bad_factor=0.7)
    assert guarded > stein + 0.05  # still short of 95%: no interval from a few runs sees rare far ones
    # narayan-2008's strongSwan at 32 KB: a tight pilot, then one repetition 20% down
    values = [8.52, 8.55, 8.50, 8.61, 8.57, 8.49, 8.58, 6.589, 8.55, 8.60]
    pilot = stein_total_n(values[:3], 0.05)
    plain = stein_interval(values, pilot.pilot_sd_log, pilot.pilot_df)
    wide = guarded_stein_interval(values, pilot.pilot_sd_log, pilot.pilot_df)
    assert plain.high / plain.estimate < 1.01 and wide.high / wide.estimate > 1.04 and "widened" in wide.method


# --- Stein's rule as vpnlab runs it (run/stopping.py) -------------------------------------------------

class PilotStore:
    """What rounds_wanted reads of a store: each scenario's values so far; none failed."""

    def __init__(self, kept: dict):
        self.kept = kept

    def values(self, scenario_id, metric):
        return list(self.kept[scenario_id])

    def status(self, scenario_id):
        return "done"


def compared_scenario(sid: str, rule: RepetitionRule) -> SimpleNamespace:
    """A scenario as rounds_wanted reads it; one link and workload for all, so all are compared."""
    return SimpleNamespace(id=sid, repetitions=rule, kind=SimpleNamespace(primary="throughput_mbps"),
                           link=SimpleNamespace(label="lan"), workload=SimpleNamespace(label="tcp"))


def raised_study(rng, rule: RepetitionRule, sds: tuple, round_sd: float):
    """One study of len(sds) compared configurations (log spread sds, a shared round effect of round_sd,
    true geometric mean 900): each configuration's values up to the rounds rounds_wanted gives them all
    from their pilots, and how many its own pilot asked for."""
    logs = rng.normal(0, round_sd, rule.max) + rng.normal(0, np.array(sds)[:, None], (len(sds), rule.max))
    values = 900 * np.exp(logs)
    scenarios = [compared_scenario(str(k), rule) for k in range(len(sds))]
    store = PilotStore({s.id: values[k, :rule.min] for k, s in enumerate(scenarios)})
    (n,) = {rounds_wanted(store, s, scenarios) for s in scenarios}   # whole rounds: one total for all
    own = [stein_total_n(v[:rule.min], rule.ci_target_pct / 100, max_n=rule.max).total_n for v in values]
    return values[:, :n], own


def test_steins_interval_covers_when_the_total_is_raised_to_the_largest_of_the_compared():
    """Three configurations compared (log spreads 1%, 2%, 4%) sharing a round effect (2%), all run to
    the largest of their Stein totals (median 14 rounds): the quiet ones mostly run past their own
    (86%, 71%, 28% of studies). N still depends on the pilots' spreads alone, so Stein's interval keeps
    95% for each (measured 95.0-95.2%), and final_interval, its union with the all-n t interval, at
    least that (97.6-98.3%)."""
    rng, rule, sds = np.random.default_rng(30), RepetitionRule(min=3, max=60, ci_target_pct=5), (0.01, 0.02, 0.04)
    stein, final, raised = np.zeros(3), np.zeros(3), np.zeros(3)
    for _ in range(STUDIES):
        values, own = raised_study(rng, rule, sds, round_sd=0.02)
        for k, v in enumerate(values):
            plan = stein_total_n(v[:rule.min], rule.ci_target_pct / 100)
            i, f = stein_interval(v, plan.pilot_sd_log, plan.pilot_df), final_interval(list(v), rule)
            stein[k] += i.low <= 900 <= i.high
            final[k] += f.low <= 900 <= f.high
            raised[k] += len(v) > own[k]
    assert (raised / STUDIES > [0.8, 0.6, 0.2]).all()   # the quiet configurations mostly ran past their own
    # 95% +- 1 point: about three binomial standard errors of 4000 studies (0.34 points each)
    assert ((0.94 <= stein / STUDIES) & (stein / STUDIES <= 0.96)).all(), stein / STUDIES
    assert ((0.94 <= final / STUDIES) & (final / STUDIES <= 0.99)).all(), final / STUDIES


def flagged_left_out_coverage(seed, pilot_n, bad_share=0.0, bad_factor=1.0, fresh_pilot=False):
    """How often final_interval of the values left once the flagged ones (outlier_flags over all of a
    study's values) are left out covers the clean geometric mean, 900: with the pilot Stein's rule ran
    on (all of the first pilot_n values, as analysis does), or a fresh pilot from what is left (as it
    did before: the plain t interval when fewer than pilot_n were left)."""
    rng, rule = np.random.default_rng(seed), RepetitionRule(min=pilot_n, max=MAX_ROUNDS, ci_target_pct=100 * TARGET)
    covered = 0
    for _ in range(STUDIES):
        values = draw(rng, MAX_ROUNDS, 0.02, bad_share, bad_factor)
        values = list(values[:stein_total_n(values[:pilot_n], TARGET, max_n=MAX_ROUNDS).total_n])
        kept = [v for v, far in zip(values, outlier_flags(values)) if not far]
        final = final_interval(kept, rule, pilot=None if fresh_pilot else values[:pilot_n])
        final = final or log_interval(kept)   # no fresh pilot of pilot_n left: the plain interval, as analysis
        covered += final.low <= 900 <= final.high
    return covered / STUDIES


def test_leaving_flagged_values_out_keeps_steins_coverage_with_the_pilot_it_ran_on():
    """Clean runs (2% spread), a pilot of 5: leaving the flagged values out (0.2 a study) keeps 95%
    coverage with the pilot the rule ran on (measured 94.7%); a fresh pilot from what is left would
    not (90.0%: the flags cut the pilot's tails)."""
    # 95% +- 1 point: about three binomial standard errors of 4000 studies
    assert 0.94 <= flagged_left_out_coverage(13, 5) <= 0.96
    assert flagged_left_out_coverage(13, 5, fresh_pilot=True) < 0.93


@pytest.mark.parametrize("pilot_n", [3, 5])
def test_leaving_far_bad_runs_out_covers_the_clean_runs(pilot_n):
    """10% bad runs losing 30% (18 sd, which no interval from a few runs covers kept in: test above),
    flagged and left out: the interval covers the clean runs' geometric mean at least 95% of the time
    (measured 96.7% with a pilot of 3, 97.0% of 5: a pilot holding a bad run is wide)."""
    # at least 95% less three binomial standard errors of 4000 studies; at most 99%, as the guarded interval
    assert 0.94 <= flagged_left_out_coverage(14, pilot_n, bad_share=0.1, bad_factor=0.7) <= 0.99


def test_outlier_flags_catch_far_bad_runs():
    rng = np.random.default_rng(10)
    bad = np.zeros((STUDIES, 10), dtype=bool)
    bad[:, 0] = True                                         # one bad run in each study of 10
    runs = draw(rng, (STUDIES, 10), 0.02) * np.where(bad, 0.7, 1.0)
    flags = np.array([outlier_flags(study) for study in runs])
    assert flags[bad].mean() > 0.95
    assert flags[~bad].mean() < 0.02


@pytest.mark.parametrize("n,per_value,per_study", [(5, (0.04, 0.065), (0.17, 0.24)),
                                                   (10, (0.012, 0.022), (0.10, 0.15))])
def test_outlier_flags_on_clean_data_are_frequent_at_small_n(n, per_value, per_study):
    """Measured on clean lognormal runs: the MAD of a few values is itself noisy, so k = 3.5 flags
    about 5% of values at n = 5 (a flag in about a fifth of studies) and 1.7% at n = 10 (one in
    eight). A flag is a prompt to look, not evidence of a bad run; flagged runs count by default."""
    flags = np.array([outlier_flags(study) for study in draw(np.random.default_rng(n), (STUDIES, n), 0.02)])
    assert per_value[0] <= flags.mean() <= per_value[1]
    assert per_study[0] <= flags.any(axis=1).mean() <= per_study[1]


@pytest.mark.parametrize("n,band", [(5, (0.84, 0.89)), (10, (0.89, 0.935))])
def test_leaving_flagged_values_out_of_clean_data_narrows_the_interval_below_95(n, band):
    """Documents what the methods text says of `flagged_samples: exclude`: on clean lognormal runs
    the log interval of what is left covers the true geometric mean about 86% of the time at n = 5
    and 91% at n = 10 (all values kept: 95%), since the flags cut the tails the spread comes from."""
    runs = draw(np.random.default_rng(20 + n), (STUDIES, n), 0.05)
    kept = [study[~np.array(outlier_flags(study))] for study in runs]
    def coverage(samples):
        return np.mean([(i := log_interval(sample)).low <= 900 <= i.high for sample in samples])

    assert band[0] <= coverage(kept) <= band[1]
    assert 0.94 <= coverage(runs) <= 0.96


# --- outlier flags ------------------------------------------------------------------------------

def test_outlier_flags_only_from_five_samples():
    assert outlier_flags([900.0, 905.0, 2.0, 898.0]) == [False] * 4
    assert outlier_flags([900.0, 905.0, 2.0, 898.0, 902.0]) == [False, False, True, False, False]


def test_outlier_flags_when_most_values_are_equal():
    assert outlier_flags([1.0, 1.0, 1.0, 1.0, 5.0]) == [False, False, False, False, True]
    assert outlier_flags([3.0] * 6) == [False] * 6


def test_outlier_threshold_is_the_modified_z_score():
    values = [10.0, 10.0, 11.0, 12.0, 12.0, 20.0]         # median 11.5, MAD 1
    z = 0.6745 * (20.0 - 11.5) / 1.0                       # 5.73
    assert outlier_flags(values, k=z - 0.01)[-1] and not outlier_flags(values, k=z + 0.01)[-1]


@pytest.mark.parametrize("pilot,most,target", [(3, 10, 0.08), (5, 20, 0.05)])
def test_comparisons_after_adaptive_stopping_reject_a_little_more_than_5_percent(pilot, most, target):
    """Documents what the methods text says: two equal configurations, compared over the rounds both
    ran, each running to the larger of their Stein totals. Stopping early follows a pilot whose spread
    came out small, so the paired test rejects about 6% (5.9-6.3%) of the time under no difference
    (fixed repetitions: 5%), before Holm's correction."""
    rng = np.random.default_rng(pilot)
    rejected = []
    for _ in range(6000):
        shared = rng.normal(0, 0.03, most)                  # the round, shared by both
        a, b = (500 * np.exp(shared + rng.normal(0, 0.035, most)) for _ in range(2))
        n = max(stein_total_n(x[:pilot], target, max_n=most).total_n for x in (a, b))
        rejected.append(paired_log_ratio(a[:n], b[:n]).p < 0.05)
    assert 0.055 <= np.mean(rejected) <= 0.065
