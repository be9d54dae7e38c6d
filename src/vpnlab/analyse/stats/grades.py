"""Jaha 2014's six grades, given only where they mean something.

Throughput is graded by its percentage of the baseline; latency and jitter by their multiple of it,
but only when the baseline is at least a floor: a multiple of a near-zero baseline grades noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...plan.analysis_settings import DEFAULT_FLOOR_MS

# Lower bounds of each band, as a fraction of the baseline (Jaha 2014, section IV) ...
THROUGHPUT_BANDS = [(0.85, "excellent"), (0.75, "very good"), (0.65, "good"), (0.40, "acceptable"),
                    (0.25, "weak"), (0.0, "very weak")]
# ... and upper bounds, as a multiple of it; above the last: "very weak".
LATENCY_BANDS = [(1.176, "excellent"), (1.333, "very good"), (1.538, "good"), (2.5, "acceptable"),
                 (4.0, "weak")]
ORDER = ["very weak", "weak", "acceptable", "good", "very good", "excellent"]
KINDS = ("throughput", "latency")
MIN_N = 3



def band(ratio: float, kind: str) -> str:
    """The grade of one ratio to the baseline: throughput as a fraction of it (0.9 is 90%),
    latency and jitter as a multiple of it."""
    if kind == "throughput":
        return next(name for bound, name in THROUGHPUT_BANDS if ratio >= bound)
    if kind == "latency":
        return next((name for bound, name in LATENCY_BANDS if ratio <= bound), "very weak")
    raise ValueError(f"kind is one of {KINDS}, not {kind!r}")


@dataclass(frozen=True)
class Grade:
    """grade is one band, "worse - better" when the interval spans bands, or None (reason says why)."""

    grade: str | None
    reason: str = ""


def grade_range(ratio_low: float, ratio_high: float, kind: str, n_vpn: int, n_baseline: int,
                baseline_ms: float | None = None, floor_ms: float = DEFAULT_FLOOR_MS) -> Grade:
    """Grade the interval [ratio_low, ratio_high] of the ratio to the baseline: one band when both
    ends fall in it, "worse - better" when it spans bands. Needs n >= 3 on both sides; latency and
    jitter also need the baseline (baseline_ms) at or above floor_ms."""
    if min(n_vpn, n_baseline) < MIN_N:
        return Grade(None, f"a grade needs n >= {MIN_N} on both sides (have {n_vpn} and {n_baseline})")
    if kind == "latency" and (baseline_ms is None or baseline_ms < floor_ms):
        shown = "unknown" if baseline_ms is None else f"{baseline_ms:.3g} ms"
        return Grade(None, f"the baseline ({shown}) is below the {floor_ms:g} ms floor: a multiple of it "
                           "would grade noise, so the added ms are shown ungraded")
    ends = sorted({band(ratio_low, kind), band(ratio_high, kind)}, key=ORDER.index)
    return Grade(" - ".join(ends))
