"""Packet loss with the repetition as the unit.

Loss comes in bursts, so the packets of one repetition are not independent trials and pooled binomial
counts overstate precision. The spread between repetitions measures the real precision.
"""

from __future__ import annotations

import math

import numpy as np

from ._dist import beta_quantile, normal_quantile, t_quantile
from .intervals import Interval

LOSS_OBSERVED = ("Clopper-Pearson on the effective sample size (quasi-binomial dispersion between "
                 "repetitions, Korn-Graubard), repetition as the unit")
DEFAULT_MEAN_BURST = 5.0


def _clopper_pearson(lost: float, trials: float, level: float) -> tuple[float, float]:
    """Exact binomial interval; lost and trials may be fractional (effective counts)."""
    tail = (1 - level) / 2
    low = beta_quantile(lost, trials - lost + 1, tail) if lost > 0 else 0.0
    high = beta_quantile(lost + 1, trials - lost, 1 - tail) if lost < trials else 1.0
    return low, high


def _observed_loss(lost: np.ndarray, packets: np.ndarray, level: float) -> tuple[float, float]:
    """Korn and Graubard's interval: Clopper-Pearson on the number of packets the data are worth
    (total / dispersion), shrunk by (z / t_{n-1})^2 for the n - 1 degrees of freedom of the spread,
    joined with the plain binomial interval so a spread smaller than binomial by chance claims no more."""
    n, total = len(lost), packets.sum()
    rate = lost.sum() / total
    dispersion = ((lost - packets * rate) ** 2 / (packets * rate * (1 - rate))).sum() / (n - 1)
    low, high = _clopper_pearson(lost.sum(), total, level)
    if dispersion > 0:
        shrink = (normal_quantile((1 + level) / 2) / t_quantile(n - 1, (1 + level) / 2)) ** 2
        effective = total / dispersion * shrink
        eff_low, eff_high = _clopper_pearson(rate * effective, effective, level)
        low, high = min(low, eff_low), max(high, eff_high)
    return low, high


def no_loss_bound(packets: np.ndarray, level: float, mean_burst_packets: float) -> float:
    """Upper end (a fraction) when no repetition lost anything. With bursts of mean_burst_packets on
    average arriving as a Poisson process, a loss fraction f brings f * c bursts in expectation over
    c = sum of max(1, m / burst) chances (m packets a repetition), so seeing none bounds f by
    ln(2 / (1 - level)) / c."""
    chances = float(np.maximum(1.0, packets / mean_burst_packets).sum())
    return min(1.0, math.log(2 / (1 - level)) / chances)


def loss_interval(loss_pct_per_rep, packets_per_rep, level: float = 0.95,
                  mean_burst_packets: float = DEFAULT_MEAN_BURST) -> Interval:
    """Loss in percentage points with the repetition as the unit. With loss observed: Korn and
    Graubard's Clopper-Pearson interval on the effective sample size, the dispersion estimated between
    repetitions (quasi-binomial) with n - 1 degrees of freedom. With no loss in any repetition: 0 up to
    the Poisson bound for zero bursts, assuming bursts of mean_burst_packets packets on average (an
    assumption, not a measurement: longer bursts make the bound too low); it spends the level's upper
    tail only, as the upper end of a two-sided interval does. Needs n >= 2.
    packets_per_rep is one count for all repetitions or one per repetition."""
    pct = np.asarray(loss_pct_per_rep, dtype=float)
    packets = np.broadcast_to(np.asarray(packets_per_rep, dtype=float), pct.shape)
    n = len(pct)
    if n < 2:
        estimate = float(pct[0]) if n else None
        return Interval(estimate, None, None, n, level, LOSS_OBSERVED,
                        "fewer than two repetitions: the spread of loss between them is unknown")
    lost = pct / 100 * packets
    rate = float(100 * lost.sum() / packets.sum())
    if rate in (0.0, 100.0):
        bound = 100 * no_loss_bound(packets, level, mean_burst_packets)
        low, high = (0.0, bound) if rate == 0 else (100 - bound, 100.0)
        method = (f"{'no' if rate == 0 else 'total'} loss in all {n} repetitions "
                  f"({packets.sum():.0f} packets): Poisson bound assuming bursts of "
                  f"{mean_burst_packets:g} packets on average")
        return Interval(rate, low, high, n, level, method)
    low, high = _observed_loss(lost, packets, level)
    return Interval(rate, 100 * low, 100 * high, n, level, LOSS_OBSERVED)
