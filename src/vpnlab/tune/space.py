"""The search space: each driver's tunables (their product, as a spec narrows it) minus what the
constraints, the driver's own `check` and this machine refuse, each refusal with its reason."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from ..machines.capabilities import Capabilities
from ..catalog import DRIVERS
from ..drivers.base import SECURITY_CLASSES
from ..core.errors import CapabilityError
from ..plan.study import VpnConfig
from .spec import Constraints, SpaceEntry

RANK = {name: rank for rank, name in enumerate(SECURITY_CLASSES)}  # 0 strongest


@dataclass
class Space:
    candidates: list[VpnConfig] = field(default_factory=list)
    removed: Counter = field(default_factory=Counter)           # reason -> how many candidates it removed
    examples: dict[str, str] = field(default_factory=dict)      # reason -> the first candidate it removed

    def remove(self, label: str, reason: str) -> None:
        self.removed[reason] += 1
        self.examples.setdefault(reason, label)


def build_space(entries: list[SpaceEntry], constraints: Constraints, caps: Capabilities | None) -> Space:
    """Every candidate of the entries that the constraints, its driver and this machine (`caps`; None:
    not checked) allow, in the entries' order, without duplicates."""
    space, seen = Space(), set()
    profile = "fips" if constraints.security == "fips" else "default"
    for entry in entries:
        driver = DRIVERS[entry.driver]
        combinations = itertools.product(*[[(option, v) for v in values] for option, values in entry.values.items()])
        for combination in combinations:
            options = driver.Options.model_validate({k: v for k, v in combination if v is not None})
            config = VpnConfig(entry.driver, options, profile, driver.describe(options, profile))
            key = repr(config.as_dict())
            if key in seen:
                continue
            seen.add(key)
            reason = refusal(config, dict(combination), constraints, caps)
            if reason:
                space.remove(config.label, reason)
            else:
                space.candidates.append(config)
    return space


def refusal(config: VpnConfig, values: dict, constraints: Constraints, caps: Capabilities | None) -> str | None:
    """Why this candidate is not in the space, or None."""
    driver = DRIVERS[config.driver]
    if constraints.drivers is not None and config.driver not in constraints.drivers:
        return f"constraints.drivers: {config.driver} is not among them"
    floor = RANK[constraints.security]
    for tunable in driver.tunables:
        value = values.get(tunable.option)
        kind = tunable.security_of(value)
        if kind is not None and RANK[kind] > floor:
            return f"constraints.security {constraints.security}: {tunable.option} {value} is {kind}"
    problem = driver.check(config.options, config.profile)
    if problem:
        return f"{config.driver} refuses it: {problem}"
    if constraints.ciphers is not None:
        algorithms = driver.algorithms(config.options, config.profile)
        cipher = algorithms.data_cipher if algorithms else ""
        if cipher.upper() not in {c.upper() for c in constraints.ciphers}:
            return f"constraints.ciphers: {config.driver}'s data cipher {cipher} is not among them"
    if caps is not None:
        try:
            driver.resolve(config.options, caps)
        except CapabilityError as exc:
            return str(exc)  # "<driver>: cannot run here: ..."
    return None
