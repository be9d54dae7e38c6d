"""`vpnlab tune`'s field checks without a testbed: the spec's `constraints.field` parsed and refused with
exit 2 naming the field before anything is created; each check as a study of the candidates, kept in
race.json; and the drop decision (which check, the value measured, how many each candidate passed) on a
store filled with values of known truth."""

from __future__ import annotations

import json
import math

import pytest
from rich.console import Console

from conftest import our_namespaces
from test_tune_spec import _tune
from vpnlab.core.errors import StudyError
from vpnlab.machines.capabilities import Capabilities
from vpnlab.plan.study import parse_study
from vpnlab.run.runner import Progressor
from vpnlab.store import Store
from vpnlab.tune.answer import answer, text
from vpnlab.tune.design import RaceDesign, design, expected_s
from vpnlab.tune.field import NAMED, Requirement, requirements, verdict
from vpnlab.tune.race import NONE_LEFT, ONE_LEFT
from vpnlab.tune.runner import RaceRunner, standing_of
from vpnlab.tune.space import build_space
from vpnlab.tune.spec import parse_spec

TRAFFIC = ("link: {rate_mbit: 50}\ntraffic: {workload: {kind: udp, rate_mbit: 2, size: 1200, duration_s: 1}, "
           "metric: wan_bytes_per_byte}\n")
KEEPALIVES = "space: [{driver: wireguard, mtu: null, implementation: wireguard-go, persistent_keepalive_s: [0, 2]}]\n"
REACH = "{link: {nat: masquerade, nat_udp_timeout_s: 4}, workload: {kind: reach, idle_s: 6, wait_s: 2}, require: reachable}"
SPEC = TRAFFIC + KEEPALIVES + f"constraints: {{field: [{REACH}]}}\nbudget: 5m\n"
ISSUE = """\
constraints:
  field:
    - {link: {mtu: 1400, icmp: blocked}, workload: {kind: path-mtu}, require: no-black-hole}
    - {link: {nat: masquerade, nat_udp_timeout_s: 30}, workload: {kind: reach, idle_s: 60}, require: reachable}
    - workload: {kind: ping, count: 300, interval_s: 0.02, events: [{at_s: 2, address_change: true}]}
      require: [{recovers_within_s: 5}, survives]
      repetitions: 2
"""
CAPS = Capabilities(kernel="test", features={"netns": True, "veth": True, "tun": True, "tbf": True, "nat-timeout": True},
                    tools={t: "/x" for t in ("wg", "wireguard-go", "nft", "ping", "ip", "iperf3", "python3")})


def test_the_issues_checks_parse_each_on_the_specs_link_changed():
    spec = parse_spec(TRAFFIC + KEEPALIVES + ISSUE)
    mtu, nat, roam = spec.checks
    assert [c.where for c in spec.checks] == [f"constraints.field[{i}]" for i in range(3)]
    assert (mtu.link.rate_mbit, mtu.link.mtu, mtu.link.icmp) == (50, 1400, "blocked")
    assert (nat.link.nat, nat.link.nat_udp_timeout_s, nat.workload.idle_s) == ("masquerade", 30, 60)
    assert roam.link == spec.link and roam.repetitions == 2
    assert [r.name for r in roam.requirements] == ["recovers within 5 s", "survives"]
    assert roam.label == "recovers within 5 s, survives: ping-56B+address-change@2 on 50mbit"
    assert requirements([r.as_written for r in roam.requirements]) == roam.requirements
    assert parse_spec(TRAFFIC + KEEPALIVES).checks == ()


def field(*checks: str) -> str:
    return TRAFFIC + KEEPALIVES + "constraints:\n  field:\n" + "".join(f"    - {c}\n" for c in checks)


PING = "workload: {kind: ping, count: 100, interval_s: 0.05}"
EVENTS = "workload: {kind: ping, count: 100, interval_s: 0.05, events: [{at_s: 2, link_down_s: 1}]}"


