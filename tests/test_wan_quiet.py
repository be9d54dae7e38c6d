"""A fresh testbed's links carry only what a study sends: no IPv6 start-up (MLD reports, DAD, router
solicitations), whose frames counted in the WAN's figures by how soon after its link came up a workload
began (topology.py; bench emulation found pings' frames 5-8% smaller here than in a VM guest)."""

import time

import pytest

from vpnlab.plan.study import Link
from vpnlab.testbed.topology import Layout, Testbed

pytestmark = pytest.mark.integration

# IPv6 on a link that comes up sends MLD reports and a DAD probe at once, more reports and a router
# solicitation about a second later (seen here on the WAN of a testbed built with IPv6 on)
QUIET_S = 2.5


def test_an_idle_wan_sends_nothing_once_up(state):
    bed = Testbed.build(state, Layout.for_topology("remote-access", 1), Link(), tag="q")
    try:
        before = bed.wan_counters()
        time.sleep(QUIET_S)
        after = bed.wan_counters()
    finally:
        bed.destroy()
    assert after == before
