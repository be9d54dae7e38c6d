"""Long-format export: one row per sample per metric, with the scenario's factors."""

from __future__ import annotations

import csv
import json
import math
import sys
from typing import IO

from dataclasses import asdict

from ..analyse.analysed import Analysed
from ..analyse.compare import study_comparisons
from ..analyse.stopping import target_met
from ..core.flags import stored
from ..catalog import KINDS, metric as get_metric

# Every table names scenarios, VPNs, links and workloads the same way: scenario_id, vpn_label,
# link_label, workload_label (older columns stay, so scripts written for them keep working).
COLUMNS = [
    "scenario_id", "vpn", "vpn_label", "vpn_options", "implementation", "measured_in", "topology",
    "link_rate_mbit", "link_delay_ms", "link_jitter_ms", "link_loss_pct",
    "workload", "workload_params", "repetition", "metric", "value", "unit", "flags", "measured_at",
    "link_label", "workload_label",
    "run_link_rate_mbit", "run_link_delay_ms", "run_link_jitter_ms", "run_link_loss_pct", "run_workload_params",
    "round", "position",  # the round (block) the repetition ran in, which the paired tests pair on, and its place
    "pair",  # a mesh's: one pair's own value ("1->2"); blank: the sample's (for all pairs, their sum or mean)
    "hosts",  # real hosts: the inventory host of each role (JSON, {"client": "gw-a", ...}); blank: this machine
]
AS_RUN_UNRECORDED = dict.fromkeys(c for c in COLUMNS if c.startswith("run_"))  # a store from before vpnlab recorded it


def rows(analysed: Analysed) -> list[dict]:
    """Every sample's values, then each mesh pair's own (from the repetition's raw `pairs`)."""
    store = analysed.stored
    scenarios = {s.id: s for s in store.scenarios()}
    samples = store.samples()
    out = [_row(scenarios[sample.scenario_id], sample, sample.metric, sample.value, sample.unit, "")
           for sample in samples]
    of = {(sample.scenario_id, sample.repetition): sample for sample in samples}
    for scenario_id, repetition, pair, values in store.pair_values():
        sample = of[(scenario_id, repetition)]
        out += [_row(scenarios[scenario_id], sample, metric, value, get_metric(metric).unit, pair)
                for metric, value in sorted(values.items())]
    return out


def _row(sc, sample, metric: str, value: float, unit: str, pair: str) -> dict:
    return {
        "scenario_id": sc.id,
        "vpn": sc.vpn,
        "vpn_label": sc.vpn_label,
        "vpn_options": sc.vpn_options,
        "implementation": sc.implementation,
        "measured_in": sc.measured_in,
        "topology": sc.topology,
        "link_rate_mbit": sc.link_rate_mbit,
        "link_delay_ms": sc.link_delay_ms,
        "link_jitter_ms": sc.link_jitter_ms,
        "link_loss_pct": sc.link_loss_pct,
        "workload": sc.workload,
        "workload_params": sc.workload_params,
        "repetition": sample.repetition,
        "metric": metric,
        "value": value,
        "unit": unit,
        "flags": stored(sample.flags),
        "measured_at": sample.measured_at,
        "link_label": sc.link_label,
        "workload_label": sc.workload_label,
    } | as_run_columns(sc.as_run) | {"round": sample.round, "position": sample.position, "pair": pair,
                                           "hosts": sc.hosts}


def as_run_columns(as_run: str) -> dict:
    """The link and workload as run (the study's, unless emulation scaled them), as export columns."""
    if not as_run:
        return AS_RUN_UNRECORDED
    ran = json.loads(as_run)
    return {f"run_link_{key}": value for key, value in ran["link"].items()} | {
        "run_workload_params": json.dumps(ran["workload"], sort_keys=True)}


