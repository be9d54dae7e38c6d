"""Planning: the cartesian product, stable ids, order, and what this machine lacks."""
from datetime import datetime, timezone

import pytest

from vpnlab.machines.capabilities import Capabilities
from vpnlab.plan.scenarios import make_plan, round_order
from vpnlab.core.errors import VpnlabError
from vpnlab.plan.placement import check_plan
from vpnlab.plan.study import parse_study

STUDY = """
name: p
repetitions: 2
vpns: [{driver: none}, {driver: wireguard}]
links: [{rate_mbit: 2}, {rate_mbit: 8, delay_ms: 20}]
workloads: [{kind: tcp, duration_s: 3}, {kind: ping, count: 5}]
"""


def test_plan_is_the_cartesian_product():
    plan = make_plan(parse_study(STUDY))
    assert len(plan.scenarios) == 2 * 2 * 2
    assert [s.index for s in plan.scenarios] == list(range(8))
    assert len({s.id for s in plan.scenarios}) == 8


def test_ids_are_stable_and_each_round_has_its_own_seeded_order():
    listed = make_plan(parse_study(STUDY + "order: listed\n"))
    shuffled = make_plan(parse_study(STUDY + "order: shuffled\nseed: 7\n"))
    assert [s.id for s in listed.scenarios] == [s.id for s in shuffled.scenarios]
    rounds = [[s.id for s in round_order(shuffled.study, shuffled.scenarios, r)] for r in range(1, 6)]
    assert all(sorted(r) == sorted(rounds[0]) for r in rounds)  # every scenario once per round
    assert len({tuple(r) for r in rounds}) > 1                    # a new order each round
    again = make_plan(parse_study(STUDY + "order: shuffled\nseed: 7\n"))
    assert [s.id for s in round_order(again.study, again.scenarios, 3)] == rounds[2]
    assert [s.id for s in round_order(listed.study, listed.scenarios, 3)] == [s.id for s in listed.scenarios]


def test_estimate_counts_repetitions():
    plan = make_plan(parse_study(STUDY))
    tcp = next(s for s in plan.scenarios if s.workload.kind == "tcp")
    assert tcp.estimate_s() > 2 * 3
    assert tcp.repetitions.max == 2 and not tcp.repetitions.adaptive
    assert plan.estimate_s() == sum(s.estimate_s() for s in plan.scenarios)


def test_a_transfer_in_the_vm_is_estimated_at_emulations_pace_not_the_links():
    plan = make_plan(parse_study("""
name: e
repetitions: {min: 2, max: 5, ci_target_pct: 5}
vpns: [{driver: none}]
links: [{rate_mbit: 1000}]
workloads: [{kind: transfer, protocol: ftp, size: 32M}]
"""))
    transfer = plan.scenarios[0]
    here, there = transfer.estimate_s(), transfer.estimate_s(in_vm=True)
    assert here < 10  # 2 x 32 MB at ~900 Mbit/s
    assert there > 2 * 32e6 * 8 / 20e6  # at most ~20 Mbit/s through an emulated tunnel
    assert transfer.estimate_s(in_vm=True, most=True) > 2 * there  # five repetitions, not two
    from vpnlab.plan.scenarios import VM_BOOT_S
    assert plan.estimate_s({transfer.id}) == there + VM_BOOT_S  # one boot for the VM's scenarios
    assert plan.estimate_s() == here
    assert plan.estimate_s(most=True) == transfer.estimate_s(most=True) == here * 5 / 2


def caps(**features):
    base = dict(netns=True, veth=True, tun=True, tbf=True, netem=False, wireguard=False)
    base.update(features)
    tools = {t: f"/usr/bin/{t}" for t in ("iperf3", "ping", "wg", "wireguard-go")}
    return Capabilities("test", base, tools)


def test_missing_netem_names_the_scenarios():
    plan = make_plan(parse_study(STUDY))
    problems = check_plan(plan, caps())
    assert len(problems) == 4  # the delayed link, for each vpn and workload
    assert all("netem" in p for p in problems.values())
    assert all(plan.scenarios[i].link.needs_netem for i in problems)
    assert not check_plan(plan, caps(netem=True))


def test_drop_renumbers_what_is_left():
    plan = make_plan(parse_study(STUDY))
    plan.drop(check_plan(plan, caps()))
    assert len(plan.scenarios) == 4
    assert [s.index for s in plan.scenarios] == [0, 1, 2, 3]
    assert not any(s.link.needs_netem for s in plan.scenarios)


