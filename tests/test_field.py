"""What breaks VPNs in the field (issue 47) on real namespaces with real traffic: the client side behind
a real nftables NAT with its own UDP timeout, real outages, address changes and NAT rebinds during a
workload, and what the tunnels did after each, stored as samples; two VPNs that behave differently."""

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import default_dispositions, our_namespaces, run_here
from vpnlab.machines.capabilities import detect
from vpnlab.measure.recovery import PROBE_INTERVAL_S, EventsObserver, probe_times
from vpnlab.plan.study import Link, parse_study
from vpnlab.testbed import faults, nat, netns, router
from vpnlab.testbed.topology import Layout, Testbed
from vpnlab.workloads.base import Event

pytestmark = pytest.mark.integration

PORT = 5301
RECEIVE = ("import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', {port}));"
           "s.settimeout(5); data, peer = s.recvfrom(64); print(peer[0], flush=True)")


def source_seen_by_sink(bed: Testbed, tmp_path, name: str) -> str:
    """The address a UDP datagram from the client arrives from at the server."""
    log = tmp_path / f"{name}.log"
    receiver = bed.sink.spawn([bed.sink.python, "-c", RECEIVE.format(port=PORT)], log, what="python3")
    try:
        deadline = time.monotonic() + 5
        while not bed.sink.listening(PORT, udp=True) and time.monotonic() < deadline:
            time.sleep(0.05)
        bed.source.run([bed.source.python, "-c", f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                        f".sendto(b'x', ('{bed.sink_ip}', {PORT}))"])
        receiver.wait(timeout=6)
    finally:
        bed.sink.stop(receiver)
    return log.read_text().strip()


def pings(node, address: str) -> bool:
    return node.run(["ping", "-n", "-c", 2, "-i", 0.2, "-W", 1, address], check=False).returncode == 0


def test_the_client_side_sits_behind_a_real_nat(state, tmp_path):
    """The far end sees the NAT's address, cannot reach the client unasked, sees the NAT's new outer address
    after an address change; the timeout is the NAT namespace's own; a rebind empties its conntrack."""
    bed = Testbed.build(state, Layout.for_topology("remote-access", 0), Link(nat="masquerade", nat_udp_timeout_s=2), tag="n")
    try:
        client, server = bed.source, bed.sink
        client_ip = bed.address(0, 0)
        assert pings(client, bed.sink_ip) and not pings(server, client_ip)
        assert source_seen_by_sink(bed, tmp_path, "before") == "198.19.0.254"
        assert {key: netns.read_sysctl(bed.router.namespace, key) for key in nat.TIMEOUT_KEYS} == dict.fromkeys(nat.TIMEOUT_KEYS, "2")
        assert all(netns.read_sysctl(node.namespace, nat.TIMEOUT_KEYS[0]) in (None, "30") for node in bed.nodes)
        assert int(netns.read_sysctl(bed.router.namespace, "net.netfilter.nf_conntrack_count")) > 0
        bed.forget_nat_mappings()
        assert netns.read_sysctl(bed.router.namespace, "net.netfilter.nf_conntrack_count") == "0"
        assert bed.change_client_address() == nat.MOVED_OUTER_ADDRESS
        assert source_seen_by_sink(bed, tmp_path, "after") == nat.MOVED_OUTER_ADDRESS
        assert client_ip in client.run(["ip", "-4", "addr", "show", "l0"]).stdout  # the client's own stays
    finally:
        bed.destroy()


def test_no_vpn_through_an_outage_loses_its_probes_and_is_back_at_its_end(state, tmp_path):
    """The truth by construction: nothing crosses for the 2 s of the outage, so about 2 s / the stream's
    interval probes are lost, and the first probe sent after its end is answered; when the NAT then forgets
    its mappings, the client's next probe opens a new one: nothing lost."""
    bed = Testbed.build(state, Layout.for_topology("remote-access", 0), Link(nat="masquerade"), tag="o")
    try:
        observer = EventsObserver(bed, tmp_path, [Event(at_s=0.5, link_down_s=2), Event(at_s=3, nat_rebind=True)])
        observer.start()
        time.sleep(3.5)  # the workload: the stream alone
        values, flags = observer.finish(None)
        sent, answered = probe_times((tmp_path / "events-probes.log").read_text())
        for node in bed.wan_nodes:  # the WAN is whole again
            assert faults.OUTAGE_TABLE not in node.run(["nft", "list", "tables"]).stdout
    finally:
        bed.destroy()
    event, rebind = observer.happened
    # at least the 2 s asked for; a busy machine's timer and nft calls can add a few tenths
    assert 1.95 <= event.end - event.start <= 2.6, event
    paced = (max(sent.values()) - min(sent.values())) / (len(sent) - 1)  # the stream's own pace here
    assert values["outage_lost_probes"] == pytest.approx((event.end - event.start) / paced, rel=0.1)
    assert values["recovered"] == 1 and not flags
    assert values["outage_recovery_s"] < 3 * max(paced, PROBE_INTERVAL_S)
    assert values["nat_rebind_lost_probes"] <= 1 and values["nat_rebind_recovery_s"] < 3 * max(paced, PROBE_INTERVAL_S)


