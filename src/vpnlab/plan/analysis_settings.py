"""What a study fixes before its run about how its data are judged: its `analysis:` block.

Fixed before the run, stored with it (the study text), never chosen after seeing the data: the
smallest baseline latency graded as a multiple, the practical threshold of "ahead" and
"equivalent", whether flagged samples count, and whether a seed's own grading is shown beside
vpnlab's. A stored study without the block is judged by the defaults (analyse/judging.py applies them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..core.schema import Strict

DEFAULT_FLOOR_MS = 1.0  # below it, a latency is not graded as a multiple (analyse/stats/grades.py)


class AnalysisSettings(Strict):
    latency_floor_ms: float = Field(DEFAULT_FLOOR_MS, ge=0, le=10_000, description=(
        "the smallest no-VPN latency graded as a multiple; below it the ms a VPN adds are shown ungraded"))
    threshold_pct: float = Field(2.0, gt=0, le=50, description=(
        "the smallest difference called 'ahead', and the margin of 'equivalent' (TOST), in %"))
    flagged_samples: Literal["count", "exclude"] = Field("count", description=(
        "whether samples far from the rest (median and MAD, from n >= 5) and samples taken while the "
        "machine was busy with something else count in the statistics; the report shows both"))
    seed_grading: Literal["none", "jaha-2014"] = Field("none", description=(
        "also grade as a seed did: jaha-2014 grades every metric as a share or multiple of no VPN's mean "
        "(Table VI), without vpnlab's floor and sample-size rules; shown beside vpnlab's grades, marked"))

    @property
    def threshold(self) -> float:
        return self.threshold_pct / 100

    def other_way(self) -> "AnalysisSettings":
        """The same settings with flagged samples treated the other way: the report shows both."""
        return self.model_copy(update={"flagged_samples": "exclude" if self.counts_flagged else "count"})

    @property
    def counts_flagged(self) -> bool:
        return self.flagged_samples == "count"
