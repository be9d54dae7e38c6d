"""Distribution functions from scipy.special.

These are ufuncs: they import in a fraction of scipy.stats' time and cost microseconds a call, so the
report does not wait for scipy.stats and simulations can call the public functions thousands of times.
"""

from __future__ import annotations

import numpy as np


def t_quantile(df: float, prob: float) -> float:
    """The prob-quantile of Student's t with df degrees of freedom."""
    from scipy.special import stdtrit

    return float(stdtrit(df, prob))


def t_upper_p(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| > |t|) for Student's t with df degrees of freedom."""
    return 2 * t_upper_p(abs(t), df)


def normal_quantile(prob: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(prob))


def chi2_quantile(df: float, prob: float) -> float:
    """The prob-quantile of the chi-square distribution with df degrees of freedom."""
    from scipy.special import chdtri  # inverse of the upper tail

    return float(chdtri(df, 1 - prob))


def beta_quantile(a: float, b: float, prob: float) -> float:
    from scipy.special import betaincinv

    return float(betaincinv(a, b, prob))


def noncentral_t_cdf(df: float, noncentrality: float, t: float) -> float:
    from scipy.special import nctdtr

    return float(nctdtr(df, noncentrality, t))


def no_spread(data: np.ndarray) -> bool:
    """True when all values are equal up to rounding (the mean of equal floats need not equal them)."""
    return float(np.ptp(data)) <= 1e-12 * max(1.0, float(np.abs(data).max()))
