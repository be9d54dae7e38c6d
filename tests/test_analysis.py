"""Statistics against known values, and the Jaha 2014 grades."""

import math

import pytest

from vpnlab.analysis import describe, grade


def test_describe_matches_textbook_t_interval():
    n, mean, sd, low, high = describe([10, 12, 14])
    assert (n, mean, sd) == (3, 12, 2)
    half = 4.302652729911275 * 2 / math.sqrt(3)  # t(0.975, 2)
    assert low == pytest.approx(12 - half) and high == pytest.approx(12 + half)


def test_describe_single_value_has_no_interval():
    n, mean, sd, low, high = describe([5.0])
    assert n == 1 and mean == 5 and math.isnan(sd) and math.isnan(low)


@pytest.mark.parametrize("percent,expected", [
    (100, "excellent"), (85, "excellent"), (84.9, "very good"), (75, "very good"), (74, "good"),
    (65, "good"), (64.9, "acceptable"), (40, "acceptable"), (39, "weak"), (25, "weak"), (24.9, "very weak"),
])
def test_throughput_grades(percent, expected):
    assert grade("throughput_mbps", percent) == expected


@pytest.mark.parametrize("multiple,expected", [
    (1.0, "excellent"), (1.176, "excellent"), (1.2, "very good"), (1.333, "very good"), (1.5, "good"),
    (2.5, "acceptable"), (3, "weak"), (4, "weak"), (4.01, "very weak"),
])
def test_latency_grades(multiple, expected):
    assert grade("rtt_avg_ms", multiple) == expected


def test_zero_baseline_loss_grades_by_presence():
    assert grade("udp_loss_pct", 1.0) == "excellent"
    assert grade("udp_loss_pct", math.inf) == "very weak"
