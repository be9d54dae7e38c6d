"""Seed studies on real hosts with a full kernel (kernel_lab.py: the hosts lab inside one guest of the
VM backend): a short version of small-business-2011 and narayan-2008, whose scenarios need PPP and
netem, runs from its own file with `vpnlab run --inventory`, every scenario on the hosts, none refused
(jaha-2014: test_hosts_kernel.py, so that the two guests take about as long; the others:
test_hosts_seeds.py, on this machine's hosts). Run as a program (`python test_hosts_kernel_seeds.py
WORK`) this file is the guest's side.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hosts_harness import seed_cut, seed_drivers
from kernel_lab import TIMEOUT_S, boot, check_guest_left_nothing, check_seed_ran, guest_main

pytestmark = pytest.mark.timeout(TIMEOUT_S)

# Seed studies from their own files, shortened with --set (hosts_harness.seed_cut): two repetitions,
# their two ends mapped to the inventory's hosts, their links (rate, delay, queue, background) shaped on
# them, and a subset of their scenarios: VPNs that need the full kernel (no VPN and the rest run on
# hosts in test_hosts_seeds.py). Each with the metrics every one of its scenarios must record twice.
# small-business: PPTP over its 8 Mbit/s link with its delay, queue and office background (netem and
# the background on the hosts), an HTTP download. narayan: PPTP at its 8 KB window over its
# 100 Mbit/s link with 0.47 ms of delay.
SEED_CUTS = {
    "small-business-2011": {"vpns": [1], "links": [0], "workloads": [(0, {"protocol": "http", "data": "random"})],
                            "metrics": ("throughput_mbps", "background_kbps")},
    "narayan-2008": {"vpns": [2], "links": [0], "workloads": [(0, {"window": "8K", "duration_s": 4, "omit_s": 1})],
                     "metrics": ("throughput_mbps",)},
}
CASES = {f"seed-{name}": (name, seed_cut(name, cut)) for name, cut in SEED_CUTS.items()}


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """One boot of the VM for the whole file: the guest runs this file as a program."""
    drivers = tuple(dict.fromkeys(d for name, cut in SEED_CUTS.items() for d in seed_drivers(name, cut)))
    return boot(tmp_path_factory.mktemp("hosts-kernel-seeds"), Path(__file__).resolve(), drivers)


@pytest.mark.integration
def test_one_guest_holds_the_hosts_and_leaves_nothing(guest):
    check_guest_left_nothing(guest)


@pytest.mark.integration
@pytest.mark.parametrize("seed", list(SEED_CUTS))
def test_a_shortened_seed_study_runs_with_every_scenario_on_the_hosts(guest, seed):
    check_seed_ran(guest, seed, SEED_CUTS[seed])


if __name__ == "__main__":
    sys.exit(guest_main(Path(sys.argv[1]), CASES))
