"""What breaks VPNs in the field (issue 47), without a testbed: a link's NAT fields and a workload's
events, validated before anything is created and named in their errors; the ids of scenarios without
them; the recovery figures from probe streams whose truth is known by construction; the reach kind."""

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vpnlab.catalog import DRIVERS, KINDS, METRICS
from vpnlab.core.errors import MeasurementError, StudyError
from vpnlab.measure.window import run_through_events
from vpnlab.measure.recovery import Happened, longest_gap, probe_times, recovery_values
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import load_builtin, parse_study
from vpnlab.report.field_table import field_table, verdict
from vpnlab.testbed import nat
from vpnlab.workloads.reach import first_reach_s

ROOT = Path(__file__).resolve().parents[1]

STUDY = "name: t\nvpns: [{driver: none}, {driver: wireguard}]\n"
PING = "workloads: [{kind: ping, count: 200, interval_s: 0.05}]\n"


def problems(text: str) -> str:
    with pytest.raises(StudyError) as err:
        parse_study(text)
    return str(err.value)


# --- the NAT's fields ----------------------------------------------------------------------------

def test_a_link_or_workload_without_nat_or_events_keeps_its_scenario_ids():
    scenario = make_plan(parse_study(STUDY + PING + "links: [{rate_mbit: 10}]\n")).scenarios[0]
    assert "nat" not in scenario.key["link"] and "nat_udp_timeout_s" not in scenario.key["link"]
    assert "events" not in scenario.key["workload"] and not scenario.link.needs_router
    assert (scenario.link.label, scenario.workload.full_label) == ("10mbit", "ping-56B")


@pytest.mark.parametrize("entry, label", [("{nat: masquerade}", "unshaped-nat"),
                                          ("{nat: masquerade, nat_udp_timeout_s: 30, mtu: 1400}", "unshaped-mtu1400-nat30s")])
def test_a_nat_is_in_the_label_and_the_id_and_needs_the_router(entry, label):
    scenario = make_plan(parse_study(STUDY + PING + f"links: [{entry}]\n")).scenarios[0]
    assert scenario.link.label == label and scenario.link.needs_router
    assert scenario.key["link"]["nat"] == "masquerade"


@pytest.mark.parametrize("entry, expect", [
    ("{nat: masquerade, nat_udp_timeout_s: 0}", "links[0].nat_udp_timeout_s: Input should be greater than or equal to 1"),
    ("{nat: masquerade, nat_udp_timeout_s: 3601}", "links[0].nat_udp_timeout_s: Input should be less than or equal to 3600"),
    ("{nat_udp_timeout_s: 30}", "links[0]: nat_udp_timeout_s: a NAT's UDP timeout needs nat: masquerade"),
    ("{nat: full-cone}", "links[0].nat: Input should be 'none' or 'masquerade'")])
def test_a_bad_nat_names_the_field(entry, expect):
    assert expect in problems(STUDY + PING + f"links: [{entry}]\n")


def test_a_mesh_has_no_client_side_to_put_behind_a_nat():
    text = "name: m\ntopology: mesh\npeers: 3\nvpns: [{driver: wireguard}]\nlinks: [{nat: masquerade}]\n" + PING
    assert "links[0].nat: only for a remote-access or site-to-site study" in problems(text)


def test_a_bad_study_exits_2_before_anything_is_created(tmp_path):
    study = tmp_path / "bad.yaml"
    study.write_text(STUDY + PING + "links: [{nat_udp_timeout_s: 5}]\n")
    proc = subprocess.run([sys.executable, "-m", "vpnlab", "run", str(study), "--dry-run"], capture_output=True, text=True)
    assert proc.returncode == 2 and "nat_udp_timeout_s" in proc.stderr


def test_the_nat_masquerades_outwards_and_forwards_inwards_only_replies():
    rules = nat.nft_ruleset()
    assert f'oifname "{nat.OUTER}" masquerade' in rules
    assert f'iifname "{nat.OUTER}" oifname "{nat.INNER}" ct state != {{ established, related }} counter drop' in rules


# --- events --------------------------------------------------------------------------------------