def summary_rows(analysed: Analysed) -> list[dict]:
    """One row per scenario and metric: n, mean, sd, 95% CI and its method, the value against no VPN
    with its interval, grade (or why there is none), outliers flagged."""
    scenarios = {s.id: s for s in analysed.scenarios}
    rule = analysed.study.repetitions
    out = []
    for sid, summaries in analysed.summaries.items():
        sc = scenarios[sid]
        primary = KINDS[sc.workload].primary if sc.workload in KINDS else None
        met = target_met(next((s for s in summaries if s.metric == primary), None), rule)
        for s in summaries:
            out.append({
                "scenario_id": sid, "vpn": sc.vpn, "vpn_label": sc.vpn_label,
                "implementation": sc.implementation, "measured_in": sc.measured_in, "link": sc.link_label,
                "workload": sc.workload_label,
                "metric": s.metric, "unit": s.unit, "n": s.n, "mean": s.mean, "sd": s.sd,
                "ci_low": s.ci_low, "ci_high": s.ci_high, "relative_to_no_vpn": s.relative,
                "relative_kind": s.relative_kind, "grade": s.grade, "flagged": s.flagged,
                "repetition_rule": sc.repetition_rule, "ci_target_met": met,
                "link_label": sc.link_label, "workload_label": sc.workload_label,
                "method": s.method, "interval_note": s.interval_note, "geometric_mean": s.geometric_mean,
                "relative_low": s.rel_low, "relative_high": s.rel_high, "relative_method": s.rel_method,
                "added": s.added, "added_low": s.added_low, "added_high": s.added_high,
                "added_method": s.added_method, "grade_reason": s.grade_reason, "outliers": s.outliers,
                "flagged_left_out": s.set_aside,
            } | as_run_columns(sc.as_run))
    return out


def comparison_rows(analysed: Analysed) -> list[dict]:
    """The comparisons; `p` is the primary test's two-sided p (`method` names it), also under its old
    name `welch_p` at the end, for scripts written before (the alias goes in a later release)."""
    return [_named_p(asdict(c)) for c in study_comparisons(analysed.stored, family=analysed.family)]


def _named_p(row: dict) -> dict:
    return {("p" if key == "welch_p" else key): value for key, value in row.items()} | {"welch_p": row["welch_p"]}


def finding_rows(analysed: Analysed) -> list[dict]:
    """A seed study's findings, one row each: its verdict and what a reader needs to recompute it from the
    samples table alone: each side's scenarios (averaged per round over the rounds all of them completed),
    the metric, the direction and margin, the seed's B/A, whether the test paired rounds, its p and Holm's
    (over the findings whose holm_family_size is not 0). docs/seeds.md shows how, with scipy."""
    section = analysed.against
    return [] if section is None else [_finding_row(j) for j in section.rows]


def _finding_row(j) -> dict:
    f = j.finding
    return {
        "finding_id": f.id, "verdict": j.verdict, "metric": j.metric, "scale": j.scale,
        "direction": f.direction, "margin_pct": f.margin_pct, "seed_ratio": f.seed_ratio,
        "a_scenarios": " ".join(j.a_ids), "b_scenarios": " ".join(j.b_ids), "a_label": j.a_label,
        "b_label": j.b_label, "per_link_rate": f.per_link_rate, "paired": j.paired, "n_a": j.n_a, "n_b": j.n_b,
        "estimate": j.estimate, "low": j.low, "high": j.high, "method": j.method, "p": j.p, "holm_p": j.holm_p,
        "tost_holm_p": j.tost_holm_p, "holm_family_size": j.family_size, "measured_in": j.measured_in,
        "emulated": j.emulated, "reason": j.reason, "changed": j.changed,
    }


TABLES = {"samples": rows, "summary": summary_rows, "comparisons": comparison_rows, "findings": finding_rows}


def strict(data):
    """What JSON can say: a number that is not finite (an interval of one sample, a ratio to a
    zero baseline) becomes null, as strict JSON has no NaN or Infinity (and an empty CSV cell)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: strict(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict(value) for value in data]
    return data


def write(analysed: Analysed, fmt: str, out: IO[str] = sys.stdout, table: str = "samples") -> int:
    """One table of an analysed results directory (analysed.py) as CSV or JSON; the rows written."""
    data = TABLES[table](analysed)
    if fmt == "json":
        json.dump(strict(data), out, indent=1, allow_nan=False)
        out.write("\n")
    else:
        fields = COLUMNS if table == "samples" else (list(data[0]) if data else [])
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(strict(data))  # a number that is not finite is an empty cell, not "nan"
    return len(data)
