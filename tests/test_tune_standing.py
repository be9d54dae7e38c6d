"""The race replayed from a results store (what a resumed race decides by) and its answer, on a
store filled with values of known truth (no tunnel: the statistics and the bookkeeping only)."""

from __future__ import annotations

import math

import numpy as np

from vpnlab.plan.scenarios import make_plan
from vpnlab.store import Store
from vpnlab.plan.study import parse_study
from vpnlab.tune.answer import answer, figure, text
from vpnlab.tune.design import RaceDesign, race_study_yaml
from vpnlab.tune.race import EQUIVALENT, ONE_LEFT, race
from vpnlab.tune.runner import OUT_OF_TIME, RaceRunner, standing_of
from vpnlab.tune.space import build_space
from vpnlab.tune.spec import parse_spec

SPEC = ("link: {rate_mbit: 50}\ntraffic: {workload: {kind: tcp, duration_s: 3}}\nspace: [{driver: openvpn, cipher: "
        "[AES-128-GCM, CHACHA20-POLY1305, AES-256-CBC], transport: udp, mtu: null, socket_buffer: null, auth: null}]\n")
TRUE = {"openvpn aes-128-gcm udp": 45.0, "openvpn chacha20-poly1305 udp": 44.8, "openvpn aes-256-cbc-sha1 udp": 30.0,
        "none": 47.7}


def _filled(tmp_path, rounds: int, seed: int = 0, truth: dict = TRUE):
    spec = parse_spec(SPEC)
    candidates = build_space(spec.space, spec.constraints, None).candidates
    plan = make_plan(parse_study(race_study_yaml(spec, candidates, 10)))
    baseline = next(s for s in plan.scenarios if s.vpn.is_baseline)
    design = RaceDesign("throughput_mbps", True, 0.05, 0.02, 3, 10, 3600, {"cpu_s_per_gb": 200.0},
                        [s.id for s in plan.scenarios if s is not baseline], baseline.id)
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="test", kernel="test", hostname="test", capabilities={}, tool_versions={},
                          study_name="t", study_text=plan.study.source_text)
    rng = np.random.default_rng(seed)
    for scenario in plan.scenarios:
        store.add_scenario(scenario)
    for round_no in range(1, rounds + 1):
        drift = rng.normal(0, 0.05)
        for scenario in plan.scenarios:
            value = truth[scenario.vpn_label] * math.exp(drift + rng.normal(0, 0.005))
            cpu = 80.0 if "chacha" in scenario.vpn_label else 100.0
            store.record_repetition(run, scenario.id, round_no, {"throughput_mbps": value, "cpu_s_per_gb": cpu,
                                                                 "setup_s": 0.2}, {}, [], round_no, 0)
    return store, plan, design


def test_the_stored_race_replays_as_the_race_does_and_drops_the_clear_loser(tmp_path):
    store, plan, design = _filled(tmp_path, rounds=4)
    standing = standing_of(store, design)
    labels = {s.id: s.vpn_label for s in plan.scenarios}
    assert [labels[c] for c in standing.dropped] == ["openvpn aes-256-cbc-sha1 udp"]
    z = np.log([[store.values_by_round(c, "throughput_mbps")[r] for r in range(1, 5)] for c in design.candidates])
    assert race(z, design.rules(), design.candidates).dropped == standing.dropped


def test_the_runner_measures_only_survivors_and_the_baseline_until_the_race_ends(tmp_path):
    store, plan, design = _filled(tmp_path, rounds=4)
    runner = RaceRunner(plan, tmp_path, caps=None, design=design, progress=False)
    left = {s.vpn_label: runner._left(store, s) for s in plan.scenarios}
    assert left == {"none": 6, "openvpn aes-128-gcm udp": 6, "openvpn chacha20-poly1305 udp": 6,
                    "openvpn aes-256-cbc-sha1 udp": 0}
    notes = {row.vpn_label: row.notes for row in store.scenarios()}  # a resumed race notes what its rounds decided
    assert "dropped by the race after round 3" in notes["openvpn aes-256-cbc-sha1 udp"]
    assert "dropped" not in notes["openvpn aes-128-gcm udp"]
    store.add_note(design.baseline, OUT_OF_TIME)  # as _round_ended notes a budget whose time is spent
    runner._standing = None
    assert all(runner._left(store, s) == 0 for s in plan.scenarios)


def test_the_answer_ranks_equivalent_survivors_and_gives_settings_and_a_figure(tmp_path):
    store, plan, design = _filled(tmp_path, rounds=10)
    standing = standing_of(store, design)
    result = answer(store, design, standing, plan.scenarios)
    labels = {s.id: s.vpn_label for s in plan.scenarios}
    assert standing.stop == EQUIVALENT  # 0.4% apart, within the 2% margin
    # equivalent: ranked by CPU per GB, not by throughput (aes-128-gcm's is higher)
    assert [f.scenario.vpn_label for f in result.finalists] == ["openvpn chacha20-poly1305 udp", "openvpn aes-128-gcm udp"]
    best = result.finalists[0]
    assert best.against_none.estimate < 1 and best.against_none.low < best.against_none.estimate < best.against_none.high
    said = text(result, labels)
    assert "data-ciphers" in said and "Dropped:" in said and "openvpn aes-256-cbc-sha1 udp" in said
    assert figure(standing, labels, design, tmp_path / "race.png").stat().st_size > 1000


def test_a_lone_survivor_is_the_winner(tmp_path):
    store, plan, design = _filled(tmp_path, rounds=6, truth=TRUE | {"openvpn chacha20-poly1305 udp": 35.0})
    standing = standing_of(store, design)
    assert standing.stop == ONE_LEFT and len(standing.survivors) == 1
    result = answer(store, design, standing, plan.scenarios)
    assert [f.scenario.vpn_label for f in result.finalists] == ["openvpn aes-128-gcm udp"]
