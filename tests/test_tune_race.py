"""The race's statistics against simulations with known truth (numpy, fixed seeds).

A model of a race: candidates with set true log ratios to the best, a round effect every candidate
in the round shares (the machine's drift: what pairing by round removes) and independent lognormal
noise per repetition. The figures these tests measure are quoted in docs/tuning.md."""

import math

import numpy as np
import pytest

from vpnlab.tune.race import BUDGET, EQUIVALENT, ONE_LEFT, RaceRules, race

MARGIN, ALPHA, MAX_ROUNDS, MIN_ROUNDS = 0.02, 0.05, 20, 3


def simulate(truth, races, seed, noise=0.02, drift=0.05, rules=None):
    """Run `races` races over candidates whose true log values are `truth`; each race sees all
    MAX_ROUNDS rounds it might need (it stops reading when it stops). Returns their standings."""
    rng = np.random.default_rng(seed)
    truth = np.asarray(truth, dtype=float)
    rules = rules or RaceRules(MAX_ROUNDS, ALPHA, MARGIN, MIN_ROUNDS, len(truth))
    results = []
    for _ in range(races):
        rounds = rng.normal(0, drift, MAX_ROUNDS)
        z = truth[:, None] + rounds[None, :] + rng.normal(0, noise, (len(truth), MAX_ROUNDS))
        results.append(race(z, rules))
    return results


def used(standing, field_size):
    """Repetitions the race ran: every candidate until it was dropped or the race stopped."""
    return sum(standing.dropped[name].look if name in standing.dropped else standing.looks
               for name in standing.names[:field_size])


def test_the_spending_function_spends_alpha_once_over_the_budget():
    rules = RaceRules(MAX_ROUNDS, ALPHA, MARGIN, MIN_ROUNDS, field_size=5)
    levels = [rules.level(k) for k in range(1, MAX_ROUNDS + 1)]
    assert levels[:MIN_ROUNDS - 1] == [0, 0]
    assert sum(levels) * (5 - 1) == pytest.approx(ALPHA)
    assert rules.level(MAX_ROUNDS + 1) == 0  # nothing left beyond the budget


def test_the_true_best_survives_at_least_95_percent_of_races():
    # the best, one just within the margin, two near it, and clear losers
    truth = [0.0, -0.015, -0.03, -0.05, -0.15, -0.3]
    results = simulate(truth, 2000, seed=1)
    survived = np.mean([s.names[0] in s.survivors for s in results])
    assert survived >= 0.95, survived
    share = np.mean([used(s, len(truth)) for s in results]) / (len(truth) * MAX_ROUNDS)
    print(f"best survived {survived:.4f}, {share:.3f} of the grid")


@pytest.mark.parametrize("losers", [0, 2])
def test_a_candidate_within_the_margin_is_declared_worse_at_most_alpha_of_the_time(losers):
    # the hardest case: exactly at the margin of the best (alone with it: no Bonferroni to hide behind)
    truth = [0.0, -math.log1p(MARGIN)] + [-0.2] * losers
    results = simulate(truth, 3000, seed=2)
    wrongly = np.mean(["1" in s.dropped for s in results])
    assert wrongly <= ALPHA, wrongly
    print(f"field of {len(truth)}: within-margin candidate dropped in {wrongly:.4f} of races")


def test_equal_candidates_are_rarely_dropped_and_end_equivalent():
    results = simulate([0.0, 0.0, 0.0, 0.0], 1000, seed=3, noise=0.005)
    wrongly = np.mean([len(s.dropped) > 0 for s in results])
    equivalent = np.mean([s.stop == EQUIVALENT for s in results])
    assert wrongly <= ALPHA, wrongly
    assert equivalent > 0.9, equivalent
    share = np.mean([used(s, 4) for s in results]) / (4 * MAX_ROUNDS)
    print(f"four equal: any dropped in {wrongly:.4f}, ended equivalent in {equivalent:.4f}, {share:.3f} of the grid")


def test_a_clear_winner_costs_at_most_a_third_of_the_full_grid():
    truth = [0.0, -0.1, -0.15, -0.2, -0.25, -0.3, -0.35, -0.4]
    results = simulate(truth, 1000, seed=4)
    share = np.mean([used(s, len(truth)) for s in results]) / (len(truth) * MAX_ROUNDS)
    won = np.mean([s.stop == ONE_LEFT and s.survivors == ["0"] for s in results])
    assert share <= 1 / 3, share
    assert won >= 0.95, won
    print(f"clear winner: {share:.3f} of the full grid, won alone in {won:.4f}")


def test_a_race_it_cannot_decide_ends_when_the_budget_is_spent():
    standing = simulate([0.0, -0.02], 1, seed=5, noise=0.05)[0]
    assert standing.stop == BUDGET and standing.looks == MAX_ROUNDS


def test_missing_rounds_are_left_out_of_the_pairs():
    z = np.log(np.array([[100, 101, 99, 100, 100], [70, np.nan, 71, 69, 70], [99, 100, 98, np.nan, 99.5]]))
    standing = race(z, RaceRules(5, min_rounds=3, field_size=3), ["a", "b", "c"])
    assert "b" in standing.dropped and "a" in standing.survivors


def test_a_candidate_over_a_ceiling_is_dropped():
    z = np.log(np.full((2, 6), 100.0)) + np.random.default_rng(6).normal(0, 0.01, (2, 6))
    cpu = np.log(np.array([[10.0] * 6, [30.0] * 6])) + np.random.default_rng(7).normal(0, 0.05, (2, 6))
    standing = race(z, RaceRules(6, min_rounds=3, field_size=2), ["a", "b"], [(cpu, math.log(20), "CPU per GB")])
    assert "b" in standing.dropped and "CPU per GB" in standing.dropped["b"].reason


def test_a_candidate_at_the_margin_is_declared_equivalent_at_most_alpha_of_the_time():
    # equivalence claims |difference| < margin: exactly at the margin it is false
    results = simulate([0.0, -math.log1p(MARGIN)], 3000, seed=8, noise=0.01)
    wrongly = np.mean([s.stop == EQUIVALENT for s in results])
    assert wrongly <= ALPHA, wrongly
    print(f"at the margin: declared equivalent in {wrongly:.4f} of races")


def test_a_candidate_at_a_ceiling_is_dropped_for_it_at_most_alpha_of_the_time():
    rng = np.random.default_rng(9)
    rules = RaceRules(MAX_ROUNDS, ALPHA, MARGIN, MIN_ROUNDS, field_size=2)
    dropped = 0
    for _ in range(2000):
        z = rng.normal(0, 0.1, (2, MAX_ROUNDS))  # equal on the metric and noisy: the race runs to its end
        cpu = math.log(20) + rng.normal(0, 0.1, (2, MAX_ROUNDS))  # both exactly at the ceiling
        dropped += "1" in race(z, rules, ceilings=[(cpu, math.log(20), "CPU per GB")]).dropped
    assert dropped / 2000 <= ALPHA
    print(f"at the ceiling: dropped in {dropped / 2000:.4f} of races")
