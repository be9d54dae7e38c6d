"""`vpnlab tune`'s spec, space and design: bad specs refused with exit 2 naming the field before
anything starts, the space as the drivers' tunables minus what the constraints refuse, and the
dry run's candidates, removals and times."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import our_namespaces
from vpnlab.machines.capabilities import Capabilities
from vpnlab.core.errors import StudyError
from vpnlab.plan.study import parse_study
from vpnlab.tune.design import design, expected_s, race_study_yaml
from vpnlab.tune.space import build_space
from vpnlab.tune.spec import parse_duration, parse_spec

TCP = "link: {rate_mbit: 50}\ntraffic: {workload: {kind: tcp, duration_s: 3}}\n"
SMALL_SPACE = TCP + "space: [{driver: openvpn, cipher: [AES-128-GCM, CHACHA20-POLY1305], mtu: null, socket_buffer: null}]\n"


def test_a_spec_takes_the_workloads_primary_metric_and_its_direction_by_default():
    spec = parse_spec(TCP)
    assert (spec.metric, spec.higher_is_better, spec.budget_s) == ("throughput_mbps", True, 1800)
    named = parse_spec(TCP.replace("duration_s: 3}", "duration_s: 3}, metric: wan_bytes_per_byte"))
    assert (named.metric, named.higher_is_better) == ("wan_bytes_per_byte", False)
    assert parse_spec(SMALL_SPACE, budget="1h30m").budget_s == 5400


@pytest.mark.parametrize("value, seconds", [("30m", 1800), ("1h30m", 5400), ("90s", 90), (45, 45), ("2 min", 120)])
def test_durations_read_as_people_write_them(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("text, field", [
    (TCP + "space: [{driver: openvpn, colour: blue}]\n", "space[0].colour: openvpn has no tunable 'colour'"),
    (TCP + "space: [{driver: nebulous}]\n", "space[0].driver: unknown VPN driver"),
    (TCP + "space: [{driver: none}]\n", "space[0].driver: 'none' is the no-VPN baseline"),
    (TCP + "space: [{driver: openvpn, cipher: ROT13}]\n", "space[0].cipher"),
    (TCP + "constraints: {security: paranoid}\n", "constraints.security"),
    (TCP + "budget: soon\n", "budget: expected a duration"),
    ("traffic: {workload: {kind: ping}, metric: retransmits}\n", "traffic.metric: 'retransmits'"),
    ("traffic: {workload: {kind: ping}}\nconstraints: {latency_under_load_ms_max: 50}\n",
     "constraints.latency_under_load_ms_max: a ping workload does not load the path"),
    ("link: {rate_mbit: 50}\n", "traffic: Field required"),
    ("traffic: {workload: {kind: tcp}}\nlink: {rate_mbit: -1}\n", "link.rate_mbit"),
    ("traffic: [\n", "not valid YAML"),
    ("traffic: {workload: {kind: tcp}, metric: rtt_avg_ms}\n", "traffic.metric: a tcp workload does not record rtt_avg_ms"),
])
def test_bad_specs_name_the_field(text, field):
    with pytest.raises(StudyError) as caught:
        parse_spec(text, "spec.yaml")
    assert field in str(caught.value), caught.value


def test_the_space_is_the_tunables_product_minus_what_the_constraints_and_the_driver_refuse():
    spec = parse_spec(TCP + "space: [{driver: openvpn, cipher: [AES-128-GCM, BF-CBC, AES-256-CBC], auth: [null, SHA256],"
                            " transport: udp, mtu: null, socket_buffer: null, compression: [off, lz4-v2]}]\n")
    space = build_space(spec.space, spec.constraints, None)
    labels = [c.label for c in space.candidates]
    assert labels == ["openvpn aes-128-gcm udp", "openvpn aes-256-cbc-sha1 udp", "openvpn aes-256-cbc-sha256 udp"]
    reasons = " | ".join(space.removed)
    assert "cipher BF-CBC is weak" in reasons and "compression lz4-v2 is weak" in reasons
    assert "SHA256 applies only to CBC ciphers" in reasons
    assert sum(space.removed.values()) + len(labels) == 3 * 2 * 2


def test_a_fips_floor_runs_the_fips_profile_and_leaves_out_what_fips_does_not_approve():
    spec = parse_spec(TCP + "constraints: {security: fips}\nspace: [wireguard, {driver: openvpn, cipher: "
                            "[AES-128-GCM, CHACHA20-POLY1305], mtu: null, socket_buffer: null}]\n")
    space = build_space(spec.space, spec.constraints, None)
    assert {c.profile for c in space.candidates} == {"fips"}
    assert all("chacha" not in c.label and c.driver == "openvpn" for c in space.candidates)
    assert any("WireGuard has no FIPS 140 configuration" in r for r in space.removed)


def test_allowed_drivers_and_ciphers_and_pptp_only_when_named():
    default = build_space(parse_spec(TCP).space, parse_spec(TCP).constraints, None)
    assert "pptp" not in {c.driver for c in default.candidates} and "none" not in {c.driver for c in default.candidates}
    spec = parse_spec(TCP + "constraints: {drivers: [wireguard, openvpn], ciphers: [ChaCha20-Poly1305]}\n")
    space = build_space(spec.space, spec.constraints, None)
    assert {c.driver for c in space.candidates} == {"wireguard", "openvpn"}
    assert all(c.driver == "wireguard" or c.options.cipher == "CHACHA20-POLY1305" for c in space.candidates)
    named = parse_spec(TCP + "space: [pptp]\nconstraints: {security: weak}\n")
    assert [c.driver for c in build_space(named.space, named.constraints, None).candidates] == ["pptp"]


def test_what_this_machine_cannot_run_is_removed_with_what_it_lacks():
    spec = parse_spec(TCP + "space: [{driver: wireguard, mtu: null, persistent_keepalive_s: 0}]\n")
    caps = Capabilities(kernel="test", features={"tun": True, "wireguard": False}, tools={"wg": "/x", "wireguard-go": "/x"})
    space = build_space(spec.space, spec.constraints, caps)
    assert [c.options.implementation for c in space.candidates] == ["wireguard-go"]
    assert any("kernel WireGuard" in reason for reason in space.removed)


def test_the_race_is_a_normal_study_with_the_baseline_and_as_many_rounds_as_the_budget_allows():
    spec = parse_spec(SMALL_SPACE + "budget: 10m\n")
    candidates = build_space(spec.space, spec.constraints, None).candidates
    plan, race = design(spec, candidates)
    study = parse_study(plan.study.source_text)
    assert [v.label for v in study.vpns] == ["none", "openvpn aes-128-gcm udp", "openvpn aes-128-gcm tcp",
                                             "openvpn chacha20-poly1305 udp", "openvpn chacha20-poly1305 tcp"]
    round_s = sum(s.estimate_s(repetitions=1) for s in plan.scenarios)
    assert race.max_rounds == int(600 // round_s) == study.repetitions.max
    assert len(race.candidates) == 4 and race.baseline not in race.candidates
    worst, expected = expected_s(plan, race)
    assert worst <= 600 and expected < worst


def test_a_budget_too_small_for_the_minimum_rounds_is_refused():
    spec = parse_spec(SMALL_SPACE + "budget: 1m\n")
    with pytest.raises(StudyError, match=r"budget: 1 min 00 s allows \d round\(s\) .* fewer than race.min_rounds \(3\)"):
        design(spec, build_space(spec.space, spec.constraints, None).candidates)


def test_study_text_keeps_a_fips_profile():
    spec = parse_spec(TCP + "constraints: {security: fips}\nspace: [{driver: openvpn, cipher: AES-128-GCM, mtu: null, "
                            "socket_buffer: null, transport: udp}]\n")
    candidates = build_space(spec.space, spec.constraints, None).candidates
    assert "profile: fips" in race_study_yaml(spec, candidates, 3)


# --- through the real CLI: exit 2 before anything starts -----------------------------------------

def _tune(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src"), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "vpnlab", "tune", str(spec), *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("text, args, field", [
    (TCP + "constraints: {drivers: [wireguard], security: fips}\n", (), "space: no candidate is left"),
    (TCP + "space: [{driver: openvpn, speed: max}]\n", ("--dry-run",), "space[0].speed"),
    (SMALL_SPACE, ("--budget", "20s"), "budget: 20 s allows 0 round(s)"),
    ("traffic: {workload: {kind: tcp}\n", (), "not valid YAML"),
    (SMALL_SPACE, ("--budget", "forever"), "--budget: expected a duration"),
])
def test_the_cli_refuses_bad_specs_with_exit_2_and_creates_nothing(tmp_path, text, args, field):
    namespaces = our_namespaces()
    done = _tune(tmp_path, text, "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 2, done.stderr
    assert field in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    assert our_namespaces() <= namespaces


def test_a_bad_metric_and_a_bad_direction_are_both_reported():
    with pytest.raises(StudyError) as caught:
        parse_spec("traffic: {workload: {kind: tcp}, metric: speed, direction: sideways}\n", "spec.yaml")
    assert "traffic.direction" in str(caught.value) and "traffic.metric: 'speed'" in str(caught.value)


def test_a_link_this_kernel_cannot_shape_is_refused_by_the_dry_run(tmp_path):
    from vpnlab.machines.capabilities import detect

    if detect().features.get("netem"):
        pytest.skip("this kernel has netem: a delay can be shaped here")  # (this machine's has not: FIELD-NOTES)
    done = _tune(tmp_path, SMALL_SPACE.replace("link: {rate_mbit: 50}", "link: {rate_mbit: 50, delay_ms: 20}"),
                 "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "this machine cannot run the race" in done.stderr and "netem" in done.stderr


def test_the_dry_run_prints_candidates_removals_and_times(tmp_path):
    done = _tune(tmp_path, SMALL_SPACE + "budget: 10m\nconstraints: {ciphers: [AES-128-GCM]}\n", "--dry-run")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "openvpn aes-128-gcm udp" in said and "openvpn aes-128-gcm tcp" in said
    assert "constraints.ciphers: openvpn's data cipher ChaCha20-Poly1305 is not among them" in said
    assert "worst case (nobody dropped)" in said and "expected with a clear winner" in said
    assert "Nothing was created" in said


def test_vpnlab_run_does_not_resume_a_race(tmp_path):
    (tmp_path / "race.json").write_text("{}")
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    done = subprocess.run([sys.executable, "-m", "vpnlab", "run", "--resume", str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 2 and "vpnlab tune --resume" in done.stderr


def test_the_docs_show_the_shipped_example_and_its_tunables_as_declared():
    from importlib import resources

    from vpnlab.catalog import DRIVERS
    from vpnlab.tune.spec import load_spec

    shipped = (resources.files("vpnlab") / "tune" / "example.yaml").read_text()
    page = (Path(__file__).resolve().parent.parent / "docs" / "tuning.md").read_text()  # the Tune section, whole
    assert f"```yaml\n{shipped}```" in page
    spec = load_spec("example")
    assert spec.budget_s == 1800 and spec.metric == "throughput_mbps"
    tune_section = page
    for name, driver in DRIVERS.items():
        for tunable in driver.tunables:
            assert f"`{tunable.option}`" in tune_section.split(f"| `{name}` |", 1)[1].split("\n", 1)[0], (name, tunable)


def test_a_spec_is_read_as_carefully_as_a_study(tmp_path):
    with pytest.raises(StudyError, match="duplicate key 'budget'"):
        parse_spec(TCP + "budget: 10m\nbudget: 20m\n")
    with pytest.raises(StudyError, match="control character"):
        parse_spec(TCP + "name: \"a\\x1b[31mb\"\n")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(StudyError, match="not a regular file"):
        __import__("vpnlab.tune.spec", fromlist=["load_spec"]).load_spec(tmp_path / "fifo")
