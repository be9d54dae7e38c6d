"""The VM backend's remote-access study, in one boot: netem's delay and loss in the guest; PPTP and L2TP
(with and without IPsec), which need a full kernel (libreswan's kernel ESP is the site-to-site study's, with
certificates, and the hosts' guest's, with its default proposal); a VPN measured in the VM graded
against no VPN measured there (its twin); what the guest measured while another run went on, flagged.
Each test reads the study's results."""

import pytest

from vpnlab.analyse.analysis import summarise
from vpnlab.core.flags import any_of
from vpnlab.store.legacy_flags import read_flags
from vpnlab.store import Store

from hosts_harness import check_overhead
from vm_harness import run_in_vm


# Remote access, one boot: netem's delay and loss; PPTP and L2TP (with and without IPsec) through a
# delayed link; PPTP over a shaped link against no VPN, whose baseline runs here and again
# in the VM (its twin), which grades the VPN. PPTP with MPPE-128 runs only on the shaped link: its
# proof and overhead are checked there (each scenario under emulation costs about half a minute).
REMOTE_ACCESS = """
name: vm-remote-access
repetitions: 1
topology: remote-access
vpns:
  - driver: none
  - driver: pptp
  - {driver: pptp, options: {mppe: "40"}}
  - driver: l2tp
  - {driver: l2tp, options: {ipsec: false}}
links:
  - {name: wan-20ms, delay_ms: 10}
  - {name: wan-loss, loss_pct: 1}
  - {name: 2mbit, rate_mbit: 2}
workloads:
  - {kind: ping, count: 100, interval_s: 0.02}
  - {kind: udp, rate_mbit: 2.8, size: 1400, duration_s: 4}
  - {kind: tcp, duration_s: 4, omit_s: 1, reverse: true}
"""
# The UDP stream is 1000 datagrams (2.8 Mbit/s x 4 s / 1400 B), as many as at 1.12 Mbit/s for 10 s.
REMOTE_ACCESS_KEEP = {
    ("none", "wan-20ms", "ping"), ("none", "wan-loss", "ping"), ("none", "wan-loss", "udp"),
    ("none", "2mbit", "tcp"), ("pptp mppe-128", "2mbit", "tcp"),
    *{(vpn, "wan-20ms", "ping") for vpn in ("pptp mppe-40", "l2tp/ipsec aes128-sha1", "l2tp")},
}


def _key(scenario) -> tuple[str, str, str]:
    return scenario.vpn_label, scenario.link.label, scenario.workload.kind


@pytest.fixture(scope="module")
def remote_access(tmp_path_factory):
    return run_in_vm(REMOTE_ACCESS, tmp_path_factory.mktemp("vm-remote-access"),
                     keep=lambda s: _key(s) in REMOTE_ACCESS_KEEP,
                     host=lambda s: _key(s) == ("none", "2mbit", "tcp"), beside=True)


@pytest.mark.integration
def test_netem_delays_and_loses_in_the_vm(remote_access):
    values = remote_access.values
    # netem: 10 ms each way is a 20 ms round trip, never less; an emulated guest adds ~0.5-1.5 ms of its
    # own, more when the suite's other tests share the machine, but a delay set twice would give 40,
    # and the link with loss alone adds none
    rtt_min = values[("none", "wan-20ms", "ping", "rtt_min_ms")]
    assert 20 <= rtt_min <= 30, rtt_min
    assert values[("none", "wan-loss", "ping", "rtt_min_ms")] < 10
    # 1% set one way over 1000 datagrams: 10 expected; fewer than 3 lost by netem has a chance of 0.3%.
    # Above 3.5% leaves 2.5 points for what a guest starved by a busy machine drops itself
    loss = values[("none", "wan-loss", "udp", "udp_loss_pct")]
    assert 0.2 <= loss <= 3.5, loss


@pytest.mark.integration
def test_pptp_and_l2tp_with_and_without_ipsec_in_the_vm(remote_access):
    values, notes = remote_access.values, remote_access.notes
    # the tunnels: proof passed (status done), overhead as modelled, traffic through
    for key, overhead in ((("pptp mppe-128", "2mbit", "tcp"), 44), (("pptp mppe-40", "wan-20ms", "ping"), 44),
                          (("l2tp/ipsec aes128-sha1", "wan-20ms", "ping"), 84), (("l2tp", "wan-20ms", "ping"), 38)):
        label = key[0]
        measured = values[(*key, "overhead_bytes")]
        check_overhead(label.split()[0], [measured], [overhead])
        if key[2] == "ping":  # a link without loss: a guest starved by a busy machine drops one of 100 now and
            # then (PPTP MPPE-40 in a fresh-clone run of the suite); a tunnel that does not carry loses them all
            assert values[(*key, "ping_loss_pct")] <= 2, label
        else:  # over the 2 Mbit/s link (its share of no VPN's goodput: the next test)
            assert values[(*key, "throughput_mbps")] > 1, label
        assert "measured in a VM" in notes[key]
    assert "not encrypted" in notes[("l2tp", "wan-20ms", "ping")]
    assert "not encrypted" not in notes[("l2tp/ipsec aes128-sha1", "wan-20ms", "ping")]


