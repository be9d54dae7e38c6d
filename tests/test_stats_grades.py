"""Jaha 2014's grades, given only where they mean something."""

import pytest

from vpnlab.analyse.stats import band, grade_range


@pytest.mark.parametrize("ratio,expected", [
    (1.05, "excellent"), (0.85, "excellent"), (0.849, "very good"), (0.75, "very good"), (0.74, "good"),
    (0.65, "good"), (0.649, "acceptable"), (0.40, "acceptable"), (0.39, "weak"), (0.25, "weak"),
    (0.249, "very weak"),
])
def test_throughput_bands_as_share_of_the_baseline(ratio, expected):
    assert band(ratio, "throughput") == expected


@pytest.mark.parametrize("multiple,expected", [
    (0.9, "excellent"), (1.176, "excellent"), (1.2, "very good"), (1.333, "very good"), (1.5, "good"),
    (1.538, "good"), (2.0, "acceptable"), (2.5, "acceptable"), (3.0, "weak"), (4.0, "weak"),
    (4.1, "very weak"),
])
def test_latency_bands_as_multiples_of_the_baseline(multiple, expected):
    assert band(multiple, "latency") == expected


def test_an_interval_inside_one_band_gets_that_band():
    assert grade_range(0.88, 0.95, "throughput", 3, 3).grade == "excellent"


def test_an_interval_spanning_bands_shows_both_ends_worse_first():
    assert grade_range(0.80, 0.90, "throughput", 3, 3).grade == "very good - excellent"
    assert grade_range(0.60, 0.90, "throughput", 5, 5).grade == "acceptable - excellent"
    assert grade_range(1.1, 1.4, "latency", 3, 3, baseline_ms=12.0).grade == "good - excellent"


@pytest.mark.parametrize("n_vpn,n_baseline", [(2, 3), (3, 2), (1, 1)])
def test_fewer_than_three_on_a_side_gets_no_grade(n_vpn, n_baseline):
    result = grade_range(0.9, 0.95, "throughput", n_vpn, n_baseline)
    assert result.grade is None and "n >= 3" in result.reason


def test_no_latency_grade_from_a_sub_millisecond_baseline():
    # the case: WireGuard 0.79 ms against a 0.08 ms baseline, 9.9x
    result = grade_range(9.0, 10.8, "latency", 3, 3, baseline_ms=0.08)
    assert result.grade is None and "below the 1 ms floor" in result.reason
    assert grade_range(1.1, 1.15, "latency", 3, 3, baseline_ms=0.5, floor_ms=0.2).grade == "excellent"
    assert grade_range(1.1, 1.15, "latency", 3, 3).grade is None     # no baseline given: no grade


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        band(1.0, "loss")