@pytest.mark.parametrize("text, expect", [
    (field(f"{{{PING}, require: fast}}"), "constraints.field[0].require: unknown requirement 'fast'; one of "
                                          "no-black-hole, reachable, recovers, survives, {recovers_within_s: SECONDS}"),
    (field(f"{{{PING}, require: []}}"), "constraints.field[0].require: an empty list"),
    (field(f"{{{PING}, require: {{recovers_after_s: 5}}}}"), "constraints.field[0].require: unknown requirement"),
    (field(f"{{{EVENTS}, require: {{recovers_within_s: 0}}}}"), "constraints.field[0].require: recovers_within_s: "
                                                                "expected seconds above 0 and at most 10"),
    (field(f"{{{EVENTS}, require: {{recovers_within_s: 11}}}}"), "recovers_within_s: expected seconds above 0"),
    (field(f"{{{EVENTS}, require: {{recovers_within_s: true}}}}"), "recovers_within_s: expected seconds"),
    (field(f"{{{PING}, require: no-black-hole}}"), "constraints.field[0].require: no-black-hole reads bulk_completed, "
                                                   "bulk_stalled, which a path-mtu workload records, not a ping one"),
    (field(f"{{{PING}, require: reachable}}"), "constraints.field[0].require: reachable reads far_reachable, which a "
                                               "reach workload records"),
    (field(f"{{{PING}, require: recovers}}"), "constraints.field[0].require: recovers reads recovered, what a "
                                              "workload's events measure, and this check's ping workload has no events"),
    (field(f"{{{PING}, require: {{recovers_within_s: 5}}}}"), "constraints.field[0].require: recovers within 5 s"),
    (field(f"{{link: {{mtu: 500}}, {PING.replace('ping,', 'path-mtu,')}, require: no-black-hole}}"),
     "constraints.field[0].link.mtu: Input should be greater than or equal to 576"),
    (field(f"{{link: {{nat_udp_timeout_s: 30}}, {EVENTS}, require: recovers}}"),
     "constraints.field[0].link: nat_udp_timeout_s: a NAT's UDP timeout needs nat: masquerade"),
    (field(f"{{link: {{nat: masquerade, nat_udp_timeout_s: 4000}}, {EVENTS}, require: recovers}}"),
     "constraints.field[0].link.nat_udp_timeout_s: Input should be less than or equal to 3600"),
    (field("{workload: {kind: reach, idle_s: -1}, require: reachable}"), "constraints.field[0].workload.idle_s"),
    (field("{workload: {kind: teleport}, require: reachable}"), "constraints.field[0].workload: unknown kind"),
    (field("{require: reachable}"), "constraints.field[0].workload: Field required"),
    (field(f"{{{EVENTS}, require: recovers, repetitions: 0}}"), "constraints.field[0].repetitions"),
    (field(f"{{{EVENTS}, require: recovers, colour: red}}"), "constraints.field[0].colour: unknown field"),
    (field("{workload: {kind: ping, count: 20, interval_s: 0.05, events: [{at_s: 9, address_change: true}]}, "
           "require: recovers}"), "constraints.field[0].workload.events[0].at_s: 9 s is past the workload's end"),
    (field("{workload: {kind: ping, count: 100, interval_s: 0.05, events: [{at_s: 2, nat_rebind: true}]}, "
           "require: recovers}"), "constraints.field[0].workload.events[0].nat_rebind: acts on the client side's NAT, "
                                  "and this check's link has none"),
    (field("{workload: {kind: ping, count: 100, interval_s: 0.05, events: [{at_s: 2, rekey: true}]}, require: recovers}"),
     "constraints.field[0].workload.events: a rekey, and space[0] (wireguard) offers no way to force one here"),
    (field(f"{{link: {{nat: masquerade}}, {EVENTS}, require: recovers}}",
           f"{{link: {{nat: masquerade}}, {EVENTS}, require: survives}}"),
     "constraints.field[1]: the same link and workload as constraints.field[0], so the same scenarios; give both "
     "requirements in one check's require (a list)"),
    (f"link: {{rate_mbit: 50}}\ntraffic: {{{EVENTS}}}\n{KEEPALIVES}constraints: {{field: [{{{EVENTS}, require: recovers}}]}}",
     "constraints.field[0]: the same link and workload as traffic, so the same scenarios; a check measures another"),
    (field(f"{{link: {{mtu: 1400}}, {EVENTS}, require: recovers}}") + "hosts: {client: a, gateway: b}\n",
     "constraints.field[0].link.mtu: only on this machine's testbed"),
    (field(f"{{{EVENTS}, require: recovers}}") + "hosts: {client: a, gateway: b}\n",
     "constraints.field[0].workload.events: events happen to the WAN of this machine's testbed"),
])
def test_bad_field_checks_name_the_field(text, expect):
    with pytest.raises(StudyError) as caught:
        parse_spec(text, "spec.yaml")
    assert expect in " ".join(str(caught.value).split()), caught.value