def events(entries: str, links: str = "[{nat: masquerade}]") -> str:
    return STUDY + f"links: {links}\nworkloads: [{{kind: ping, count: 200, interval_s: 0.05, events: {entries}}}]\n"


def test_events_are_one_workload_not_a_sweep_and_are_in_its_label():
    study = parse_study(events("[{at_s: 2, link_down_s: 3}, {at_s: 7, address_change: true}, {at_s: 8, nat_rebind: true}]"))
    (workload,) = study.workloads
    assert [e.kind for e in workload.events] == ["link_down_s", "address_change", "nat_rebind"]
    assert workload.full_label == "ping-56B+down3s@2+address-change@7+nat-rebind@8"
    assert workload.events[0].end_s == 5


@pytest.mark.parametrize("entries, expect", [
    ("[{at_s: 10.2, link_down_s: 1}]", "workloads[0].events[0].at_s: 10.2 s is past the workload's end"),
    ("[{at_s: 1, link_down_s: 1, address_change: true}]", "workloads[0].events[0]: an event is at_s and one of"),
    ("[{at_s: 1}]", "found none"),
    ("[{at_s: 1, reboot: true}]", "workloads[0].events[0]: reboot: unknown kind of event"),
    ("[{at_s: 1, link_down_s: 0}]", "workloads[0].events[0].link_down_s: Input should be greater than 0"),
    ("[{at_s: -1, address_change: true}]", "workloads[0].events[0].at_s: Input should be greater than or equal to 0")])
def test_a_bad_event_names_the_field(entries, expect):
    assert expect in problems(events(entries))


def test_a_nat_rebind_needs_a_nat_on_every_link():
    text = events("[{at_s: 1, nat_rebind: true}]", links="[{nat: masquerade}, {}]")
    assert "workloads[0].events[0].nat_rebind: acts on the client side's NAT, and links[1] has none" in problems(text)


def test_the_estimate_waits_for_the_recovery_after_the_last_event():
    plain, late = (make_plan(parse_study(events(e))).scenarios[0] for e in ("[]", "[{at_s: 9, link_down_s: 3}]"))
    assert plain.repetition_s() == pytest.approx(10.1)
    assert late.repetition_s() == pytest.approx(9 + 3 + 10)


# --- recovery figures from probe streams made by construction ------------------------------------

def ping_output(start: float, interval: float, count: int, lost: set[int], rtt_ms: float = 0.5) -> str:
    """`ping -D -O` lines: seq n sent at start + (n-1)*interval, answered unless in `lost`."""
    lines = []
    for seq in range(1, count + 1):
        sent = start + (seq - 1) * interval
        if seq in lost:
            lines.append(f"[{sent + interval:.6f}] no answer yet for icmp_seq={seq}")
        else:
            lines.append(f"[{sent + rtt_ms / 1000:.6f}] 64 bytes from 198.18.128.2: icmp_seq={seq} ttl=62 time={rtt_ms} ms")
    return "\n".join(lines)


def test_send_times_come_from_the_replies_and_between_them_for_the_lost():
    sent, answered = probe_times(ping_output(1000.0, 0.02, 10, lost={4, 5, 6}))
    assert set(answered) == {1, 2, 3, 7, 8, 9, 10}
    assert [round(answered[seq] - sent[seq], 6) for seq in sorted(answered)] == [0.0005] * 7  # each its round trip
    assert [round(sent[seq] - 1000, 6) for seq in range(1, 11)] == [round(0.02 * k, 6) for k in range(10)]
    sent, answered = probe_times(ping_output(1000.0, 0.02, 10, lost={1, 2, 9, 10}))  # none answered before, after
    assert [round(sent[seq] - 1000, 6) for seq in range(1, 11)] == [round(0.02 * k, 6) for k in range(10)]


def test_an_outage_loses_its_probes_and_recovery_starts_at_its_end():
    # 3 s outage from t=2 s on a 20 ms stream: the 150 probes sent in [2, 5) are lost, the next one answered
    start, interval = 1000.0, 0.02
    lost = {seq for seq in range(1, 501) if 2 <= (seq - 1) * interval < 5 - 1e-9}
    output = ping_output(start, interval, 500, lost)
    values, flags = recovery_values([Happened("link_down_s", start + 2, start + 5)], output, start + 10)
    assert values["outage_lost_probes"] == len(lost) == 150
    assert values["outage_recovery_s"] == pytest.approx(0.0005, abs=1e-6)  # the first reply: one round trip
    assert values["recovered"] == 1 and not flags


