"""A seed study on real hosts with a full kernel (kernel_lab.py: the hosts lab inside one guest of
the VM backend): jaha-2014, whose L2TP/IPsec needs PPP, L2TP and kernel ESP and whose WLAN link needs
netem, shortened and run from its own file with `vpnlab run --inventory`, every scenario on the hosts,
none refused. The other seeds' cuts run on this machine's hosts (test_hosts_seeds.py); PPTP and
libreswan on hosts with a full kernel: test_hosts_kernel.py. A guest of its own rather than a case
of that file's: the suite's three other guests take 6-7 min each two at a time, and two short ones
beside them end sooner than one long one.
Run as a program (`python test_hosts_kernel_seed.py WORK`) this file is the guest's side.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hosts_harness import seed_cut, seed_drivers
from kernel_lab import TIMEOUT_S, boot, check_guest_left_nothing, check_seed_ran, guest_main

pytestmark = pytest.mark.timeout(TIMEOUT_S)

# jaha-2014 shortened (hosts_harness.seed_cut), two repetitions, with the metrics each must record
# twice: L2TP/IPsec over its WLAN link (24 Mbit/s, 1 ms with 0.5 ms of jitter, 0.1% loss: netem on the
# hosts), 20 pings of 64 bytes.
SEED, CUT = "jaha-2014", {"vpns": [3], "links": [0], "workloads": [(3, {"size": 64, "count": 20})],
                          "metrics": ("rtt_avg_ms", "cpu_vpn_gateway_pct")}
CASES = {f"seed-{SEED}": (SEED, seed_cut(SEED, CUT))}


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """One boot of the VM for the whole file: the guest runs this file as a program."""
    return boot(tmp_path_factory.mktemp("hosts-kernel-seed"), Path(__file__).resolve(), tuple(seed_drivers(SEED, CUT)))


@pytest.mark.integration
def test_one_guest_holds_the_hosts_and_leaves_nothing(guest):
    check_guest_left_nothing(guest)


@pytest.mark.integration
def test_a_shortened_jaha_runs_with_every_scenario_on_the_hosts(guest):
    check_seed_ran(guest, SEED, CUT)


if __name__ == "__main__":
    sys.exit(guest_main(Path(sys.argv[1]), CASES))
