"""What emulation can still decide (comparability.RULE): stores generated as a VM under software emulation
would record them, with known truth, give each clause of the rule both ways: a figure on the wire is as
measured and a CPU figure the emulator's; a rate at its link's rate is bounded by it, one the emulator may
have lowered only from below (so B above A can be shown, B below A not); a delay the emulator can only
have raised; two sides differing only in content, slowed alike unless the path compresses."""

from pathlib import Path

import numpy as np
import pytest

from vpnlab.analyse import comparability, findings
from vpnlab.analyse.comparability import Bound, Evidence
from vpnlab.plan.scenarios import make_plan
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

TCG = "measured in a VM (software emulation (TCG): slow, CPU-bound figures are lower bounds, kernel 6.1)"
HEAD = """
name: e
repetitions: 6
vpns: [{driver: none}, {driver: wireguard}, {driver: openvpn, options: {compression: ["off", lzo]}}]
links: [{name: lan, rate_mbit: 100}, {name: slow, rate_mbit: 10}, {name: open}]
workloads: [{kind: tcp}, {kind: ping}, {kind: transfer, protocol: http, data: [random, text], size: 1M}]
findings:
"""
OV, LZO = "openvpn aes-256-gcm udp", "openvpn aes-256-gcm udp lzo"


def finding(a: str, b: str, direction: str, metric: str = "throughput_mbps", extra: str = "") -> str:
    """One finding `x` of B ('vpn | link | workload') against A."""
    def side(text):
        vpn, link, workload = text.split(" | ")
        return f"{{vpn: {vpn}, link: {link}, workload: {workload}}}"
    return (f"  - {{id: x, quote: q, where: w, seed: s, a: {side(a)}, b: {side(b)}, direction: {direction}, "
            f"metric: {metric}{extra}}}\n")


def store_of(tmp_path, text: str, truth: dict, measured_in="vm", note=TCG, flags=(), rounds=6, as_run=True):
    """A store of study `text`; scenario (vpn label, link, workload) -> {metric: centre} (default: none),
    values lognormal with 1% spread, a throughput with its link_utilisation_pct as the runner adds it."""
    rng = np.random.default_rng(3)
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan = make_plan(parse_study(text))
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="e", study_text=text)
    for scenario in plan.scenarios:
        store.add_scenario(scenario, measured_in=measured_in)
        store.add_note(scenario.id, note)
        if as_run:   # the link as the VM ran it: the study's rate (not scaled for emulation)
            store.record_as_run(scenario)
    for round_no in range(1, rounds + 1):
        for position, scenario in enumerate(plan.scenarios):
            centres = truth.get((scenario.vpn.label, scenario.link.label, scenario.workload.label))
            if not centres:
                continue
            values = {m: c * rng.lognormal(0, 0.01) for m, c in centres.items()}
            if "throughput_mbps" in values and scenario.link.rate_mbit:
                values["link_utilisation_pct"] = 100 * values["throughput_mbps"] / scenario.link.rate_mbit
            store.record_repetition(run, scenario.id, round_no, values, {}, list(flags), round_no, position)
    for scenario in plan.scenarios:
        store.set_status(scenario.id, "done")
    return store


def verdict(tmp_path, fnd: str, truth: dict, **kw) -> findings.Judgement:
    store = store_of(tmp_path, HEAD + fnd, truth, **kw)
    try:
        return findings.judge(store)[0]
    finally:
        store.close()


def tput(value):
    return {"throughput_mbps": value}


# --- a rate on a shaped link: bounded by the link's rate ----------------------------------------------

def test_a_rate_bound_by_the_link_decides_where_the_emulator_could_not_have_moved_it(tmp_path):
    """B on a 10 Mbit/s link at 97% of it, A on a 100 Mbit/s link at 97%: B/A is within 3% of the
    measured, whatever the emulator did, so 'B lower' is reproduced."""
    truth = {("none", "lan", "tcp"): tput(97), ("wireguard", "slow", "tcp"): tput(9.7)}
    j = verdict(tmp_path, finding("none | lan | tcp", "wireguard | slow | tcp", "lower"), truth)
    assert j.verdict == "reproduced", j.reason
    assert j.bounds[1].kind == "link-bound" and j.bounds[1].high == pytest.approx(100 / 97, rel=0.03)
    assert "emulation" in j.reason


def test_a_link_the_vm_may_have_run_at_another_rate_bounds_nothing(tmp_path):
    truth = {("none", "lan", "tcp"): tput(97), ("wireguard", "slow", "tcp"): tput(9.7)}
    j = verdict(tmp_path, finding("none | lan | tcp", "wireguard | slow | tcp", "lower"), truth, as_run=False)
    assert j.verdict == "not comparable here" and "scaled for emulation" in j.reason, j.reason


def test_the_same_rate_on_a_link_without_a_rate_could_be_the_emulators(tmp_path):
    truth = {("none", "lan", "tcp"): tput(97), ("wireguard", "open", "tcp"): tput(9.7)}
    j = verdict(tmp_path, finding("none | lan | tcp", "wireguard | open | tcp", "lower"), truth)
    assert j.verdict == "not comparable here" and "lowered" not in j.reason, j.reason
    assert j.bounds[1].kind == "lowered" and j.bounds[1].high == float("inf")
    assert "at least the measured" in j.reason