def test_behind_a_nat_only_wireguard_with_keepalive_is_reachable_after_idling_past_its_timeout(tmp_path, no_leftovers):
    """NAT timeout 2 s, 4 s idle: no VPN is never reachable from the far side, nor WireGuard without a
    keepalive (its mapping expired), while WireGuard with a 1 s keepalive is, at once."""
    study = parse_study("""
name: nat-reach
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard}, {driver: wireguard, options: {persistent_keepalive_s: 1}}]
links: [{nat: masquerade, nat_udp_timeout_s: 2}]
workloads: [{kind: reach, idle_s: 4, wait_s: 3}]
""")
    run_here(study, tmp_path)
    found = samples(tmp_path)
    assert {vpn: values["far_reachable"] for vpn, values in found.items()} == {
        "none": 0, "wireguard": 0, "wireguard keepalive-1s": 1}
    assert found["wireguard keepalive-1s"]["far_reach_s"] < 1  # its mapping never expired


def test_an_address_change_without_a_nat_is_a_result_not_a_failure(tmp_path, no_leftovers):
    """The client's WAN address moves during pings: with no VPN the next probe is answered; the tunnel of
    Debian's wireguard-go did not come back by itself within the 10 s waited, on every run here (it keeps
    sending from the removed address: docs/drivers.md), which is stored as its result (recovered 0,
    flagged), not as a failed repetition."""
    study = parse_study("""
name: move
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard, options: {implementation: wireguard-go}}]
links: [{}]
workloads: [{kind: ping, count: 60, interval_s: 0.05, events: [{at_s: 1, address_change: true}]}]
""")
    run_here(study, tmp_path)
    found = samples(tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = db.execute("SELECT status, failure FROM scenarios").fetchall()
    flags = [f for (f,) in db.execute("SELECT flags FROM repetitions")]
    db.close()
    assert all(s == "done" for s, _ in status), status
    assert found["none"]["recovered"] == 1 and found["none"]["address_change_recovery_s"] < 0.5
    assert found["none"]["address_change_lost_probes"] <= 2
    wireguard = found["wireguard wireguard-go"]
    assert wireguard["recovered"] == 0 and "address_change_recovery_s" not in wireguard
    assert wireguard["address_change_lost_probes"] > 10 * max(found["none"]["address_change_lost_probes"], 1)
    assert "not-recovered" in str(flags)


def samples(out) -> dict[str, dict[str, float]]:
    """Each VPN's values (one repetition each), by its label."""
    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT s.vpn_label, m.metric, m.value FROM samples m JOIN scenarios s ON s.id = m.scenario_id")
    found: dict[str, dict[str, float]] = {}
    for vpn, metric, value in rows:
        found.setdefault(vpn, {})[metric] = value
    db.close()
    return found


def test_ctrl_c_during_an_outage_leaves_nothing_behind(tmp_path, no_leftovers):
    """SIGINT while the WAN is cut (a WireGuard tunnel up, its probes and pings running): the run ends as
    interrupted, and its namespaces, with the outage's rules in them, are gone (no_leftovers)."""
    study = tmp_path / "cut.yaml"
    study.write_text("name: cut\nrepetitions: 1\nvpns: [{driver: wireguard}]\nlinks: [{nat: masquerade}]\n"
                     "workloads: [{kind: ping, count: 400, interval_s: 0.05, events: [{at_s: 0.5, link_down_s: 15}]}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "vpnlab", "run", str(study), "--out", str(tmp_path / "out"),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_dispositions)
    try:
        deadline = time.monotonic() + 60
        while not cut(our_namespaces()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, stderr


def cut(namespaces: set[str]) -> bool:
    """Is the WAN of one of these namespaces cut (an outage's table there)?"""
    listed = (subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"], capture_output=True, text=True).stdout
              for ns in namespaces)
    return any(faults.OUTAGE_TABLE in tables for tables in listed)


def test_the_field_study_plans_on_this_machine():
    """Every scenario of the built-in field-2026 can run on this machine (its VPNs, the NAT's own timeout,
    nft), those of the VPNs this kernel cannot carry in the VM, with a baseline measured there too."""
    proc = subprocess.run([sys.executable, "-m", "vpnlab", "run", "field-2026", "--dry-run"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    here = detect()  # a kernel without ESP and PPP (this one): libreswan, L2TP, PPTP and their baseline in the VM
    vm = "72 of them in a VM" if not (here.has("esp") or here.has("ppp")) else ""
    assert "270 scenarios" in proc.stdout and vm in proc.stdout and "needs:" not in proc.stdout + proc.stderr


def test_a_forced_strongswan_rekey_makes_a_new_child_sa_and_barely_interrupts(tmp_path, no_leftovers):
    """swanctl --rekey during pings: the charon logs show a second CHILD_SA, and the probes around it lose
    (make before break) at most a few."""
    study = parse_study("""
name: rekey
repetitions: 1
vpns: [{driver: strongswan}]
workloads: [{kind: ping, count: 60, interval_s: 0.05, events: [{at_s: 1, rekey: true}]}]
""")
    run_here(study, tmp_path)
    (values,) = samples(tmp_path).values()
    logs = "".join(p.read_text() for p in tmp_path.glob("logs/*/rep1/*charon-client.log"))
    assert "vici rekey CHILD_SA 'net'" in logs and "CHILD_SA net{2} established" in logs
    # at most a few probes lost across the rekey. The gap is timed by the answers' arrival, so a pinger
    # starved by the suite's load stretches it (0.59 s seen under CI's load, ~10 ms alone): its bound here
    # only rules out an outage; the figure itself is the measurement, flagged as the machine's load was
    assert values["recovered"] == 1 and values["rekey_lost_probes"] <= 5 and values["rekey_gap_s"] < 1.5


def test_behind_a_nat_an_address_change_resets_plain_tcp_but_not_tcp_inside_wireguard(tmp_path, no_leftovers):
    """The NAT's outer address moves during a TCP transfer: without a VPN the server sees the connection's
    next segments come from an unknown address and resets it; inside WireGuard the inner connection never
    sees the outer address, and the gateway follows its peer to the new one."""
    study = parse_study("""
name: move-tcp
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard}]
links: [{nat: masquerade}]
workloads: [{kind: tcp, duration_s: 4, omit_s: 0, events: [{at_s: 1.5, address_change: true}]}]
""")
    run_here(study, tmp_path)
    found = samples(tmp_path)
    assert found["none"]["workload_survived"] == 0 and "throughput_mbps" not in found["none"]
    assert found["wireguard"]["workload_survived"] == 1 and found["wireguard"]["throughput_mbps"] > 0
    assert found["wireguard"]["recovered"] == 1


def test_behind_a_nat_strongswan_follows_an_address_change_only_without_mobike_and_with_dead_peer_detection(
        tmp_path, no_leftovers):
    """The NAT's outer address moves during pings. strongSwan as it comes (MOBIKE on, no DPD) is not back
    within the 10 s waited: with MOBIKE the gateway moves the SAs only when the client reports a new address,
    and the client's own did not change. With `mobike: false` and `dpd_delay_s: 2` the client's first
    dead-peer probe after the move comes from the new mapping, the gateway moves the SAs there, and the
    tunnel is back within a few seconds (2.2 s alone here; either option alone was not enough)."""
    study = parse_study("""
name: move-dpd
repetitions: 1
order: listed
vpns: [{driver: strongswan}, {driver: strongswan, options: {dpd_delay_s: 2, mobike: false}}]
links: [{nat: masquerade}]
workloads: [{kind: ping, count: 60, interval_s: 0.05, events: [{at_s: 1, address_change: true}]}]
""")
    run_here(study, tmp_path)
    found = samples(tmp_path)
    assert set(found) == {"strongswan default psk", "strongswan default psk dpd-2s no-mobike"}, set(found)
    assert found["strongswan default psk"]["recovered"] == 0
    tuned = found["strongswan default psk dpd-2s no-mobike"]
    assert tuned["recovered"] == 1 and tuned["address_change_recovery_s"] < 8, tuned
    logs = "".join(p.read_text() for p in tmp_path.glob("logs/*/rep1/*charon-gw.log"))
    before, after = router.ADDRESSES[nat.OUTER], nat.MOVED_OUTER_ADDRESS
    assert f"remote endpoint changed from {before}[4500] to {after}[4500]" in logs
