"""Tailscale, built from the tailscale.com module, through the runner with its control plane inside the
testbed (tailscale.com's integration-test control server and the release's derper on the gateway's node):
direct, its WireGuard packets cross the WAN over UDP; relayed, with UDP between the ends dropped, through the
derper over TLS. Each carries real TCP, the probes sealed as the model says, the path read from the live
tailscaled and stored with each repetition; a tailscaled killed mid-measurement fails that repetition only.
Goodput direct and relayed is printed."""

import ipaddress
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from statistics import mean

import dpkt
import pytest

from conftest import run_here
from side_by_side import build_as_bootstrap_does
from test_faults import _processes
from vpnlab.algorithms import TOOL
from vpnlab.core.networks import benchmarking
from vpnlab.drivers.tailscale import BUILDS, CONTROL_SERVER, DERP_PORT, DIRECT, RELAYED, TAILNET_V4, WG_PORT
from vpnlab.plan.study import parse_study
from vpnlab.run import proof
from vpnlab.tools import gobuild

pytestmark = pytest.mark.integration

STUDY = """
name: tailscale-direct-and-relayed
topology: remote-access
repetitions: 2
vpns:
  - {driver: none}
  - {driver: tailscale}
  - {driver: tailscale, options: {path: relayed}}
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 1}]
"""
WIREGUARD_DATA = b"\x04\x00\x00\x00"  # a WireGuard transport data message's type and reserved bytes
APPLICATION_DATA = b"\x17\x03\x03"  # a TLS 1.3 record as it travels (type application data, legacy version)
PADDED = proof.PROBE_INNER_LEN + (-proof.PROBE_INNER_LEN) % 16  # the probe as WireGuard pads it


@pytest.fixture(scope="module")
def built():
    """The four programs' builds, as bootstrap.sh makes them (kept in vpnlab's cache: built once, reused)."""
    build_as_bootstrap_does()
    records = {command: gobuild.recorded(build, command) for command, build in BUILDS.items()}
    assert {(r["module"], r["version"]) for r in records.values()} == {("tailscale.com", "v1.98.10")}, records
    assert records["tailscale-testcontrol"]["local"] == "vpnlab.invalid/testcontrol"
    # the tailnet's ranges edited into the benchmarking ones in every program, the allocation in the server's
    assert {command: r["edited"] for command, r in records.items()} == {
        "tailscaled": ["net/tsaddr/tsaddr.go"], "tailscale": ["net/tsaddr/tsaddr.go"], "derper": ["net/tsaddr/tsaddr.go"],
        "tailscale-testcontrol": ["net/tsaddr/tsaddr.go", "tstest/integration/testcontrol/testcontrol.go"]}
    return records


@contextmanager
def addresses_seen():
    """Every (interface, address) on an interface in a namespace that holds one of tailscaled's TUN devices
    (ts*: this run's ends; other tests' namespaces run other VPNs meanwhile), while the block runs, looked
    at five times a second (tailscaled puts the control server's addresses on its TUN once it has joined)."""
    seen, stop = set(), threading.Event()

    def look():
        while not stop.is_set():
            listed = subprocess.run(["ip", "-all", "netns", "exec", "ip", "-o", "addr", "show"],
                                    capture_output=True, text=True).stdout
            for namespace in listed.split("netns: ")[1:]:
                found = {(f[1], f[3].split("/")[0]) for f in map(str.split, namespace.splitlines()[1:])
                         if len(f) > 3 and f[2] in ("inet", "inet6")}
                if any(dev.startswith("ts") for dev, _ in found):
                    seen.update(found)
            stop.wait(0.2)

    looker = threading.Thread(target=look, daemon=True)
    looker.start()
    try:
        yield seen
    finally:
        stop.set()
        looker.join()


def check_only_benchmarking(seen: set[tuple[str, str]]) -> None:
    """No address outside the benchmarking ranges was added (loopback and link-local are the kernel's own),
    and the tailnet's were seen on tailscaled's TUN devices."""
    added = {(dev, a) for dev, a in seen if not (ipaddress.ip_address(a).is_loopback or ipaddress.ip_address(a).is_link_local)}
    assert [pair for pair in added if not benchmarking(pair[1])] == [], added
    assert any(dev.startswith("ts") and a.startswith(TAILNET_V4 + ".") for dev, a in added), added


