"""What every part of a study file shares: strict models and sizes as people write them."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Unknown keys are errors; a validated value never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)[bB]?\s*$")


def parse_size(value: Any) -> int:
    """'64K' -> 65536 (binary multiples, as iperf3 reads them)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 65536, 64K or 1M")
    if isinstance(value, (int, float)):
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 65536, 64K or 1M, got {value!r}")
    number, unit = match.groups()
    return int(float(number) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()])


Size = Annotated[int, Field(gt=0)]


def human_size(n: int) -> str:
    """65536 -> '64K', for labels."""
    for unit, size in (("M", 1024**2), ("K", 1024)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