def test_a_tunnel_over_tcp_that_holds_the_probes_is_back_when_their_replies_arrive():
    """A tunnel carried over TCP loses no probe in a 3 s outage: its connection holds them, and the next ones,
    until it retransmits, 1.5 s after the outage's end here, then delivers them all at once. Traffic flowed
    again then, not when the first probe after the outage was sent."""
    start, interval, back = 1000.0, 0.02, 1006.5
    lines = []
    for seq in range(1, 501):
        sent = start + (seq - 1) * interval
        arrival = max(sent + 0.0005, back) if sent >= start + 2 else sent + 0.0005
        lines.append(f"[{arrival:.6f}] 64 bytes from 198.18.128.2: icmp_seq={seq} ttl=62 "
                     f"time={(arrival - sent) * 1000:.3f} ms")
    values, flags = recovery_values([Happened("link_down_s", start + 2, start + 5)], "\n".join(lines), start + 10)
    assert values["outage_recovery_s"] == pytest.approx(1.5, abs=1e-5)
    assert values["outage_lost_probes"] == 0 and values["recovered"] == 1 and not flags
    sent, arrived = probe_times("\n".join(lines))
    # the last reply before the outage (its probe sent at 1.98 s) to the burst at 6.5 s, less the pace
    assert longest_gap(sent, arrived, start + 1, start + 9) == pytest.approx(back - (start + 1.98 + 0.0005) - interval,
                                                                              abs=1e-5)


def test_a_tunnel_back_late_is_measured_and_one_never_back_is_flagged():
    start, interval = 1000.0, 0.02
    lost = {seq for seq in range(1, 501) if 2 <= (seq - 1) * interval < 6.5}  # back 1.5 s after a 3 s outage
    values, _ = recovery_values([Happened("link_down_s", start + 2, start + 5)], ping_output(start, interval, 500, lost),
                                start + 10)
    assert values["outage_recovery_s"] == pytest.approx(1.5, abs=interval)
    never = {seq for seq in range(1, 501) if (seq - 1) * interval >= 2}
    values, flags = recovery_values([Happened("address_change", start + 2, start + 2)],
                                    ping_output(start, interval, 500, never), start + 10)
    assert values["recovered"] == 0 and "address_change_recovery_s" not in values
    assert values["address_change_lost_probes"] == len(never)
    assert [f.kind for f in flags] == ["not-recovered"]


def test_the_recovery_metrics_are_registered_with_units_and_directions():
    expected = {"outage_recovery_s": ("s", False), "outage_lost_probes": ("count", False),
                "address_change_recovery_s": ("s", False), "nat_rebind_lost_probes": ("count", False),
                "recovered": ("0/1", True), "far_reachable": ("0/1", True), "far_reach_s": ("s", False)}
    assert {name: (METRICS[name].unit, METRICS[name].higher_is_better) for name in expected} == expected


# --- reach ---------------------------------------------------------------------------------------

def test_reach_time_is_the_first_answered_sequence_number():
    output = ping_output(1000.0, 0.05, 7, lost={1, 2, 3, 4, 5, 6})
    assert first_reach_s(output, 0.05) == pytest.approx(0.3)
    assert first_reach_s("PING 198.19.1.1\n--- statistics ---\n7 packets transmitted, 0 received", 0.05) is None
    assert KINDS["reach"].primary == "far_reachable"


def test_wireguard_keepalive_is_an_option_in_its_label_and_settings():
    wireguard = DRIVERS["wireguard"]
    options = wireguard.Options(persistent_keepalive_s=25)
    assert wireguard.describe(options, "default") == "wireguard keepalive-25s"
    assert wireguard.from_settings(wireguard.settings(options, "default")) == options
    assert "persistent_keepalive_s" not in wireguard.Options().model_dump()