def test_a_bad_check_and_a_bad_traffic_are_both_reported():
    with pytest.raises(StudyError) as caught:
        parse_spec(field(f"{{{PING}, require: reachable}}").replace("rate_mbit: 2,", "rate_mbit: -2,"), "spec.yaml")
    assert "traffic.workload.rate_mbit" in str(caught.value) and "constraints.field[0].require" in str(caught.value)


@pytest.mark.parametrize("text, field_name", [
    (field(f"{{{PING}, require: no-black-hole}}"), "constraints.field[0].require: no-black-hole reads"),
    (field(f"{{link: {{icmp: sometimes}}, {EVENTS}, require: recovers}}"), "constraints.field[0].link.icmp"),
])
def test_the_cli_refuses_a_bad_check_with_exit_2_and_creates_nothing(tmp_path, text, field_name):
    namespaces = our_namespaces()
    done = _tune(tmp_path, text, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert field_name in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() and our_namespaces() <= namespaces


def test_the_dry_run_counts_the_checks_time(tmp_path):
    done = _tune(tmp_path, SPEC, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "wireguard keepalive-2s wireguard-go" in done.stdout and "Nothing was created" in done.stdout
    said = " ".join(done.stdout.split())
    assert "1 field checks, before the first round" in said and "constraints.field[0]" in said
    assert "reachable: reach-after-6s" in said


def _designed():
    spec = parse_spec(SPEC)
    candidates = build_space(spec.space, spec.constraints, None).candidates
    return spec, candidates, *design(spec, candidates)


def test_each_check_is_a_study_of_the_candidates_kept_in_race_json_and_paid_from_the_budget(tmp_path):
    spec, candidates, plan, race = _designed()
    (check,) = race.checks
    study = parse_study(check.study)
    assert [v.label for v in study.vpns] == [c.label for c in candidates]  # no baseline: nothing to compare
    assert (study.links[0].label, study.workloads[0].label) == ("50mbit-nat4s", "reach-after-6s")
    assert len(check.scenarios) == len(race.candidates) == 2 and not set(check.scenarios) & set(race.candidates)
    assert check.require == ["reachable"] and check.estimate_s == pytest.approx(2 * (2.5 + 6 + 2))
    round_s = sum(s.estimate_s(repetitions=1) for s in plan.scenarios)
    assert race.max_rounds == math.floor((300 - check.estimate_s) / round_s)
    worst, _ = expected_s(plan, race)
    assert worst == pytest.approx(check.estimate_s + round_s * race.max_rounds)
    race.save(tmp_path)
    assert RaceDesign.load(tmp_path) == race
    assert json.loads((tmp_path / "race.json").read_text())["checks"][0]["where"] == "constraints.field[0]"


def test_a_budget_the_checks_leave_too_little_of_is_refused_saying_so():
    spec = parse_spec(SPEC.replace("budget: 5m", "budget: 40s"))
    with pytest.raises(StudyError, match=r"allows 1 round\(s\) .* after the field checks \(about 21 s\), fewer than"):
        design(spec, build_space(spec.space, spec.constraints, None).candidates)


# --- the drop decision ---------------------------------------------------------------------------

@pytest.mark.parametrize("requirement, values, failure", [
    (NAMED["no-black-hole"], {"bulk_completed": 1.0, "bulk_stalled": 0.0}, None),
    (NAMED["no-black-hole"], {"bulk_completed": 0.0, "bulk_stalled": 1.0}, "bulk_completed 0"),
    (NAMED["no-black-hole"], {"bulk_completed": 1.0, "bulk_stalled": 1.0}, "bulk_stalled 1"),
    (NAMED["reachable"], {"far_reachable": 0.0}, "far_reachable 0"),
    (NAMED["reachable"], {}, "no far_reachable measured"),
    (NAMED["survives"], {"workload_survived": 0.0, "recovered": 1.0}, "workload_survived 0"),
    (requirements({"recovers_within_s": 5})[0], {"recovered": 1.0, "address_change_recovery_s": 4.9}, None),
    (requirements({"recovers_within_s": 5})[0], {"recovered": 1.0, "address_change_recovery_s": 7.31},
     "address_change_recovery_s 7.31 s, above 5 s"),
    (requirements({"recovers_within_s": 5})[0], {"recovered": 0.0, "outage_recovery_s": 1.0}, "recovered 0"),
])
def test_a_requirement_names_the_value_that_fails_it(requirement: Requirement, values, failure):
    assert requirement.failure(values) == failure


def test_a_check_passes_only_when_every_repetition_passes_every_requirement():
    needed = requirements(["recovers", "survives"])
    good, broken = {"recovered": 1.0, "workload_survived": 1.0}, {"recovered": 1.0, "workload_survived": 0.0}
    assert verdict(needed, [good, good]) is None
    assert verdict(needed, [good, broken, broken]) == "survives: workload_survived 0 (in 2 of 3 repetitions)"
    assert verdict(needed, []) == "no repetition measured it"


def _store(tmp_path, reachable: dict[int, float], race_rounds: int):
    """A race's store with the reach check of candidates (by their number: far_reachable), then the race's
    rounds of no VPN and the candidates that passed (wan bytes per byte)."""
    _, candidates, plan, race = _designed()
    runner = RaceRunner(plan, tmp_path, CAPS, race, progress=False)
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="test", kernel="test", hostname="test", capabilities={}, tool_versions={},
                          study_name="t", study_text=plan.study.source_text)
    for scenario in runner.plan.scenarios:
        store.add_scenario(scenario)
    for n, value in reachable.items():
        store.record_repetition(run, race.checks[0].scenarios[n], 1, {"far_reachable": value}, {}, [], 1, n)
        store.set_status(race.checks[0].scenarios[n], "done")
    racing = [race.baseline] + [race.candidates[n] for n, value in reachable.items() if value]
    for round_no in range(2, race_rounds + 2):
        for position, scenario_id in enumerate(racing):
            store.record_repetition(run, scenario_id, round_no - 1, {"wan_bytes_per_byte": 1.05 + 0.01 * position},
                                    {}, [], round_no, position)
    return store, runner, plan, race


def test_a_candidate_that_fails_a_check_is_dropped_before_the_first_round_with_the_value(tmp_path):
    store, runner, plan, race = _store(tmp_path, {0: 0.0, 1: 1.0}, race_rounds=0)
    without, keepalive = race.candidates
    standing = standing_of(store, race)
    assert standing.survivors == [keepalive] and standing.dropped[without].look == 0
    assert standing.dropped[without].reason == ("field check constraints.field[0] (reachable: reach-after-6s on "
                                                "50mbit-nat4s) failed: reachable: far_reachable 0")
    left = {s.vpn_label: runner._left(store, s) for s in runner.plan.scenarios if s.id not in runner.check_ids}
    assert left == {"none": race.max_rounds, "wireguard wireguard-go": 0, "wireguard keepalive-2s wireguard-go":
                    race.max_rounds}
    notes = {row.id: row.notes for row in store.scenarios()}
    assert "dropped by the race before the first round: field check constraints.field[0]" in notes[without]


def test_the_checks_run_before_the_race_and_a_resumed_race_has_them(tmp_path):
    store, runner, plan, race = _store(tmp_path, {0: 0.0}, race_rounds=0)  # one check measured, one to go
    assert len(runner.plan.scenarios) == len(plan.scenarios) + 2
    check_left = [runner._left(store, s) for s in runner.plan.scenarios if s.id in runner.check_ids]
    assert check_left == [0, 1] and not standing_of(store, race).stop
    race.save(tmp_path)
    resumed = RaceRunner(plan, tmp_path, CAPS, RaceDesign.load(tmp_path), progress=False)
    assert resumed.check_ids == runner.check_ids


def test_the_answer_says_how_many_checks_each_candidate_passed(tmp_path):
    store, runner, plan, race = _store(tmp_path, {0: 0.0, 1: 1.0}, race_rounds=3)  # to the first look
    standing = standing_of(store, race)
    assert standing.stop == ONE_LEFT
    result = answer(store, race, standing, runner.plan.scenarios)
    said = text(result, {s.id: s.vpn_label for s in runner.plan.scenarios})
    assert "Use wireguard keepalive-2s wireguard-go: every other candidate failed a field check." in said
    assert "1. wireguard keepalive-2s wireguard-go:" in said and "passed 1 of 1 field checks" in said
    assert "PersistentKeepalive = 2" in said
    assert ("before the first round: wireguard wireguard-go: field check constraints.field[0] (reachable: "
            "reach-after-6s on 50mbit-nat4s) failed: reachable: far_reachable 0 (passed 0 of 1 field checks)") in said


def test_when_no_candidate_passes_the_race_ends_before_its_first_round(tmp_path):
    store, runner, plan, race = _store(tmp_path, {0: 0.0, 1: 0.0}, race_rounds=0)
    standing = standing_of(store, race)
    assert standing.stop == NONE_LEFT and standing.survivors == [] and standing.looks == 0
    assert all(runner._left(store, s) == 0 for s in runner.plan.scenarios)


def test_a_check_this_machine_cannot_run_fails_its_scenarios_before_they_start(tmp_path):
    _, _, plan, race = _designed()
    caps = Capabilities(kernel="test", features=CAPS.features | {"nat-timeout": False}, tools=CAPS.tools)
    runner = RaceRunner(plan, tmp_path, caps, race, progress=False)
    assert set(runner.refused) == runner.check_ids
    assert all("this machine cannot run this field check: a namespace's own UDP NAT timeout" in why
               for why in runner.refused.values())


def test_the_race_rounds_start_after_the_checks_settled_without_what_they_dropped(tmp_path):
    """The runner's rounds with each repetition's measurement faked (the check's truth by candidate):
    the candidate that failed its check never runs in the race."""
    _, _, plan, race = _designed()
    runner = RaceRunner(plan, tmp_path, CAPS, race, progress=False)
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="test", kernel="test", hostname="test", capabilities={}, tool_versions={},
                          study_name="t", study_text=plan.study.source_text)
    for scenario in runner.plan.scenarios:
        store.add_scenario(scenario)
    reachable = dict(zip(race.checks[0].scenarios, (0.0, 1.0)))

    def measured(store, state, run_id, scenario, round_no, position, progress):
        values = {"far_reachable": reachable[scenario.id]} if scenario.id in reachable else {"wan_bytes_per_byte": 1.05}
        store.record_repetition(run_id, scenario.id, len(store.attempts(scenario.id)) + 1, values, {}, [], round_no,
                                position)

    runner._repetition = measured
    runner._rounds(store, None, run, runner.plan.scenarios, Progressor(Console(quiet=True), 0, enabled=False))
    ran = {row.vpn_label + (" check" if row.id in reachable else ""): len(store.done_repetitions(row.id))
           for row in store.scenarios()}
    assert ran == {"wireguard wireguard-go check": 1, "wireguard keepalive-2s wireguard-go check": 1,
                   "none": race.min_rounds, "wireguard wireguard-go": 0,
                   "wireguard keepalive-2s wireguard-go": race.min_rounds}
    assert standing_of(store, race).stop == ONE_LEFT
