"""What each repetition's tunnel negotiated: per layer, the algorithms its driver declares and those
the live tunnel negotiated, stored with the repetition (raw output algorithms.TOOL); a difference
flags the sample. analyse/algorithms.py reads them back."""

from __future__ import annotations

import json
import subprocess

from ..algorithms import ALGORITHMS_DIFFER, TOOL, mismatches
from ..catalog import DRIVERS
from ..core.errors import VpnlabError


def record(stage, scenario, sample) -> None:
    """Declared and negotiated algorithms of every layer of this repetition's tunnel, stored with the
    repetition (raw output TOOL); a difference between the two flags the sample. Never fails the
    repetition: what cannot be read stays unknown."""
    layers = []
    for layer, (config, implementation, tunnel) in enumerate(zip(scenario.vpn.layers, scenario.implementations,
                                                                  stage.tunnels)):
        driver = DRIVERS[config.driver]
        declared = driver.algorithms(config.options, config.profile, implementation)
        try:
            negotiated = driver.negotiated(tunnel, config.options, config.profile)
        except (VpnlabError, subprocess.SubprocessError, OSError, ValueError) as exc:
            negotiated, error = None, str(exc)[:200]
        else:
            error = ""
        differ = mismatches(declared, negotiated)
        if differ:
            sample.flags.append(ALGORITHMS_DIFFER(f"layer {layer} ({config.driver}): {' / '.join(differ)}"))
        layers.append({"layer": layer, "driver": config.driver, "profile": config.profile,
                       "implementation": implementation,
                       "declared": declared.as_dict() if declared else None,
                       "negotiated": negotiated.as_dict() if negotiated else None,
                       **({"error": error} if error else {})})
    if layers:
        sample.raw[TOOL] = json.dumps(layers, sort_keys=True)
