"""Outliers are flagged, never dropped: whether they count is fixed before the run."""

from __future__ import annotations

import numpy as np

MIN_N = 5
MAD_TO_SD = 0.6745        # the normal's MAD is 0.6745 standard deviations
MEAN_AD_TO_SD = 0.7979    # and its mean absolute deviation 0.7979 of one
K = 3.5                   # Iglewicz and Hoaglin's cut-off


def outlier_flags(values, k: float = K) -> list[bool]:
    """Iglewicz and Hoaglin's modified z-score, 0.6745 (x - median) / MAD, flagged beyond k; from
    n >= 5 only (fewer: all False). When more than half the values are equal (MAD = 0) the mean
    absolute deviation around the median stands in, scaled to the same sd."""
    data = np.asarray(values, dtype=float)
    if len(data) < MIN_N:
        return [False] * len(data)
    deviation = np.abs(data - np.median(data))
    scale = np.median(deviation) / MAD_TO_SD
    if scale == 0:
        scale = deviation.mean() / MEAN_AD_TO_SD
    if scale == 0:
        return [False] * len(data)
    return [bool(flag) for flag in deviation / scale > k]
