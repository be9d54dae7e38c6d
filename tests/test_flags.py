"""Sample flags are a declared kind and a text: readers act on the kind's traits, never on the words;
a store written before flags had kinds is read into the kinds producers declare now."""

import pytest

from vpnlab import catalog  # noqa: F401  (every producer declares its kinds as it is imported)
from vpnlab.core import flags
from vpnlab.measure.cpu import BUSY_MACHINE, CPU_SATURATED, SHARED_MACHINE, bottleneck_flags, shared_machine_flag
from vpnlab.store.legacy_flags import read_flags


def test_a_flag_is_stored_as_its_kind_and_text_and_read_back_alike():
    raised = [CPU_SATURATED("core 1 saturated (93% busy)"), shared_machine_flag(["run 3 (pid 7)"])]
    text = flags.stored(raised)
    assert text.startswith("cpu-saturated: core 1 saturated (93% busy);shared-machine: another vpnlab run")
    assert read_flags(text) == tuple(raised)
    assert flags.any_of(read_flags(text), "cpu_bound") and flags.any_of(read_flags(text), "disturbed")
    assert not flags.any_of(read_flags(flags.stored([raised[1]])), "cpu_bound")


def test_a_text_cannot_break_the_stored_list_and_a_kind_is_declared_once():
    assert flags.parse(flags.stored([BUSY_MACHINE("a; b")])) == (flags.Flag("busy-machine", "a, b"),)
    with pytest.raises(ValueError):
        flags.declare("busy-machine", "something else")
    with pytest.raises(ValueError):
        flags.declare("Busy Machine", "not a name")


def test_a_kind_no_producer_declares_has_no_traits():
    [flag] = read_flags("from-a-newer-vpnlab: whatever it says")
    assert flag.kind == "from-a-newer-vpnlab" and not flag.declared.cpu_bound and not flag.declared.disturbed
    [plain] = read_flags("suspect")
    assert plain == flags.Flag(flags.UNDECLARED, "suspect")


# Flags as vpnlab wrote them until 2026-12-01 (copied from the committed seed stores and the old producers).
LEGACY = {
    "disturbed: busy machine: programs outside this run took 30% of a core (yes 30%): their load is in these CPU "
    "and throughput figures": "busy-machine",
    "disturbed: another vpnlab run shared this machine (run 2): its load is in these CPU and throughput figures":
        "shared-machine",
    "core 1 saturated (93% busy, 10% in softirq): throughput is a bound set by that core": "cpu-saturated",
    "thread openvpn/openvpn at 97% of a core: throughput is a bound set by that single-threaded daemon": "cpu-saturated",
    "cpu saturated in an emulated VM (99% of all guest cores): throughput is a lower bound set by emulation, not by "
    "the VPN": "cpu-saturated",
    "pptpd's 0.3 s GRE reorder hold: data went towards the gateway over a link that dropped, so this figure "
    "measures pptpd's hold after each loss, not PPTP (not comparable with the seed's)": "pptpd-hold",
    "fragmented on the WAN: 12 IP fragments (packets bigger than the path MTU), whose cost is in these figures":
        "fragmented",
    "retransmits 17.5% of segments": "retransmits",
    "iperf3 measured 2.0 s of the 3 s asked: throughput is over a short window": "short-window",
    "background traffic: 1 transactions failed": "background",
    "background http: 3 transactions not started, 8 were still running": "background",
    "all echo requests lost": "all-lost",
    "algorithms negotiated differ from the declared ones (layer 0, openvpn): data_cipher AES-256-GCM": "algorithms-differ",
    "throughput_mbps was 'nan', not a finite number: stored as missing": "not-finite",
}


@pytest.mark.parametrize("old, kind", LEGACY.items())
def test_an_old_stores_prose_flag_gets_the_kind_its_producer_declares_now(old, kind):
    [flag] = read_flags(old)
    assert flag.kind == kind and flag.kind in flags.KINDS
    [paired] = read_flags(f"pair a->b: {old}")  # a mesh's, with the pair that raised it
    assert paired.kind == kind and paired.text.startswith("pair a->b: ")


def test_no_flag_written_now_reads_as_an_old_one():
    written = [kind(f"example of {kind.name}") for kind in flags.KINDS.values()]
    written += bottleneck_flags({}, (99.0, 20.0, 1), (99.0, "openvpn/openvpn"))
    assert read_flags(flags.stored(written)) == tuple(written)
