"""A path's MTU and filtered ICMP (issue 47), without a testbed: the link's fields and their labels,
the scenario ids of links without them, the router's commands and counters, the binary search and
the bulk transfer's figures, each against a truth known by construction."""

import json

import pytest

from vpnlab.catalog import KINDS, METRICS
from vpnlab.core.errors import StudyError
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import Link, parse_study
from vpnlab.testbed import router
from vpnlab.workloads.path_mtu import SMALLEST, PathMtuOptions, bulk_values, largest_passing

STUDY = "name: t\nvpns: [{driver: none}, {driver: wireguard}]\nworkloads: [{kind: path-mtu}]\n"


def test_a_link_without_mtu_or_icmp_has_no_router_and_keeps_its_scenario_ids():
    plain = make_plan(parse_study(STUDY + "links: [{rate_mbit: 10}]\n")).scenarios[0]
    assert not plain.link.needs_router
    assert "mtu" not in plain.key["link"] and "icmp" not in plain.key["link"]
    assert plain.link.label == "10mbit"


@pytest.mark.parametrize("entry, label", [("{mtu: 1400}", "unshaped-mtu1400"),
                                          ("{mtu: 1280, icmp: blocked, rate_mbit: 8}", "8mbit-mtu1280-icmp-blocked"),
                                          ("{icmp: blocked}", "unshaped-icmp-blocked"),
                                          ("{name: narrow, mtu: 1400}", "narrow-mtu1400")])
def test_mtu_and_icmp_are_in_the_label_and_the_id(entry, label):
    scenario = make_plan(parse_study(STUDY + f"links: [{entry}]\n")).scenarios[0]
    assert scenario.link.needs_router
    assert scenario.link.label == label
    assert {"mtu", "icmp"} <= set(scenario.key["link"])


def test_mtu_and_icmp_sweep_into_distinct_scenarios():
    study = parse_study(STUDY + "links: [{mtu: [1400, 1280], icmp: [allowed, blocked]}]\n")
    assert [link.label for link in study.links] == ["unshaped-mtu1400", "unshaped-mtu1400-icmp-blocked",
                                                    "unshaped-mtu1280", "unshaped-mtu1280-icmp-blocked"]
    assert len({s.id for s in make_plan(study).scenarios}) == 8


@pytest.mark.parametrize("mtu", [576, 1280, 9000])
def test_the_mtu_limits_are_accepted(mtu):
    assert Link.model_validate({"mtu": mtu}).mtu == mtu


@pytest.mark.parametrize("entry, expect", [("{mtu: 575}", "links[0].mtu: Input should be greater than or equal to 576"),
                                           ("{mtu: 9001}", "links[0].mtu: Input should be less than or equal to 9000"),
                                           ("{icmp: off}", "links[0].icmp: Input should be 'allowed' or 'blocked'")])
def test_a_bad_mtu_or_icmp_names_the_field(entry, expect):
    with pytest.raises(StudyError) as err:
        parse_study(STUDY + f"links: [{entry}]\n")
    assert expect in str(err.value)


def test_stall_must_fit_in_the_deadline():
    assert PathMtuOptions(timeout_s=5, stall_s=4.9).stall_s == 4.9
    with pytest.raises(ValueError, match="stall_s"):
        PathMtuOptions(timeout_s=5, stall_s=5)


def test_the_kind_and_its_metrics_are_registered():
    assert KINDS["path-mtu"].primary == "path_mtu_bytes"
    expected = {"path_mtu_bytes": ("B", True), "bulk_stalled": ("0/1", False), "bulk_completed": ("0/1", True),
                "bulk_goodput_mbps": ("Mbit/s", True), "bulk_longest_gap_s": ("s", False),
                "wan_fragments": ("count", False)}
    assert {name: (METRICS[name].unit, METRICS[name].higher_is_better) for name in expected} == expected


# --- the binary search: a path that passes exactly up to a known size ----------------------------

