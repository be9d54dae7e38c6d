"""The comparison statistics against known values."""

import math

import numpy as np
import pytest
from scipy import stats

from vpnlab.compare import Comparison, compare, differs_in_one_thing, hedges_g, holm


def test_welch_matches_the_textbook_formula():
    a, b = [10.0, 11, 12, 13, 14], [12.0, 14, 16, 18, 20]
    result = compare(a, b)
    va, vb, na, nb = np.var(a, ddof=1), np.var(b, ddof=1), 5, 5
    t = (np.mean(b) - np.mean(a)) / math.sqrt(va / na + vb / nb)
    df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    assert result["welch_p"] == pytest.approx(2 * stats.t.sf(abs(t), df))
    assert result["welch_p_greater"] == pytest.approx(stats.t.sf(t, df))
    assert result["welch_p_greater"] + result["welch_p_less"] == pytest.approx(1)
    assert result["relative_diff_pct"] == pytest.approx(100 * 4 / 12)  # means 12 and 16
    assert result["rel_ci_low"] < 100 * 4 / 12 < result["rel_ci_high"]


def test_hedges_g_known_value():
    # pooled sd of [1,2,3] and [3,4,5] is 1; d = 2; correction 1 - 3/(4*6-9) = 0.8
    assert hedges_g(np.array([1.0, 2, 3]), np.array([3.0, 4, 5])) == pytest.approx(1.6)


def test_mann_whitney_on_separated_samples():
    result = compare([1, 2, 3, 4], [5, 6, 7, 8])
    assert result["mannwhitney_p"] == pytest.approx(stats.mannwhitneyu([5, 6, 7, 8], [1, 2, 3, 4]).pvalue)
    assert result["mannwhitney_p"] < 0.05


def test_holm_correction():
    comps = [Comparison("m", "l", "w", "a", "b", 3, 3, 1, 1, 0, 0, 0, p, p, p, p, 0) for p in (0.01, 0.04, 0.03)]
    holm(comps)
    # Holm: sorted 0.01*3=0.03, 0.03*2=0.06, then max(0.06, 0.04*1)=0.06
    assert [c.holm_p for c in comps] == pytest.approx([0.03, 0.06, 0.06])
    assert [c.significant for c in comps] == [True, False, False]


def test_too_few_values_is_an_error():
    with pytest.raises(ValueError):
        compare([1.0], [2.0, 3.0])


def test_one_difference_pairs():
    base = {"driver": "openvpn", "profile": "default", "options": {"cipher": "AES-256-GCM", "compression": "off"}}
    assert differs_in_one_thing(base, {**base, "profile": "fips"})
    assert differs_in_one_thing(base, {**base, "options": {"cipher": "BF-CBC", "compression": "off"}})
    assert not differs_in_one_thing(base, {**base, "options": {"cipher": "BF-CBC", "compression": "lzo"}})
    assert not differs_in_one_thing(base, {"driver": "wireguard", "profile": "default", "options": {}})