def sealed_probes(pcap, path: str) -> int:
    """The probes a WAN capture holds as the path sealed them: direct, WireGuard data messages of the padded
    probe's size on UDP to or from tailscaled's port; relayed, single TLS records of the relayed model's size
    on TCP to or from the derper."""
    with open(pcap, "rb") as fh:
        frames = [dpkt.ethernet.Ethernet(frame).data for _, frame in dpkt.pcap.Reader(fh)]
    if path == "direct":
        return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.udp.UDP) and WG_PORT in (ip.data.sport, ip.data.dport)
                   and ip.data.data[:4] == WIREGUARD_DATA and len(ip.data.data) == DIRECT - 28 + PADDED for ip in frames)
    return sum(isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) and DERP_PORT in (ip.data.sport, ip.data.dport)
               and ip.data.data[:3] == APPLICATION_DATA and len(ip.data.data) == RELAYED - 52 + PADDED for ip in frames)


def stored(out):
    """Each scenario (by its vpn label): its row, its samples' values by metric, each repetition's recorded
    negotiated data channel; and the run's tool versions."""
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    scenarios = {r["vpn_label"]: r for r in db.execute("SELECT * FROM scenarios")}
    values, paths = {}, {}
    for name, sc in scenarios.items():
        values[name] = {}
        for metric, value in db.execute("SELECT metric, value FROM samples WHERE scenario_id = ?", (sc["id"],)):
            values[name].setdefault(metric, []).append(value)
        paths[name] = [json.loads(output)[0]["negotiated"] for (output,) in db.execute(
            "SELECT output FROM raw_outputs WHERE scenario_id = ? AND tool = ?", (sc["id"], TOOL))]
    (versions,) = [json.loads(r["tool_versions"]) for r in db.execute("SELECT tool_versions FROM runs")]
    flags = [r[0] for r in db.execute("SELECT flags FROM repetitions") if r[0]]
    db.close()
    return scenarios, values, paths, versions, flags


def test_direct_and_relayed_carry_tcp_sealed_over_the_path_they_record(built, tmp_path, no_leftovers, capsys):
    with addresses_seen() as seen:
        run_here(parse_study(STUDY), tmp_path)
    check_only_benchmarking(seen)
    scenarios, values, paths, versions, flags = stored(tmp_path)
    assert set(scenarios) == {"none", "tailscale", "tailscale relayed"}
    assert not [f for f in flags if "algorithms-differ" in f], flags  # each repetition on the path it asked for
    for name, path, model in (("tailscale", "direct", DIRECT), ("tailscale relayed", "relayed", RELAYED)):
        sc, mine = scenarios[name], {metric: each[-1] for metric, each in values[name].items()}
        assert sc["status"] == "done", (name, sc["failure"])
        assert [n for n in sc["notes"].split("; ") if n and not n.startswith("tunnel ends not pinned")] == [], name
        assert mine["overhead_bytes"] == mine["overhead_model_bytes"] == model + PADDED - proof.PROBE_INNER_LEN, name
        assert len(values[name]["throughput_mbps"]) == 2 and min(values[name]["throughput_mbps"]) > 1, values[name]
        # every repetition: the probes crossed sealed on the path's own channel, never in clear; over DERP's TCP
        # the first probes may merge into one segment, and the proof then probes again, spaced (proof-spaced.pcap)
        pcaps = [rep / "proof-spaced.pcap" if (rep / "proof-spaced.pcap").exists() else rep / "proof.pcap"
                 for rep in sorted((tmp_path / "logs" / sc["id"]).glob("rep*"))]
        counts = [sealed_probes(p, path) for p in pcaps]
        if path == "direct":
            assert counts == [proof.PROBES] * 2, name
        else:  # TCP may put several probes in one segment: at least two crossed alone, at the model's size, as
            # the proof itself asks of a stream before it takes their length as the overhead
            assert len(counts) == 2 and all(2 <= n <= proof.PROBES for n in counts), (name, counts)
        # the path each repetition took, read from the live tailscaled after its measurement
        assert [p["data"] for p in paths[name]] == [f"WireGuard over UDP ({path})" if path == "direct"
                                                    else "WireGuard in DERP over TLS (relayed)"] * 2, paths[name]
        assert all(("Relay vpnlab" in p["source"]) and (("CurAddr -" in p["source"]) == (path == "relayed"))
                   for p in paths[name]), paths[name]
        # the testbed's control server registered both ends and approved the routes each advertised
        control = [p.read_text() for p in (tmp_path / "logs" / sc["id"]).rglob("*testcontrol-gw.log")]
        assert len(control) == 2 and all(log.count("Setting subnet routes for") == 2 for log in control), control
    # the run names the builds it measured: the module at its pinned version, its Go, the control server's origin
    for command, record in built.items():
        assert versions[command] == gobuild.describe(record) and "tailscale.com v1.98.10" in versions[command]
    assert "vpnlab.invalid/testcontrol" in versions["tailscale-testcontrol"]
    algorithms = json.loads(sqlite3.connect(tmp_path / "results.sqlite").execute(
        "SELECT output FROM raw_outputs WHERE tool = ? LIMIT 1", (TOOL,)).fetchone()[0])
    assert CONTROL_SERVER in algorithms[0]["declared"]["authentication"]
    goodput = {name: mean(values[name]["throughput_mbps"]) for name in scenarios}
    assert goodput["tailscale relayed"] < goodput["none"] and goodput["tailscale"] < goodput["none"]
    with capsys.disabled():
        print(f"\nTCP goodput over 50 Mbit/s, 2 repetitions of 3 s: none {goodput['none']:.1f}, tailscale direct "
              f"{goodput['tailscale']:.1f}, relayed through the derper {goodput['tailscale relayed']:.1f} Mbit/s")