@pytest.mark.integration
def test_what_a_guest_measured_while_another_run_went_on_is_flagged(remote_access):
    """A guest cannot see other runs (its /run is its own): the host watches the boot and flags what
    the guest measured meanwhile. Another run's record was there through the whole study. (That a
    repetition measured while none was there is not flagged: test_store's HostWatch test.)"""
    assert remote_access.vm_flags and all(any_of(read_flags(flags), "disturbed") for flags in remote_access.vm_flags)


# PPTP over a shaped link: TCP through it carries about what the link carries.
#
# A 2 Mbit/s tbf drops packets whenever TCP overfills its queue. By default pptp-linux then holds
# every GRE packet that follows a lost one for 0.3 s, in case the missing one arrives late, and TCP
# sees each hold as a stall: 1.20 Mbit/s towards the client against no VPN's 1.86 (65%). The driver
# passes them on at once (`pptp --nobuffer`, as RFC 2637 4.4 allows): 1.80 and 1.85 Mbit/s, 98% of
# no VPN (VM with software emulation, 2 repetitions of 4 s each, on a machine with a load of 5-7).
#
# The flow runs from the gateway to the client (`reverse`): that way the receiving GRE end is the
# client's, which the driver controls. The other way it is pptpd's, whose 0.3 s hold is a constant
# of PoPToP 1.4.0 with no switch (0.1-0.9 Mbit/s that way before and after): not asserted here.
#
# Judged on the best of iperf3's 1-s intervals, against no VPN's measured here (not emulated: what
# the link carries, 1.90-1.92 Mbit/s at best in every run of the suite). The hold lowers every
# interval: without --nobuffer the best was 1.40-1.42 (74%; 2 repetitions, an idle machine, and a
# busier one only lowers it). The suite's load stalls an emulated guest now and then, which lowers
# some: in its runs the 4-s means fell to 62-66% of no VPN in the VM, with 1.64 and 1.84 at best
# (86% and 96%), and 1.56 once (79%), and no VPN's own in the VM once to 1.59 (1.73 at best). That was
# while the guest's priority did nothing (conftest's GUEST_NICE): now it gets two shares of the cores.
SHARE = 0.8


@pytest.mark.integration
def test_pptp_carries_tcp_over_a_shaped_link_about_as_well_as_no_vpn(remote_access):
    link = max(remote_access.intervals(("none", "2mbit", "tcp")))
    pptp = max(remote_access.intervals(("pptp mppe-128", "2mbit", "tcp")))
    # 95.7% of 2 Mbit/s is TCP's goodput in 1514-byte frames; one 1-s interval may carry more, by what
    # tbf's bucket held (2.03 once); an unshaped link would carry tens of Mbit/s
    assert 1.8 < link <= 2.2, link
    assert pptp >= SHARE * link, (pptp, link)


@pytest.mark.integration
def test_a_vpn_measured_in_the_vm_is_graded_against_no_vpn_measured_there(remote_access):
    base, vpn, twin = ("none", "2mbit", "tcp"), ("pptp mppe-128", "2mbit", "tcp"), ("none (in the VM)", "2mbit", "tcp")
    assert {k: (remote_access.status[k], remote_access.measured_in[k]) for k in (base, vpn, twin)} == {
        base: ("done", "host"), vpn: ("done", "vm"), twin: ("done", "vm")}
    store = Store.open_dir(remote_access.folder)
    try:
        rows = {(r.vpn_label, r.link_label, r.workload): r.id for r in store.scenarios()}
        goodput = next(s for s in summarise(store)[rows[vpn]] if s.metric == "throughput_mbps")
        value = {k: store.values(rows[k], "throughput_mbps")[0] for k in (base, vpn, twin)}  # one each
    finally:
        store.close()
    # throughput is judged as a share of no VPN: the one measured in the VM, not the one measured here
    assert goodput.relative == pytest.approx(100 * value[vpn] / value[twin])
    assert goodput.relative != pytest.approx(100 * value[vpn] / value[base])