def test_the_field_study_crosses_every_condition_with_every_vpn():
    plan = make_plan(load_builtin("field-2026"))
    links = {s.link.label for s in plan.scenarios}
    assert links == {f"wan-mtu{mtu}{icmp}-nat30s" for mtu in (1500, 1400, 1280) for icmp in ("", "-icmp-blocked")}
    assert {s.workload.full_label for s in plan.scenarios} == {"path-mtu-4M", "reach-after-60s",
                                                               "tcp+down5s@3+address-change@12"}
    # every driver, those that need the kernel's ESP or PPP too (in the VM where this kernel lacks them)
    assert {s.vpn.driver for s in plan.scenarios} == set(DRIVERS)
    assert len(plan.scenarios) == 14 * 6 * 3  # WireGuard twice: without and with a keepalive


def test_a_rekey_is_refused_for_a_vpn_that_cannot_be_made_to_and_the_baseline_has_nothing_to_rekey():
    text = events("[{at_s: 1, rekey: true}]", links="[{}]")
    assert "workloads[0].events[0].rekey: vpns[1] (wireguard): wireguard offers no way to force a rekey here; " \
           "drivers that do: strongswan" in problems(text)
    study = parse_study(text.replace("{driver: wireguard}", "{driver: strongswan}"))
    assert study.workloads[0].events[0].kind == "rekey"


def test_the_rekey_gap_is_the_longest_run_lost_around_it():
    start, interval = 1000.0, 0.02
    lost = {seq for seq in range(1, 301) if 2 <= (seq - 1) * interval < 2.3}  # 15 probes, 0.3 s
    sent, answered = probe_times(ping_output(start, interval, 300, lost))
    assert longest_gap(sent, answered, start + 1, start + 5) == pytest.approx(0.3, abs=1e-6)
    whole = probe_times(ping_output(start, interval, 300, set()))
    assert longest_gap(*whole, start + 1, start + 5) == pytest.approx(0, abs=1e-6)
    values, _ = recovery_values([Happened("rekey", start + 2, start + 2.01)], ping_output(start, interval, 300, lost),
                                start + 6)
    assert values["rekey_gap_s"] == pytest.approx(0.3, abs=1e-6) and values["rekey_lost_probes"] == 15


class Reset:
    """A workload kind whose connection the events reset."""
    kind = "tcp"

    def run(self, options, ctx):
        raise MeasurementError("iperf3: unable to write to stream socket: Connection reset by peer")


@pytest.mark.parametrize("entries", ["[]", "[{at_s: 3, address_change: true}]"])
def test_a_workload_the_events_broke_is_their_result_and_one_without_events_fails(entries):
    (workload,) = parse_study(events(entries)).workloads
    scenario = SimpleNamespace(kind=Reset(), workload_as_run=workload)
    if not workload.events:
        with pytest.raises(MeasurementError):
            run_through_events(scenario, None)
        return
    measurement = run_through_events(scenario, None)
    assert measurement.values == {"workload_survived": 0}
    assert [f.kind for f in measurement.flags] == ["workload-broken"] and "reset" in measurement.flags[0].text


# --- the report's field table ----------------------------------------------------------------------

@pytest.mark.parametrize("means, word", [
    ({"bulk_completed": 1, "bulk_stalled": 0}, "works"), ({"bulk_completed": 0, "bulk_stalled": 1}, "black hole"),
    ({"bulk_completed": 0, "bulk_stalled": 0}, "fails"), ({"far_reachable": 1}, "works"),
    ({"far_reachable": 2 / 3}, "unreachable"), ({"recovered": 1, "outage_recovery_s": 0.02}, "works"),
    ({"recovered": 1, "outage_recovery_s": 2.5}, "degrades"), ({"recovered": 1, "workload_survived": 0}, "degrades"),
    ({"recovered": 2 / 3, "outage_recovery_s": 0.02}, "does not recover"), ({"throughput_mbps": 90}, None)])
def test_each_condition_gets_one_word(means, word):
    assert verdict(means) == word