KILLED = """
name: tailscaled-killed
repetitions: 1
vpns: [{driver: tailscale}]
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 3, omit_s: 0}]
"""


def test_a_tailscaled_killed_mid_measurement_fails_that_repetition_only(built, tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text(KILLED)
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "vpnlab", "run", study, "--out", out, "--no-progress",
                            "--backend", "netns"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 90
    while killed is None and run.poll() is None and time.monotonic() < deadline:
        procs = _processes(run.pid)
        if any(name == "iperf3" and "-c" in argv for _, name, argv in procs):
            time.sleep(1.0)
            killed = next((pid for pid, name, argv in procs if name == "tailscaled" and "--tun=ts0a" in argv), None)
            os.kill(killed, signal.SIGKILL)  # the client's tailscaled, of the run this test started
        time.sleep(0.1)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 0 and killed, stderr
    db = sqlite3.connect(out / "results.sqlite")
    failures = [r[0] for r in db.execute("SELECT failure FROM repetitions ORDER BY repetition")]
    db.close()
    assert len(failures) == 2 and failures[1] is None, failures  # the one run again, on a fresh tunnel, counts
    assert "died during the measurement" in failures[0] and "tailscaled" in failures[0], failures[0]


def test_an_unknown_path_is_refused_before_anything_is_made(tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text("name: t\nvpns: [{driver: tailscale, options: {path: sideways}}]\nworkloads: [{kind: ping}]\n")
    made = subprocess.run([sys.executable, "-m", "vpnlab", "run", study, "--out", tmp_path / "out", "--no-progress"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 2, made.stderr
    assert "vpns[0].options.path: Input should be 'direct' or 'relayed'" in made.stderr, made.stderr
    assert "Traceback" not in made.stderr
    assert not (tmp_path / "out").exists()


MESH = """
name: tailscale-mesh
topology: mesh
peers: 3
idle_window_s: 1
repetitions: 1
vpns: [{driver: tailscale}]
links: [{rate_mbit: 50}]
workloads: [{kind: tcp, duration_s: 2, omit_s: 0, pairs: all}]
"""


def test_three_peers_join_one_tailnet_and_carry_every_pair(built, tmp_path, no_leftovers):
    """A mesh of three in the tailnet of one control server (on peer 0's node): every pair's TCP directly,
    the measured pair's overhead on the direct model."""
    with addresses_seen() as seen:
        run_here(parse_study(MESH), tmp_path)
    check_only_benchmarking(seen)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    (failure,) = db.execute("SELECT failure FROM repetitions").fetchone()
    mine = dict(db.execute("SELECT metric, value FROM samples"))
    (pairs,) = db.execute("SELECT output FROM raw_outputs WHERE tool = 'pairs'").fetchone()
    db.close()
    assert failure is None
    assert mine["overhead_bytes"] == mine["overhead_model_bytes"] == DIRECT + PADDED - proof.PROBE_INNER_LEN
    assert mine["join_s"] > 0 and len(json.loads(pairs)) == 6
    assert min(p["throughput_mbps"] for p in json.loads(pairs).values()) > 1, pairs
