"""Long-format export: one row per sample per metric, with the scenario's factors."""

from __future__ import annotations

import csv
import json
import sys
from typing import IO

from .store import Store

COLUMNS = [
    "scenario_id", "vpn", "vpn_label", "vpn_options", "implementation", "topology",
    "link_rate_mbit", "link_delay_ms", "link_jitter_ms", "link_loss_pct",
    "workload", "workload_params", "repetition", "metric", "value", "unit", "flags", "measured_at",
]


def rows(store: Store) -> list[dict]:
    scenarios = {s["id"]: s for s in store.scenarios()}
    out = []
    for sample in store.samples():
        sc = scenarios[sample["scenario_id"]]
        out.append({
            "scenario_id": sc["id"],
            "vpn": sc["vpn"],
            "vpn_label": sc["vpn_label"],
            "vpn_options": sc["vpn_options"],
            "implementation": sc["implementation"],
            "topology": sc["topology"],
            "link_rate_mbit": sc["link_rate_mbit"],
            "link_delay_ms": sc["link_delay_ms"],
            "link_jitter_ms": sc["link_jitter_ms"],
            "link_loss_pct": sc["link_loss_pct"],
            "workload": sc["workload"],
            "workload_params": sc["workload_params"],
            "repetition": sample["repetition"],
            "metric": sample["metric"],
            "value": sample["value"],
            "unit": sample["unit"],
            "flags": sample["flags"],
            "measured_at": sample["measured_at"],
        })
    return out


def write(store: Store, fmt: str, out: IO[str] = sys.stdout) -> int:
    data = rows(store)
    if fmt == "json":
        json.dump(data, out, indent=1)
        out.write("\n")
    else:
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
    return len(data)