def test_the_field_table_has_conditions_as_columns_and_vpns_as_rows():
    rows = [("a", "none", "nat", "reach-after-60s", {"far_reachable": 0}),
            ("b", "wireguard", "nat", "reach-after-60s", {"far_reachable": 1}),
            ("c", "wireguard", "nat", "tcp+down5s@3", {"recovered": 0}),
            ("d", "wireguard", "nat", "tcp", {"throughput_mbps": 50}),
            ("e", "tinc", "nat", "reach-after-60s", {})]  # failed: nothing measured
    scenarios = [SimpleNamespace(idx=i, id=sid, vpn_label=vpn, link_label=link, workload_label=workload,
                                 status="failed" if sid == "e" else "done")
                 for i, (sid, vpn, link, workload, _) in enumerate(rows)]
    stat = {(sid, metric): SimpleNamespace(mean=value) for sid, *_, means in rows for metric, value in means.items()}
    columns, table = field_table(scenarios, stat)
    assert columns == ["nat reach-after-60s", "nat tcp+down5s@3"]
    assert table == [{"vpn": "none", "cells": ["unreachable", "-"]},
                     {"vpn": "wireguard", "cells": ["works", "does not recover"]},
                     {"vpn": "tinc", "cells": ["failed", "-"]}]


def test_a_stored_workload_with_events_reads_back_as_it_was():
    """The store keeps a workload's options as dumped (every event field, None where unset) and reads them
    back through the same model: the report after a run with events once failed there."""
    from vpnlab.plan.study import WORKLOAD_ADAPTER

    (workload,) = parse_study(events("[{at_s: 2, link_down_s: 3}, {at_s: 7, address_change: true}]")).workloads
    assert WORKLOAD_ADAPTER.validate_python(workload.model_dump(mode="json")) == workload


def test_the_field_page_table_has_a_row_per_condition_and_gives_the_figures():
    """The Markdown form turns the table round (conditions as rows: a page has room for five VPNs, not
    eighteen conditions) and gives each word its figures: the path MTU, the time back after each event."""
    from vpnlab.report.field_table import markdown

    rows = [("a", "none", "mtu1400", "path-mtu", {"bulk_completed": 1, "path_mtu_bytes": 1400, "wan_fragments": 0}),
            ("b", "wireguard", "mtu1400", "path-mtu", {"bulk_completed": 1, "path_mtu_bytes": 1420,
                                                        "wan_fragments": 12600.4}),
            ("e", "openvpn", "mtu1400", "path-mtu", {"bulk_completed": 0, "bulk_stalled": 1,
                                                      "path_mtu_bytes": 1348}),
            ("c", "wireguard", "mtu1400", "tcp+down5s@3", {"recovered": 1, "outage_recovery_s": 0.254,
                                                            "workload_survived": 0}),
            ("d", "wireguard", "mtu1400", "tcp", {"throughput_mbps": 50})]
    scenarios = [SimpleNamespace(idx=i, id=sid, vpn_label=vpn, link_label=link, workload_label=workload,
                                 status="done", failure=None) for i, (sid, vpn, link, workload, _) in enumerate(rows)]
    # a tunnel that never came up under the condition: the last repetition's reason, its first line
    scenarios.append(SimpleNamespace(idx=9, id="f", vpn_label="openvpn", link_label="mtu1400", workload_label="tcp+down5s@3",
                                     status="failed", failure="2 repetitions in a row failed; the last: timed out "
                                     "after 30 s waiting for the session | x\n  client.log:\n  Status: free"))
    stat = {(sid, metric): SimpleNamespace(mean=value) for sid, *_, means in rows for metric, value in means.items()}
    assert markdown(SimpleNamespace(scenarios=scenarios, stat=stat)).splitlines() == [
        "| condition | none | wireguard | openvpn |", "|---|---|---|---|",
        "| mtu1400, path-mtu | works (1400 B) | works (1420 B, 12600 WAN fragments) | black hole (1348 B) |",
        "| mtu1400, tcp+down5s@3 | - | degrades (outage 0.25 s, the transfer broke) | "
        "failed (timed out after 30 s waiting for the session / x) |"]
    assert markdown(SimpleNamespace(scenarios=scenarios, stat=stat), only="down").splitlines() == [
        "| condition | wireguard | openvpn |", "|---|---|---|", "| mtu1400, tcp+down5s@3 | degrades (outage 0.25 s, "
        "the transfer broke) | failed (timed out after 30 s waiting for the session / x) |"]