@pytest.mark.parametrize("truth", [SMALLEST, 576, 1280, 1328, 1400, 1420, 1499, 1500])
def test_the_search_finds_the_largest_size_that_passes(truth):
    tried = []

    def passes(size):
        tried.append(size)
        return size <= truth

    assert largest_passing(passes, SMALLEST, 1500) == truth
    assert len(tried) <= 12  # log2(1500 - 68) + the first probe


def test_the_search_says_none_when_not_even_the_smallest_passes():
    assert largest_passing(lambda size: False, SMALLEST, 1500) is None
    assert largest_passing(lambda size: True, SMALLEST, 9000) == 9000


# --- the bulk transfer's figures ------------------------------------------------------------------

def test_a_completed_transfer():
    values = bulk_values({"bytes": 4_000_000, "seconds": 0.5, "longest_gap_s": 0.01, "complete": True}, 3, 10)
    assert values == {"bulk_completed": 1.0, "bulk_stalled": 0.0, "bulk_goodput_mbps": 64.0,
                      "bulk_longest_gap_s": 0.01}


def test_a_black_hole_transfer():
    """The handshake passed, no full-size segment did: nothing arrived before the deadline."""
    values = bulk_values({"bytes": 0, "seconds": 10.0, "longest_gap_s": 10.0, "complete": False}, 3, 10)
    assert values["bulk_stalled"] == 1.0 and values["bulk_completed"] == 0.0 and values["bulk_goodput_mbps"] == 0


def test_a_transfer_that_recovered_after_a_stall_completed_but_stalled():
    values = bulk_values({"bytes": 1_000_000, "seconds": 8.0, "longest_gap_s": 6.5, "complete": True}, 3, 10)
    assert values["bulk_stalled"] == 1.0 and values["bulk_completed"] == 1.0
    assert values["bulk_goodput_mbps"] == pytest.approx(1.0)


# --- the router -----------------------------------------------------------------------------------

def test_the_router_sets_the_mtu_on_its_routes_not_on_an_interface():
    lines = router.ip_commands(Link(mtu=1400), "198.19.0.1", "198.19.0.2", ("198.18.0.0/17", "198.18.128.0/17"))
    routes = [line for line in lines if line.startswith("route")]
    assert len(routes) == 4 and all(line.endswith(" mtu lock 1400") for line in routes)
    assert not any(" mtu " in line for line in lines if line.startswith("link"))
    assert "route add 198.18.128.0/17 via 198.19.0.2 dev w1 mtu lock 1400" in lines
    assert not any("mtu" in line for line in router.ip_commands(Link(icmp="blocked"), "a", "b", ("c", "d")))


def test_the_ruleset_drops_both_too_big_errors_on_output_and_forward():
    rules = router.nft_ruleset()
    for hook in ("output", "forward"):
        assert f"type filter hook {hook} priority 0; policy accept;" in rules
    assert rules.count("icmp type destination-unreachable icmp code frag-needed counter drop") == 2
    assert rules.count("icmpv6 type packet-too-big counter drop") == 2


def test_the_dropped_count_sums_the_rules_counters():
    listed = {"nftables": [{"metainfo": {"json_schema_version": 1}},
                           {"table": {"family": "inet", "name": router.TABLE}},
                           {"rule": {"chain": "output", "expr": [{"match": {}}, {"counter": {"packets": 3, "bytes": 1728}},
                                                                 {"drop": None}]}},
                           {"rule": {"chain": "output", "expr": [{"counter": {"packets": 0, "bytes": 0}}]}},
                           {"rule": {"chain": "forward", "expr": [{"counter": {"packets": 2, "bytes": 1152}}]}}]}
    assert router.dropped_icmp(json.dumps(listed)) == 5


