"""PPTP over a shaped link, in the VM: TCP through it carries about what the link carries.

A 2 Mbit/s tbf drops packets whenever TCP overfills its queue. By default pptp-linux then holds
every GRE packet that follows a lost one for 0.3 s, in case the missing one arrives late, and TCP
sees each hold as a stall: 1.20 Mbit/s towards the client against no VPN's 1.86 (65%). The driver
passes them on at once (`pptp --nobuffer`, as RFC 2637 4.4 allows): 1.80 and 1.85 Mbit/s, 98% of
no VPN (VM with software emulation, 2 repetitions of 4 s each, on a machine with a load of 5-7).

The flow runs from the gateway to the client (`reverse`): that way the receiving GRE end is the
client's, which the driver controls. The other way it is pptpd's, whose 0.3 s hold is a constant
of PoPToP 1.4.0 with no switch (0.1-0.9 Mbit/s that way before and after): not asserted here.
"""

import subprocess

import pytest

from vpnlab import vm
from vpnlab.plan import make_plan, place
from vpnlab.runner import Runner
from vpnlab.store import Store
from vpnlab.study import parse_study

STUDY = """
name: pptp-shaped
topology: remote-access
repetitions: 1
vpns: [{driver: none}, {driver: pptp}]
links: [{name: 2mbit, rate_mbit: 2}]
workloads: [{kind: tcp, duration_s: 4, omit_s: 1, reverse: true}]
"""
# Before the fix PPTP got at most 67% of no VPN this way (4 samples, with and without 10 ms of
# delay), after it at least 86% (97-98% without delay): 80% tells the two apart and leaves 17
# points for a busy machine, also from one 4-second sample each (a VM repetition costs a minute). PPTP's own ceiling here is 1348 of 1458 bytes per frame against no
# VPN's 1448 of 1514, 97%.
SHARE = 0.8


def our_qemus() -> set[str]:
    out = subprocess.run(["pgrep", "-a", "-f", f"{vm.QEMU} -nodefaults"], capture_output=True, text=True).stdout
    return set(out.splitlines())


@pytest.mark.integration
def test_pptp_carries_tcp_over_a_shaped_link_about_as_well_as_no_vpn(tmp_path, no_leftovers):
    if vm.available():
        pytest.skip(vm.available())
    before = our_qemus()
    plan = make_plan(parse_study(STUDY))
    caps, problems, in_vm = place(plan, "vm")
    assert problems == {}
    assert in_vm == {s.id for s in plan.scenarios}
    Runner(plan, tmp_path, caps, progress=False, in_vm=in_vm).run()
    assert our_qemus() <= before, "an emulator was left running"

    store = Store.open_dir(tmp_path)
    goodput = {}
    for row in store.scenarios():
        assert row.status == "done", (row.vpn_label, row.failure)
        values = store.values(row.id, "throughput_mbps")
        assert len(values) == 1, (row.vpn_label, values)
        goodput[row.vpn_label] = sum(values) / len(values)
    store.close()
    none, pptp = goodput["none"], goodput["pptp mppe-128"]
    assert none > 1.6, goodput  # the link itself: 95.7% of 2 Mbit/s less what the emulator costs
    assert pptp >= SHARE * none, goodput
