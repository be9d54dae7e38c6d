"""Confidence intervals that fit the quantity: the log scale for strictly positive quantities, the
arithmetic mean clipped at the edge of the parameter space for quantities that may be zero.
No percentile bootstrap: at n = 3 it covers about 80%, not 95%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ._dist import no_spread, t_quantile

LOG_T = "t interval on the log scale (geometric mean)"
MEAN_T = "t interval of the arithmetic mean"
IDENTICAL = "identical samples"


@dataclass(frozen=True)
class Interval:
    """An estimate and its two-sided confidence interval. low and high are None when there is no
    interval; note then says why ("no samples", "one sample: no interval"); note "identical samples"
    marks a zero-width interval that claims no precision."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    level: float
    method: str
    note: str = ""


def t_interval(data: np.ndarray, level: float, method: str) -> Interval:
    """The textbook t interval of the mean of data, with n < 2 and zero spread handled."""
    n = len(data)
    if n == 0:
        return Interval(None, None, None, 0, level, method, "no samples")
    mean = float(data.mean())
    if n == 1:
        return Interval(mean, None, None, 1, level, method, "one sample: no interval")
    if no_spread(data):
        return Interval(mean, mean, mean, n, level, method, IDENTICAL)
    half = t_quantile(n - 1, (1 + level) / 2) * float(data.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, level, method)


def _exp(result: Interval) -> Interval:
    """Back from the log scale: the mean of logs becomes the geometric mean."""
    def back(x):
        return None if x is None else math.exp(x)
    return replace(result, estimate=back(result.estimate), low=back(result.low), high=back(result.high))


def log_interval(values, level: float = 0.95) -> Interval:
    """Student t interval of the mean of log values, exponentiated: it estimates the geometric mean,
    never goes below zero, and matches the tests on logs. Needs strictly positive values."""
    data = np.asarray(values, dtype=float)
    if (data <= 0).any():
        raise ValueError("log_interval needs strictly positive values")
    return _exp(t_interval(np.log(data), level, LOG_T))


def mean_interval(values, lower_bound: float | None = None, level: float = 0.95) -> Interval:
    """Student t interval of the arithmetic mean, clipped at lower_bound when the quantity cannot go
    below it. Clipping at the edge of the parameter space does not lower coverage: a true mean at or
    above the bound lies in the clipped interval exactly when it lies in the unclipped one. Coverage
    assumes roughly symmetric per-repetition values: strongly skewed ones (an exponential-like spread
    near zero) cover less than the stated level at n <= 10."""
    result = t_interval(np.asarray(values, dtype=float), level, MEAN_T)
    if lower_bound is None or result.low is None:
        return result
    clipped = f"{MEAN_T}, clipped at {lower_bound:g}"
    return replace(result, low=max(result.low, lower_bound), high=max(result.high, lower_bound),
                   method=clipped)


def interval(values, positive: bool, level: float = 0.95) -> Interval:
    """The interval that fits the quantity: on the log scale (geometric mean) for a strictly positive
    quantity whose values are all above zero, else the arithmetic mean clipped at zero.
    The result's method says which ran."""
    data = np.asarray(values, dtype=float)
    if positive and len(data) and (data > 0).all():
        return log_interval(data, level)
    result = mean_interval(data, lower_bound=0.0, level=level)
    if positive and len(data):
        return replace(result, note=result.note or "a value at or below zero rules out the log scale")
    return result