def test_the_reports_figures_under_the_table_give_each_word_its_figures_with_intervals():
    """field_figures: a row per measured VPN and condition, grouped by condition, each figure its centre and
    interval (none from one repetition); a failed scenario has no figures; metrics no scenario measured
    get no column."""
    from vpnlab.report.field_table import field_figures

    def summary(centre, low, high, n):
        return SimpleNamespace(mean=centre, centre=centre, ci_low=low, ci_high=high, n=n)

    rows = [("a", "wireguard", "mtu1400", "path-mtu", "done", {"bulk_completed": summary(1, 1, 1, 3),
                                                                "path_mtu_bytes": summary(1420, 1420, 1420, 3)}),
            ("b", "wireguard", "mtu1400", "down5s@3", "done", {"recovered": summary(1, 1, 1, 3),
                                                                "outage_recovery_s": summary(0.02, 0.01, 0.03, 3)}),
            ("c", "openvpn", "mtu1400", "path-mtu", "done", {"bulk_completed": summary(1, math.nan, math.nan, 1),
                                                              "path_mtu_bytes": summary(1500, math.nan, math.nan, 1)}),
            ("d", "tinc", "mtu1400", "path-mtu", "failed", {})]
    scenarios = [SimpleNamespace(idx=i, id=sid, vpn_label=vpn, link_label=link, workload_label=workload, status=status)
                 for i, (sid, vpn, link, workload, status, _) in enumerate(rows)]
    stat = {(sid, metric): value for sid, *_, values in rows for metric, value in values.items()}
    columns, table = field_figures(scenarios, stat)
    assert columns == ["path_mtu_bytes (B)", "outage_recovery_s (s)"]
    assert [(r["condition"], r["vpn"], r["word"], r["n"], r["cells"]) for r in table] == [
        ("mtu1400 path-mtu", "wireguard", "works", 3, ["1420 [1420, 1420]", "-"]),
        ("mtu1400 path-mtu", "openvpn", "works", 1, ["1500", "-"]),
        ("mtu1400 down5s@3", "wireguard", "works", 3, ["-", "0.02 [0.01, 0.03]"])]


def test_nebulas_punchy_is_an_option_off_by_default_that_keeps_old_scenario_ids():
    """punchy.punch keeps a NAT's mappings alive: off as in Nebula's code, on as in its example configuration;
    left out of a stored configuration at its default, so earlier scenarios keep their ids."""
    from vpnlab.drivers.nebula import _config

    nebula = DRIVERS["nebula"]
    assert "punch" not in nebula.Options().model_dump()
    punchy = nebula.Options(punch=True)
    assert nebula.describe(punchy, "default") == "nebula aes punchy"
    site = SimpleNamespace(node="client", underlay_ip="198.19.0.1")
    lighthouse = SimpleNamespace(tunnel_ip="198.18.200.1", underlay_ip="198.19.0.2")
    env = SimpleNamespace(folder=lambda node: "/run/x", implementation="nebula")
    for options, punch in ((nebula.Options(), False), (punchy, True)):
        assert _config(site, lighthouse, None, "client", "nb0", 1300, options, env)["punchy"] == {"punch": punch}


@pytest.mark.parametrize("name,line", [("strongswan", "    dpd_delay = 10s"), ("libreswan", "  dpddelay=10")])
def test_ipsec_dead_peer_detection_is_an_option_in_its_label_settings_and_configuration(name, line):
    """`dpd_delay_s` (libreswan 4.x arms no NAT-T keepalive for IKEv2: its probes are what can keep a NAT's
    mapping): in the label, in the settings a tuner prints (and read back), in both ends' configuration; at
    its default in none of them, and not in the stored options (the ids of earlier runs' scenarios hold)."""
    from test_mtu_ipcomp_units import Site

    driver = DRIVERS[name]
    options, default = driver.Options(dpd_delay_s=10), driver.Options()
    assert driver.describe(options, "default").endswith("dpd-10s") and "dpd" not in driver.describe(default, "default")
    assert driver.from_settings(driver.settings(options, "default")) == options
    assert "dpd" not in driver.settings(default, "default") and "dpd_delay_s" not in default.model_dump()
    a, b = Site("198.19.0.1", "198.18.0.0/17"), Site("198.19.0.2", "198.18.128.0/17")
    for is_client in (True, False):
        if name == "strongswan":
            confs = [driver._swanctl_conf(a, b, is_client, True, "dynamic", b.prefix, None, "default", False, "0x00",
                                          False, dpd) for dpd in (10, None)]
        else:
            confs = [driver._conf(a, b, is_client, True, None, "default", False, False, dpd_delay_s=dpd)
                     for dpd in (10, None)]
        assert line + "\n" in confs[0] and "dpd" not in confs[1]
    with pytest.raises(ValueError, match="dpd_delay_s"):
        driver.Options(dpd_delay_s=0)


