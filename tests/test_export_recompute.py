"""A reviewer can recompute every exported comparison from the exported samples alone: the samples
carry each repetition's round (the paired test's block) and position, and the comparisons' `p` (alias
`welch_p`) is the primary test's p, recomputed here with scipy."""

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from vpnlab.report import export
from vpnlab.analyse.analysed import Analysed, analyse
from vpnlab.analyse.analysis import MIN_BLOCKS
from vpnlab.plan.scenarios import make_plan
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

STUDY = """
name: e
repetitions: 6
vpns: [{driver: none}, {driver: openvpn, options: {cipher: [AES-128-GCM, AES-256-GCM, CHACHA20-POLY1305]}}]
links: [{name: lan, rate_mbit: 100}]
workloads: [{kind: tcp}, {kind: ping}]
"""


def store_with_rounds(tmp_path, skip=None):
    """Lognormal values with a shared round effect; `skip`: (scenario index, round) left unmeasured,
    so its pairs are tested on the rounds both completed."""
    rng = np.random.default_rng(5)
    plan = make_plan(parse_study(STUDY))
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="e", study_text=STUDY)
    for scenario in plan.scenarios:
        store.add_scenario(scenario)
    for round_no in range(1, 7):
        shared = rng.normal(0, 0.05)
        for position, s in enumerate(plan.scenarios):
            if skip == (s.index, round_no):
                continue
            centre = {"tcp": 90.0, "ping": 1.2}[s.workload.kind] * (1 + 0.03 * s.index)
            metric = {"tcp": "throughput_mbps", "ping": "rtt_avg_ms"}[s.workload.kind]
            store.record_repetition(run, s.id, round_no, {metric: centre * math.exp(shared + rng.normal(0, 0.02))},
                                    {}, [], round_no, position)
    for scenario in plan.scenarios:
        store.set_status(scenario.id, "done")
    return store


def exported(store, table: str) -> list[dict]:
    out = io.StringIO()
    export.write(Analysed.of(store), "csv", out, table)
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def recompute(samples: list[dict], row: dict) -> tuple[float, float, bool]:
    """(p, B/A) of one comparison from the samples: the paired t on log(B/A) over the rounds both
    completed, when they share at least MIN_BLOCKS (analysis.matched), else Welch's t on the logs."""
    def side(scenario):
        return {int(s["round"]): float(s["value"]) for s in samples
                if s["scenario_id"] == scenario and s["metric"] == row["metric"]}
    a, b = side(row["scenario_a"]), side(row["scenario_b"])
    shared = sorted(a.keys() & b.keys())
    if len(shared) >= MIN_BLOCKS:
        diff = [math.log(b[r]) - math.log(a[r]) for r in shared]
        return stats.ttest_1samp(diff, 0).pvalue, math.exp(np.mean(diff)), True
    la, lb = np.log(list(a.values())), np.log(list(b.values()))
    return stats.ttest_ind(lb, la, equal_var=False).pvalue, math.exp(lb.mean() - la.mean()), False


@pytest.mark.parametrize("skip", [None, (2, 3)])
def test_every_exported_comparison_is_recomputed_from_the_exported_samples(tmp_path, skip):
    store = store_with_rounds(tmp_path, skip)
    try:
        samples, comparisons = exported(store, "samples"), exported(store, "comparisons")
    finally:
        store.close()
    assert comparisons and all(s["round"] and s["position"] for s in samples)
    for row in comparisons:
        p, ratio, paired = recompute(samples, row)
        assert row["p"] == row["welch_p"]                         # the old name, kept as an alias
        assert float(row["p"]) == pytest.approx(p, rel=1e-6), row
        assert 100 * (ratio - 1) == pytest.approx(float(row["relative_diff_pct"]), rel=1e-6, abs=1e-9)
        assert (row["paired"] == "True") == paired


SEEDS_DOC = Path(__file__).parents[1] / "docs" / "seeds.md"
RUNS = Path(__file__).parents[1] / "runs"


def recompute_block() -> str:
    """docs/seeds.md's recomputation, as a reader would copy it."""
    text = SEEDS_DOC.read_text()
    start = text.index("```python\n", text.index("**Recompute a verdict from the export alone.**")) + len("```python\n")
    return text[start:text.index("```", start)]


@pytest.mark.parametrize("run", ["small-business-2011", "taneja-2019"])
def test_the_seed_docs_recompute_every_compared_finding_from_the_export(tmp_path, monkeypatch, run):
    """small-business-2011 has findings per Mbit/s of link and a side averaging nine cells; taneja-2019
    a Holm family of 40. Every compared finding's estimate and Holm-adjusted p come out as vpnlab's."""
    analysed = analyse(RUNS / run)
    for table, name in (("samples", "samples.csv"), ("findings", "findings.csv")):
        with open(tmp_path / name, "w") as fh:
            export.write(analysed, "csv", fh, table)
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(recompute_block(), str(SEEDS_DOC), "exec"), names)
    family = names["family"]
    assert len(family) >= 10 and (family.holm_family_size == len(family)).all()
    assert np.allclose(family.estimate_here, family.estimate, rtol=1e-9)
    assert np.allclose(family.holm_p_here, family.holm_p, rtol=1e-9)
    if run == "small-business-2011":
        assert family.per_link_rate.any() and (family.a_scenarios.str.split().str.len() > 1).any()