def test_fragments_are_read_from_snmp():
    snmp = ("Ip: Forwarding DefaultTTL InReceives FragOKs FragFails FragCreates\n"
            "Ip: 1 64 100 3 0 7\nIcmp: InMsgs\nIcmp: 0\n")
    assert router.fragments_created(snmp) == 7


# --- the probes, against a path whose behaviour is scripted -----------------------------------------

class _Path:
    """A source node whose DF pings cross up to `mtu` bytes; above it the router's ICMP error comes back
    (`icmp`), or nothing; `stalls`: after the first unanswered probe, nothing crosses any more (a tunnel
    over TCP whose own stream a too-big segment holds up)."""

    def __init__(self, mtu, icmp=True, stalls=False):
        self.mtu, self.icmp, self.stalls, self.stalled, self.sent = mtu, icmp, stalls, False, []

    def run(self, argv, check=False, timeout=None):
        import subprocess

        size = int(argv[argv.index("-s") + 1]) + 28
        self.sent.append(size)
        if size <= self.mtu and not self.stalled:
            return subprocess.CompletedProcess(argv, 0, "64 bytes from x: icmp_seq=1 ttl=62 time=0.1 ms\n", "")
        if self.icmp and not self.stalled:
            return subprocess.CompletedProcess(argv, 1, f"From r icmp_seq=1 Frag needed and DF set (mtu = {self.mtu})", "")
        self.stalled = self.stalls
        return subprocess.CompletedProcess(argv, 1, "1 packets transmitted, 0 received", "")


def _probe(path, interface_mtu=1500):
    from types import SimpleNamespace
    from unittest import mock

    from vpnlab.workloads import path_mtu

    ctx = SimpleNamespace(bed=SimpleNamespace(source=path, sink_ip="198.18.128.2"))
    with mock.patch.object(path_mtu, "interface_mtu", lambda ctx: interface_mtu):
        return path_mtu.probe_path_mtu(ctx)


@pytest.mark.parametrize("icmp", [True, False])
def test_the_probes_find_a_scripted_paths_mtu(icmp):
    path = _Path(1400, icmp=icmp)
    found, lines = _probe(path)
    assert found == 1400
    assert ("refused: Frag needed" in lines) == icmp and ("no reply" in lines) == (not icmp)
    if not icmp:  # each unanswered size is tried three times, and the smallest checked after it
        assert path.sent.count(1401) == 3 and path.sent.count(68) >= 2


def test_a_path_that_stalls_as_a_whole_has_no_mtu():
    from vpnlab.workloads.path_mtu import PathStalled

    with pytest.raises(PathStalled) as stalled:
        _probe(_Path(1400, icmp=False, stalls=True))
    assert str(stalled.value).splitlines()[-1].startswith("68 no reply after")


@pytest.mark.parametrize("link, mtu, noted", [("{mtu: 1400, icmp: blocked}", 1420, "ICMP blocked there"),
                                              ("{mtu: 1400}", 1420, "ICMP allowed there"),
                                              ("{mtu: 1400}", 1340, None), ("{rate_mbit: 10}", 1420, None)])
def test_a_tunnel_too_big_for_the_path_is_noted(link, mtu, noted):
    from types import SimpleNamespace

    from vpnlab.run.tunnels import TunnelStage, path_note

    scenario = next(s for s in make_plan(parse_study(STUDY + f"links: [{link}]\n")).scenarios if s.vpn.layers)
    scenario.implementations = ["wireguard-go"]
    stage = TunnelStage(tunnels=[SimpleNamespace(mtu=mtu)])
    path_note(stage, scenario)
    if noted is None:
        assert stage.notes == []
    else:  # +60 on the WAN for a full-size packet (WireGuard's padding stops at the MTU)
        assert stage.notes == [f"layer 0 (wireguard) has MTU {mtu}: its full-size packets ({mtu + 60} B on the WAN) "
                               "are bigger than the path's MTU of 1400 in the middle of the WAN: they cross only "
                               f"fragmented or once the VPN finds the path's MTU ({noted})"]