def test_strongswans_mobike_is_an_option_on_by_default_that_keeps_old_scenario_ids():
    from test_mtu_ipcomp_units import Site

    strongswan = DRIVERS["strongswan"]
    options = strongswan.Options(mobike=False, dpd_delay_s=2)
    assert strongswan.describe(options, "default") == "strongswan default psk dpd-2s no-mobike"
    assert strongswan.from_settings(strongswan.settings(options, "default")) == options
    assert "mobike" not in strongswan.Options().model_dump()
    a, b = Site("198.19.0.1", "198.18.0.0/17"), Site("198.19.0.2", "198.18.128.0/17")
    conf = strongswan._swanctl_conf(a, b, True, True, "dynamic", b.prefix, None, "default", False, "0x00", mobike=False)
    assert "    mobike = no\n" in conf and "mobike" not in strongswan._swanctl_conf(
        a, b, True, True, "dynamic", b.prefix, None, "default", False, "0x00")


def test_behind_a_nat_the_overhead_model_counts_the_udp_header_nat_traversal_adds(tmp_path):
    """IKE's NAT detection puts kernel ESP in UDP by itself (RFC 3948): 8 B more per packet behind a NAT, none
    for ESP in UDP already (libipsec, `udp_encap`) or a VPN over UDP. The truth, measured: the committed VM run
    behind the NAT saw libreswan's and L2TP/IPsec's probes exactly that much larger than the model without it."""
    import lzma
    import sqlite3

    from vpnlab.run.tunnels import overhead_model

    run = ROOT / "runs" / "field-2026-vm-1500-1280"
    (tmp_path / "s.sqlite").write_bytes(lzma.decompress((run / "results.sqlite.xz").read_bytes()))
    db = sqlite3.connect(tmp_path / "s.sqlite")
    measured = dict(db.execute("SELECT scenario_id, MAX(value) FROM samples WHERE metric = 'overhead_bytes' "
                               "GROUP BY scenario_id"))
    db.close()
    plan = planned(parse_study((run / "study.yaml").read_text()))
    assert {s.vpn.driver for s in plan if s.id in measured} == {"libreswan", "l2tp"}
    for scenario in plan:
        if scenario.id in measured:
            assert overhead_model(scenario) == measured[scenario.id], scenario.label
    nat, plain = (parse_study(f"""
name: nat-t
vpns: [{{driver: strongswan, options: {{implementation: kernel}}}}, {{driver: strongswan, options: {{implementation: libipsec}}}},
       {{driver: libreswan, options: {{udp_encap: true}}}}, {{driver: wireguard}}, {{driver: l2tp}}]
links: [{link}]
workloads: [{{kind: ping}}]
""") for link in ("{nat: masquerade}", "{}"))
    grown = {s.vpn.label: overhead_model(s) - overhead_model(p) for s, p in zip(planned(nat), planned(plain))}
    assert grown == {"strongswan default psk kernel": 8, "strongswan default psk libipsec": 0,
                     "libreswan default psk": 0, "wireguard": 0, "l2tp/ipsec aes128-sha1": 8}, grown


def planned(study) -> list:
    """The study's scenarios, each layer's implementation chosen as a run chooses it where all are there:
    the one its options name, else the driver's first."""
    scenarios = make_plan(study).scenarios
    for scenario in scenarios:
        scenario.implementations = [
            chosen if (chosen := getattr(layer.options, "implementation", "auto")) != "auto"
            else DRIVERS[layer.driver].implementations(layer.options)[0].name for layer in scenario.vpn.layers]
    return scenarios