def test_implementation_is_chosen_from_the_kernel():
    plan = make_plan(parse_study(STUDY))
    check_plan(plan, caps(netem=True))
    wg = next(s for s in plan.scenarios if s.vpn.driver == "wireguard")
    assert wg.implementations == ["wireguard-go"]
    check_plan(plan, caps(netem=True, wireguard=True))
    assert wg.implementations == ["kernel"]


def test_forcing_an_absent_implementation_is_a_problem():
    plan = make_plan(parse_study(STUDY.replace("{driver: wireguard}",
                                               "{driver: wireguard, options: {implementation: kernel}}")))
    problems = check_plan(plan, caps(netem=True))
    assert any("feature 'wireguard'" in p for p in problems.values())


def test_auto_backend_sends_to_the_vm_only_what_this_kernel_cannot_run():
    from vpnlab.machines.capabilities import vm_capabilities
    from vpnlab.plan.placement import assign_backends

    plan = make_plan(parse_study(STUDY))
    host = caps()
    vm_caps = vm_capabilities(host, "6.1-test")
    problems, in_vm = assign_backends(plan, host, "auto", vm_caps, None)
    assert problems == {}
    assert in_vm == {s.id for s in plan.scenarios if s.link.needs_netem}
    # in the VM the kernel has WireGuard, so the delayed WireGuard scenarios use it there
    assert {tuple(s.implementations) for s in plan.scenarios if s.id in in_vm and s.vpn.driver == "wireguard"} == {("kernel",)}
    problems, in_vm = assign_backends(plan, host, "vm", vm_caps, None)
    assert problems == {} and len(in_vm) == len(plan.scenarios)
    problems, in_vm = assign_backends(plan, host, "netns", vm_caps, None)
    assert set(problems) == {s.index for s in plan.scenarios if s.link.needs_netem} and not in_vm


def test_without_a_vm_the_problem_says_why():
    from vpnlab.plan.placement import assign_backends

    plan = make_plan(parse_study(STUDY))
    problems, in_vm = assign_backends(plan, caps(), "auto", None, "'qemu-system-x86_64' is not installed")
    assert not in_vm and len(problems) == 4
    assert all("netem" in p and "qemu-system-x86_64" in p for p in problems.values())


def test_scenarios_that_lack_the_same_things_share_one_line_of_the_error():
    from vpnlab.plan.placement import Placement

    plan = make_plan(parse_study(STUDY))
    cannot = check_plan(plan, caps())  # no netem: the delayed link's scenarios lack it alike
    assert len(cannot) == 4 and len(set(cannot.values())) == 4  # each message names its scenario
    said = Placement(caps(), cannot=cannot).said()
    first = min(cannot)
    assert said == [f"{cannot[first].split(' needs: ')[0]} and 3 more scenarios need: "
                    f"{cannot[first].split(' needs: ')[1]}"]
    with pytest.raises(VpnlabError, match="and 3 more scenarios need: .*netem"):
        Placement(caps(), cannot=cannot).enforce(plan, drop=False)


def test_a_tool_missing_on_the_host_is_missing_in_the_vm_too():
    from vpnlab.machines.capabilities import vm_capabilities
    from vpnlab.plan.placement import assign_backends

    plan = make_plan(parse_study(STUDY.replace("{driver: wireguard}", "{driver: pptp}")))
    host = caps()  # no pptpd, pptp or pppd installed
    problems, in_vm = assign_backends(plan, host, "auto", vm_capabilities(host, "6.1-test"), None)
    pptp = {s.index for s in plan.scenarios if s.vpn.driver == "pptp"}
    assert set(problems) == pptp and all("even in the VM" in problems[i] and "pptpd" in problems[i] for i in pptp)


def test_a_vpn_measured_in_the_vm_gets_a_baseline_measured_there_too():
    from vpnlab.plan.placement import add_vm_twins

    plan = make_plan(parse_study(STUDY))
    vpn = next(s for s in plan.scenarios if s.vpn.driver == "wireguard" and not s.link.needs_netem)
    base = next(s for s in plan.scenarios if not s.vpn.layers and s.group == vpn.group)
    delayed_base = next(s for s in plan.scenarios if not s.vpn.layers and s.link.needs_netem)
    delayed_vpn = next(s for s in plan.scenarios if s.vpn.layers and s.group == delayed_base.group)
    # the undelayed VPN goes to the VM, its baseline stays here; the delayed pair goes together
    twins = add_vm_twins(plan, {vpn.id, delayed_base.id, delayed_vpn.id})
    assert len(twins) == 1
    twin = plan.scenarios[-1]
    assert twin.id in twins and twin.id != base.id and twin.vm_twin
    assert twin.group == base.group and twin.index == len(plan.scenarios) - 1
    assert twin.label.startswith("none (in the VM) | ")
    # the guest rebuilds the same twin from the study alone
    again = make_plan(parse_study(STUDY))
    add_vm_twins(again, {s.id for s in again.scenarios if s.vpn.layers})
    assert twin.id in {s.id for s in again.scenarios}


