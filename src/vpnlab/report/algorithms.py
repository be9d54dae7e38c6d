"""The report's "Algorithms per profile" table: per configuration and layer, what its cryptography
was (analyse/algorithms.py gathers it), and what each driver's `fips` profile changed."""

from __future__ import annotations

from dataclasses import dataclass

from ..algorithms import HEADINGS
from ..analyse.algorithms import configurations, profile_changes, read, without_profile


@dataclass
class Section:
    headings: list
    rows: list          # {"vpn", "layer", "profile", "cells", "source", "read"}
    changes: list       # sentences: what each fips profile changed against default



def table(store, scenarios, labels) -> Section | None:
    """The report's "Algorithms per profile": per configuration and layer, the negotiated algorithms
    (declared ones where none were read, marked), and what each profile changed."""
    records = read(store)
    configs = configurations(scenarios, records, labels)
    if not configs:
        return None
    rows = []
    order = sorted(configs.items(), key=lambda kv: (kv[1][0].vpn, without_profile(kv[1][0].config),
                                                    kv[1][0].profile != "default", kv[0]))
    for label, (sc, layers) in order:
        for i, layer in enumerate(layers):
            where = "" if len(layers) == 1 else ("outer" if i == 0 else "inner") + f" ({layer.driver})"
            rows.append({"vpn": label, "layer": where, "profile": layer.profile,
                         "cells": [layer.cell(k) for k in HEADINGS],
                         "source": ", ".join(sorted(layer.sources)) or "declared only",
                         "read": f"{layer.read}/{layer.total}" if layer.total else "-"})
    return Section(list(HEADINGS.values()), rows, profile_changes(dict(order)))
