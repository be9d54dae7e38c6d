"""What every part of a study file shares: strict models and sizes as people write them."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrueOrFalse:
    """Stands in for true/false given where a number belongs, so that validation fails at that
    field (pydantic would read `rate_mbit: true` as 1); the error names it (study.validation_problems)."""

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:
        return str(self.value).lower()


class NumbersAreNumbers(BaseModel):
    """A model whose number fields refuse true/false."""

    @model_validator(mode="before")
    @classmethod
    def _not_true_or_false(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {key: TrueOrFalse(value) if isinstance(value, bool) and key in fields
                and _numeric(fields[key].annotation) else value for key, value in data.items()}


def _numeric(annotation: Any) -> bool:
    """A number type (int, float, or an optional one), and not one that takes a bool too."""
    if get_origin(annotation) is Annotated:
        return _numeric(get_args(annotation)[0])
    if args := get_args(annotation):
        return bool not in args and any(_numeric(arg) for arg in args)
    return annotation in (int, float)


class Strict(NumbersAreNumbers):
    """Unknown keys are errors; a validated value never changes; a number is never true/false."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# C0 and C1 controls and the bidirectional overrides: what could colour a terminal or forge a line.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)[bB]?\s*$", re.ASCII)  # no other script's digits


def parse_size(value: Any) -> int:
    """'64K' -> 65536 (binary multiples, as iperf3 reads them). A size is a whole number of bytes:
    1.5K is 1536, but 1400.5 or 1.1M (1153433.6 bytes) are refused rather than truncated."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise ValueError(f"expected a size such as 65536, 64K or 1M, got {shorten(value)}")
        digits, unit = match.groups()
        number = float(digits) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]
    else:  # never str() a list or mapping here: YAML aliases can make one of a billion elements
        raise ValueError("expected a size such as 65536, 64K or 1M")
    if not math.isfinite(number) or not number.is_integer():
        raise ValueError(f"expected a whole number of bytes, got {shorten(value)}")
    return int(number)


def shorten(value: Any, limit: int = 40) -> str:
    """repr() of a scalar a user wrote, cut short for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def whole_seconds(value: Any) -> Any:
    """Before-validator of a duration that iperf3 takes: it reads -t and -O as integers, so 2.9
    would run as 2 and 0.5 as 0, which iperf3 takes as "run forever"."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number of seconds, not true/false")
    if isinstance(value, float) and not value.is_integer():
        whole = f" (iperf3 would run {int(value)})" if math.isfinite(value) else ""
        raise ValueError(f"expected a whole number of seconds: iperf3 takes integers, got {value:g}{whole}")
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value  # pydantic says what a number looks like
        return whole_seconds(number)
    return value


# The largest socket buffer (iperf3 -w) the testbed asks for in a namespace: it writes
# net.core.rmem_max and wmem_max there (testbed/topology.py).
SOCKET_BUFFER_MAX = 64 * 1024 * 1024


def socket_buffer_limit() -> int | None:
    """The largest socket buffer a network namespace gets on this machine: the smaller of
    net.core.rmem_max and wmem_max, which a new namespace takes from the host's. (Linux, up to
    6.18 at least, does not let a namespace raise them: older kernels keep one global value,
    newer ones show it read-only inside a namespace, so the testbed's sysctl changes nothing.)
    Above it the kernel silently gives this much (with a 4M limit, iperf3 -w 6M gets what 4M
    gets), and above twice it iperf3 fails: "socket buffer size not set correctly". None if
    unreadable."""
    limits = []
    for key in ("rmem_max", "wmem_max"):
        try:
            limits.append(int(Path("/proc/sys/net/core", key).read_text()))
        except (OSError, ValueError):
            return None
    return min(limits)


Size = Annotated[int, Field(gt=0)]


def human_size(n: int) -> str:
    """65536 -> '64K', for labels."""
    for unit, size in (("M", 1024**2), ("K", 1024)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