def test_emulation_keeps_the_bandwidth_delay_product_and_the_identity():
    from vpnlab.plan.scenarios import EMULATED_RATE_MBIT

    plan = make_plan(parse_study("name: e\nvpns: [{driver: none}]\nlinks: [{rate_mbit: 100, delay_ms: 2, jitter_ms: 1},"
                                 " {rate_mbit: 8, delay_ms: 20}]\nworkloads: [{kind: tcp}]\n"))
    fast, slow = plan.scenarios
    ident = fast.id
    note = fast.scale_for_emulation()
    assert fast.id == ident and fast.link.rate_mbit == 100           # the study's link and identity stay
    run = fast.link_as_run
    assert run.rate_mbit == EMULATED_RATE_MBIT
    assert run.rate_mbit * run.delay_ms == pytest.approx(100 * 2)    # same bandwidth-delay product
    assert run.jitter_ms == pytest.approx(10)
    assert "scaled for software emulation" in note and "100" in note
    assert slow.scale_for_emulation() is None and slow.link_as_run is slow.link


def test_emulation_offers_udp_the_same_share_of_the_slowed_link():
    plan = make_plan(parse_study("name: e\nvpns: [{driver: none}]\nlinks: [{rate_mbit: 24, delay_ms: 1}]\n"
                                 "workloads: [{kind: udp, rate_mbit: 20}, {kind: tcp}]\n"))
    udp, tcp = plan.scenarios
    ident = udp.id
    note = udp.scale_for_emulation()
    assert udp.workload_as_run.rate_mbit == pytest.approx(20 / 2.4)  # 20 of 24 Mbit/s: 8.3 of 10
    assert udp.workload.rate_mbit == 20 and udp.id == ident and udp.workload.label == "udp-20M-1400B"
    assert "udp-20M-1400B load offered at 0.416667x its rate" in note
    assert "offered" not in tcp.scale_for_emulation() and tcp.workload_as_run is tcp.workload  # a window stays


def test_a_link_with_background_counts_its_servers_start_and_its_share_of_the_link():
    plan = make_plan(parse_study("""
name: b
repetitions: 1
vpns: [{driver: none}]
links: [{rate_mbit: 2, background: [none, office]}]
workloads: [{kind: transfer, protocol: http, size: 1M}]
"""))
    quiet, office = sorted(plan.scenarios, key=lambda s: bool(s.link.background))
    from vpnlab.workloads.background import SETUP_S, VM_SETUP_S
    # 1 MiB at 90% of the 2 Mbit/s, or of the 1.22 the office mix's 780 kbit/s leave
    megabits = 2**20 * 8 / 1e6
    assert quiet.repetition_s() == pytest.approx(megabits / 1.8 + 1)
    assert office.repetition_s() == pytest.approx(megabits / (0.9 * 1.22) + 1)
    assert office.estimate_s() == pytest.approx(quiet.estimate_s() + SETUP_S + office.repetition_s() - quiet.repetition_s())
    assert office.estimate_s(in_vm=True) - quiet.estimate_s(in_vm=True) > VM_SETUP_S


def test_a_resumed_studys_pace_is_timed_between_repetitions_of_one_sitting():
    from vpnlab.plan.scenarios import PACE_MIN_REPETITIONS, measured_pace
    plan = make_plan(parse_study(STUDY))
    tcp = next(s for s in plan.scenarios if s.workload.kind == "tcp")
    each = tcp.estimate_s(repetitions=1)

    def at(seconds):
        return datetime.fromtimestamp(1.8e9 + seconds, timezone.utc).isoformat()

    first = [(1, tcp.id, at(i * 2 * each)) for i in range(PACE_MIN_REPETITIONS + 1)]  # twice as slow
    # the next sitting: its first repetition comes after a pause and a VM boot, not timed
    second = [(2, tcp.id, at(1e5 + i * each)) for i in range(PACE_MIN_REPETITIONS + 1)]
    pause = [(2, tcp.id, at(2e5))]  # a long gap within a sitting: a pause, not timed
    timed, factor = measured_pace(first + second + pause, plan.scenarios, set())
    assert timed == 2 * PACE_MIN_REPETITIONS
    assert factor == pytest.approx(1.5)
    assert measured_pace(first[:PACE_MIN_REPETITIONS], plan.scenarios, set()) is None  # too few to tell
    assert measured_pace([(1, "s-unknown", at(i)) for i in range(30)], plan.scenarios, set()) is None