def test_b_below_a_on_one_link_is_never_shown_when_the_emulator_may_have_slowed_b(tmp_path):
    """WireGuard at 60% of the link against no VPN at 97%: the truth may be B at the link's rate."""
    truth = {("none", "lan", "tcp"): tput(97), ("wireguard", "lan", "tcp"): tput(60)}
    j = verdict(tmp_path, finding("none | lan | tcp", "wireguard | lan | tcp", "lower"), truth)
    assert j.verdict == "not comparable here" and "does not hold over that whole range" in j.reason, j.reason
    assert j.estimate == pytest.approx(60 / 97, rel=0.02)            # measured, and shown


def test_outside_emulation_the_same_figures_reproduce_it(tmp_path):
    truth = {("none", "lan", "tcp"): tput(97), ("wireguard", "lan", "tcp"): tput(60)}
    j = verdict(tmp_path, finding("none | lan | tcp", "wireguard | lan | tcp", "lower"), truth,
                measured_in="host", note="on this host")
    assert j.verdict == "reproduced" and j.bounds is None, j.reason


# --- one way only ---------------------------------------------------------------------------------------

def test_a_rate_the_emulator_can_only_have_lowered_shows_b_above_a_but_not_below(tmp_path):
    """A at its link's rate, B compressing (no cap from the link): the truth of B/A is at least the measured."""
    up = {("none", "lan", "tcp"): tput(97), (LZO, "lan", "tcp"): tput(130)}
    j = verdict(tmp_path / "up", finding("none | lan | tcp", f"{LZO} | lan | tcp", "higher"), up)
    assert j.verdict == "reproduced" and j.bounds[1].kind == "lowered", j.reason
    contra = verdict(tmp_path / "contra", finding("none | lan | tcp", f"{LZO} | lan | tcp", "lower"), up)
    assert contra.verdict == "contradicted", contra.reason
    down = {("none", "lan", "tcp"): tput(97), (LZO, "lan", "tcp"): tput(50)}
    j = verdict(tmp_path / "down", finding("none | lan | tcp", f"{LZO} | lan | tcp", "lower"), down)
    assert j.verdict == "not comparable here", j.reason
    j = verdict(tmp_path / "down2", finding("none | lan | tcp", f"{LZO} | lan | tcp", "higher"), down)
    assert j.verdict == "not comparable here", j.reason          # a 'contradicted' the emulator could have made


def test_a_null_finding_is_reproduced_within_the_links_bound_never_against_a_lowered_side(tmp_path):
    same = {("none", "lan", "tcp"): tput(98), ("wireguard", "lan", "tcp"): tput(98)}
    j = verdict(tmp_path / "a", finding("none | lan | tcp", "wireguard | lan | tcp", "same", extra=", margin_pct: 10"),
                same)
    assert j.verdict == "reproduced", j.reason   # both within 4% of the link: within ±10% anyway
    lowered = {("none", "lan", "tcp"): tput(98), (LZO, "lan", "tcp"): tput(98)}
    j = verdict(tmp_path / "b", finding("none | lan | tcp", f"{LZO} | lan | tcp", "same", extra=", margin_pct: 10"),
                lowered)
    assert j.verdict == "not comparable here", j.reason


# --- delays: only raised ------------------------------------------------------------------------------

def test_a_delay_the_emulator_raised_on_both_sides_decides_nothing(tmp_path):
    rtt = {("none", "lan", "ping-56B"): {"rtt_avg_ms": 1.0}, ("wireguard", "lan", "ping-56B"): {"rtt_avg_ms": 3.0}}
    j = verdict(tmp_path, finding("none | lan | ping-56B", "wireguard | lan | ping-56B", "higher", "rtt_avg_ms"), rtt)
    assert j.verdict == "not comparable here" and "can only have added to rtt_avg_ms" in j.reason, j.reason
    assert j.bounds[0].kind == j.bounds[1].kind == "raised"


def test_a_difference_raised_on_b_alone_can_only_be_shown_lower():
    b, a = Bound("raised", 0.0, 1.0, ""), Bound("as measured", 1.0, 1.0, "")
    assert comparability.ratio_factor(a, b) == (0.0, 1.0)            # true B/A at most the measured
    assert comparability.difference_offset(a, b) == (-float("inf"), 0.0)
    assert comparability.ratio_factor(b, a) == (1.0, float("inf"))   # raised on A: at least the measured
    assert comparability.difference_offset(b, a) == (0.0, float("inf"))


# --- the wire and the CPU ---------------------------------------------------------------------------

