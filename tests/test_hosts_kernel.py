"""Real hosts with a full kernel (kernel_lab.py: the hosts lab inside one guest of the VM backend,
whose Debian kernel has what this machine's lacks): netem on the hosts' WAN; libreswan (kernel ESP) and
kernel WireGuard between hosts, each proved encrypted on their WAN with its modelled overhead; a
shortened small-business-2011 (PPTP over its shaped link with the office background). PPTP and
L2TP/IPsec between hosts: the seeds' cuts in test_hosts_kernel_seeds.py, checked the same way.
Run as a program (`python test_hosts_kernel.py WORK`) this file is the guest's side.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from hosts_harness import check_overhead, seed_cut, seed_drivers
from kernel_lab import HOSTS, TIMEOUT_S, boot, case_ran, check_guest_left_nothing, check_seed_ran, guest_main

pytestmark = pytest.mark.timeout(TIMEOUT_S)

# netem on the hosts' own WAN interfaces: 10 ms each way is a 20 ms round trip; 2% loss one way
# over 1000 UDP datagrams (1.12 Mbit/s x 10 s / 1400 B: 100 a second, few enough that a guest starved
# of CPU by a busy machine seldom drops one itself). No VPN: the link alone.
SHAPED = """\
name: hosts-kernel-shaped
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
order: listed
vpns: [{driver: none}]
links: [{name: wan-netem, delay_ms: 10, loss_pct: 2, shape: true}]
workloads:
  - {kind: ping, count: 50, interval_s: 0.02}
  - {kind: udp, rate_mbit: 1.12, size: 1400, duration_s: 10}
"""

# Each tunnel between the two hosts over a delayed link; ping proves it (encrypted on the hosts'
# WAN, overhead as modelled) and measures the round trip through it. (PPTP and L2TP/IPsec, which
# the seeds' cuts run on hosts with the same checks, are not repeated here: a scenario on hosts in
# an emulated guest costs over a minute.)
TUNNELS = """\
name: hosts-kernel-tunnels
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
order: listed
vpns:
  - driver: wireguard
  - driver: libreswan
links: [{name: wan-10ms, delay_ms: 5, shape: true}]
workloads: [{kind: ping, count: 20, interval_s: 0.05}]
"""
TUNNEL_DRIVERS = [vpn["driver"] for vpn in yaml.safe_load(TUNNELS)["vpns"]]
# small-business-2011 shortened (hosts_harness.seed_cut): PPTP over its 8 Mbit/s link with its delay,
# queue and office background (netem and the background on the hosts), an HTTP download twice.
SMALL_BUSINESS = {"vpns": [1], "links": [0], "workloads": [(0, {"protocol": "http", "data": "random"})],
                  "metrics": ("throughput_mbps", "background_kbps")}
CASES = {"shaped": (SHAPED, []), "tunnels": (TUNNELS, []), "seed-small-business-2011": ("small-business-2011", seed_cut("small-business-2011", SMALL_BUSINESS))}


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """One boot of the VM for the whole file: the guest runs this file as a program."""
    return boot(tmp_path_factory.mktemp("hosts-kernel"), Path(__file__).resolve(),
                tuple(dict.fromkeys([*TUNNEL_DRIVERS, *seed_drivers("small-business-2011", SMALL_BUSINESS)])))


@pytest.mark.integration
def test_one_guest_holds_the_hosts_and_leaves_nothing(guest):
    check_guest_left_nothing(guest)


@pytest.mark.integration
def test_netem_delays_and_loses_on_the_hosts_wan(guest):
    case_ran(guest, "shaped")
    scenarios, values = guest.scenarios("shaped"), guest.values("shaped")
    assert {k: (s["status"], s["hosts"]) for k, s in scenarios.items()} == {
        k: ("done", HOSTS) for k in scenarios} and len(scenarios) == 2
    ping, udp = (next(w for _, w in scenarios if w.startswith(kind)) for kind in ("ping", "udp"))
    # 10 ms each way on each host's WAN interface: never less; an emulated guest adds ~0.5-1.5 ms of its
    # own, more when the suite's other tests share the machine, but a delay set twice would give 40
    rtt_min = values[("none", ping, "rtt_min_ms")][0]
    assert 20 <= rtt_min <= 30, rtt_min
    # 2% set: 20 of 1000 datagrams expected; fewer than 8 lost by netem has a chance of 0.07%. Above
    # 4.5% leaves 2.5 points for what a starved guest drops itself (2.6% with 1% set at 250 datagrams
    # a second, with a load of 19 on this machine's 2 cores)
    loss = values[("none", udp, "udp_loss_pct")][0]
    assert 0.8 <= loss <= 4.5, loss


@pytest.mark.integration
@pytest.mark.parametrize("driver", TUNNEL_DRIVERS)
def test_a_tunnel_between_hosts_with_a_full_kernel(guest, driver):
    """Through the tunnel between the two hosts, encrypted on their WAN (the scenario's proof), with
    the modelled overhead, no ping lost, the delay of the shaped link and the gateway's CPU measured."""
    case_ran(guest, "tunnels")
    found = {label: s for (label, _), s in guest.scenarios("tunnels").items() if s["vpn"] == driver}
    assert len(found) == 1, found
    (label, scenario), = found.items()
    assert (scenario["status"], scenario["failure"], scenario["hosts"]) == ("done", None, HOSTS), scenario
    values = {metric: v[0] for (vpn, _, metric), v in guest.values("tunnels").items() if vpn == label}
    check_overhead(driver, [values["overhead_bytes"]], [values["overhead_model_bytes"]])
    assert values["ping_loss_pct"] == 0
    assert values["rtt_min_ms"] >= 10  # 5 ms each way on the hosts' WAN
    assert "cpu_vpn_gateway_pct" in values


@pytest.mark.integration
def test_a_shortened_small_business_runs_with_every_scenario_on_the_hosts(guest):
    check_seed_ran(guest, "small-business-2011", SMALL_BUSINESS)


if __name__ == "__main__":
    sys.exit(guest_main(Path(sys.argv[1]), CASES))