def test_sizes_on_the_wire_are_the_protocols_and_a_cpu_figure_the_emulators(tmp_path):
    wire = {("none", "lan", "tcp"): {"throughput_mbps": 97, "wan_avg_packet_bytes": 1000},
            ("wireguard", "lan", "tcp"): {"throughput_mbps": 60, "wan_avg_packet_bytes": 800}}
    j = verdict(tmp_path / "w", finding("none | lan | tcp", "wireguard | lan | tcp", "lower", "wan_avg_packet_bytes"),
                wire)
    assert j.verdict == "reproduced" and all(b.exact for b in j.bounds), j.reason
    cpu = {("none", "lan", "tcp"): {"throughput_mbps": 97, "cpu_s_per_gb": 1.0},
           ("wireguard", "lan", "tcp"): {"throughput_mbps": 60, "cpu_s_per_gb": 3.0}}
    j = verdict(tmp_path / "c", finding("none | lan | tcp", "wireguard | lan | tcp", "higher", "cpu_s_per_gb"), cpu)
    assert j.verdict == "not comparable here" and "is the emulator's" in j.reason, j.reason


# --- slowed alike ----------------------------------------------------------------------------------------

def test_content_alone_through_the_same_software_was_slowed_alike_unless_the_path_compresses(tmp_path):
    def truth(vpn):
        return {(vpn, "open", "http-random-1M"): tput(20), (vpn, "open", "http-text-1M"): tput(30)}
    alike = verdict(tmp_path / "a", finding(f"{OV} | open | http-random-1M", f"{OV} | open | http-text-1M", "higher"),
                    truth(OV))
    assert alike.verdict == "reproduced" and alike.alike and "slowed alike" in alike.reason, alike.reason
    lzo = verdict(tmp_path / "b", finding(f"{LZO} | open | http-random-1M", f"{LZO} | open | http-text-1M", "higher"),
                  truth(LZO))
    assert lzo.verdict == "not comparable here" and not lzo.alike, lzo.reason
    other = verdict(tmp_path / "c", finding(f"{OV} | open | http-random-1M", "wireguard | open | http-text-1M",
                                            "higher"), truth(OV) | {("wireguard", "open", "http-text-1M"): tput(30)})
    assert other.verdict == "not comparable here" and not other.alike, other.reason


# --- the evidence --------------------------------------------------------------------------------------

def test_the_least_round_of_a_sides_mean_sets_its_bound():
    rows = [_Row("a", link_rate_mbit=10.0), _Row("b", link_rate_mbit=10.0)]
    seen = {"a": Evidence({1: 90.0, 2: 95.0}, 2, 1), "b": Evidence({1: 100.0, 2: 60.0}, 2, 0)}
    bound = comparability.side_bound("throughput_mbps", rows, seen)
    assert bound.kind == "link-bound" and bound.high == pytest.approx(100 / 77.5)   # round 2: (95 + 60) / 2
    assert "a saturated CPU in 1 of 4 repetitions" in bound.why
    seen["b"] = Evidence({1: 100.0, 2: None}, 2, 0)                                  # a round without the figure
    assert comparability.side_bound("throughput_mbps", rows, seen).kind == "lowered"
    assert comparability.side_bound("throughput_mbps", [_Row("a", emulated=False)], seen).exact
    assert comparability.side_bound("transfer_s", rows[:1], seen).low == pytest.approx(0.9)


def test_a_scaled_link_is_told_by_the_rate_it_ran_at():
    def row(ran):
        r = _Row("a", link_rate_mbit=100.0)
        r.as_run = ran
        return r
    assert not comparability.scaled(row('{"link": {"rate_mbit": 100.0}}'))
    assert comparability.scaled(row('{"link": {"rate_mbit": 10.0}}'))
    assert comparability.scaled(row(""))                      # unrecorded: it may have been
    stream, ping = row('{"link": {"rate_mbit": 10.0}}'), row('{"link": {"rate_mbit": 10.0}}')
    stream.workload, ping.workload = "tcp", "ping"
    assert comparability.side_bound("wan_avg_packet_bytes", [stream], {}).kind == "the emulator's"
    assert comparability.side_bound("wan_avg_packet_bytes", [ping], {}).exact   # fixed-size probes
    assert comparability.side_bound("overhead_bytes", [stream], {}).exact


class _Row:
    def __init__(self, id, link_rate_mbit=None, emulated=True, options='{"driver": "wireguard", "options": {}}'):
        self.id, self.link_rate_mbit, self.emulated, self.vpn_options = id, link_rate_mbit, emulated, options
        self.vpn_label, self.link_label, self.workload_label = "wireguard", "slow", "tcp"
        self.workload, self.as_run = "tcp", f'{{"link": {{"rate_mbit": {link_rate_mbit}}}}}' if link_rate_mbit else ""


def test_the_docs_state_the_rule_as_the_code_does():
    page = (Path(__file__).resolve().parents[1] / "docs" / "seeds.md").read_text()
    assert " ".join(comparability.RULE.split()) in " ".join(page.split())


def test_a_compressing_layer_inside_a_tunnel_is_found():
    plain = '{"driver": "openvpn", "options": {"compression": "off"}}'
    inner = '{"driver": "strongswan", "options": {}, "inner": {"driver": "openvpn", "options": {"compression": "lzo"}}}'
    assert not comparability.compresses(_Row("a", options=plain))
    assert comparability.compresses(_Row("a", options=inner))
    assert comparability.compresses(_Row("a", options='{"driver": "strongswan", "options": {"compression": "on"}}'))
