"""Studies on real hosts: the study's `hosts:` and `shape:`, `vpnlab run --inventory`, and whole
runs over SSH on a lab of "hosts" (tests/hosts_harness.py), one of which loses its connection."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hosts_harness import built_lab, host_is_clean, sh, wait_until
from vpnlab.plan import overrides
from vpnlab.cli import app
from vpnlab.cli.run import load_study_arg
from vpnlab.core.errors import StudyError, VpnlabError
from vpnlab.hosts.hoststate import HostState, ManagementPath, guard_ip_line
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import parse_study

RA_STUDY = """\
name: hosts-remote-access
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard}, {driver: openvpn}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""

S2S_STUDY = """\
name: hosts-site-to-site
topology: site-to-site
hosts: [{left: gw-a, right: gw-b}, {left: gw-c, right: gw-d}]
repetitions: 2
order: listed
vpns: [{driver: none}, {driver: wireguard}, {driver: openvpn, options: {transport: tcp}}]
links: [{rate_mbit: 500, shape: true}]
workloads: [{kind: ping, count: 5, interval_s: 0.05}]
"""

S2S_HOSTS = "hosts: [{left: gw-a, right: gw-b}, {left: gw-c, right: gw-d}]\n"
LAB_SUBNET = "198.19.255"  # the hosts' own network: outside the testbed's 198.18.0.0/16 and 198.19.0-2.0/24


# -- the study file ------------------------------------------------------------------------------

def problems(text: str) -> str:
    with pytest.raises(StudyError) as info:
        parse_study(text)
    return str(info.value)


def test_hosts_name_the_two_ends_of_the_wan():
    study = parse_study(RA_STUDY)
    assert study.hosts == [{"client": "gw-a", "gateway": "gw-b"}]
    assert parse_study(S2S_STUDY).hosts == [{"left": "gw-a", "right": "gw-b"}, {"left": "gw-c", "right": "gw-d"}]
    text = problems(RA_STUDY.replace("{client: gw-a, gateway: gw-b}", "{client: gw-a, gw: gw-b}"))
    assert "hosts.gw: not a role of a remote-access study; map client and gateway" in text
    assert "hosts: a remote-access study on real hosts maps both client and gateway; gateway missing" in text
    text = problems(S2S_STUDY.replace("right: gw-b", "right: gw-a").replace("gw-c, right: gw-d", "gw-a, right: gw-a"))
    assert "hosts[0].right: 'gw-a' is left too" in text
    assert "hosts[1]: the same pair as hosts[0]" in problems(S2S_STUDY.replace("gw-c, right: gw-d", "gw-a, right: gw-b"))
    assert "hosts: an empty list" in problems(S2S_STUDY.replace("[{left: gw-a, right: gw-b}, {left: gw-c, right: gw-d}]", "[]"))


def test_each_pair_of_hosts_runs_the_whole_plan_on_a_link_of_its_own():
    plan = make_plan(parse_study(S2S_STUDY))
    assert len(plan.scenarios) == 6 and len({s.id for s in plan.scenarios}) == 6
    assert [(s.hosts["left"], s.link.label) for s in plan.scenarios[::3]] == [("gw-a", "500mbit (gw-a, gw-b)"),
                                                                             ("gw-c", "500mbit (gw-c, gw-d)")]
    one = make_plan(parse_study(RA_STUDY))
    assert one.scenarios[0].link.label == "unshaped" and one.scenarios[0].hosts == {"client": "gw-a", "gateway": "gw-b"}


def test_shaping_real_hosts_is_opt_in_and_named_by_field():
    text = problems(S2S_STUDY.replace("{rate_mbit: 500, shape: true}", "{delay_ms: 20}"))
    assert "links[0].delay_ms: on real hosts shaping is opt-in: add `shape: true`" in text
    parse_study(S2S_STUDY.replace(S2S_HOSTS, "").replace(", shape: true", ""))  # here: as always


def test_every_vpn_and_workload_is_placed_on_the_hosts_none_refused(tmp_path):
    """The done condition of issue 33: a seed study (PPTP, OpenVPN, transfers, background traffic) with
    its two ends mapped to inventory hosts plans every scenario on them; a dry run contacts nobody."""
    inventory = tmp_path / "lab.yml"
    inventory.write_text("all:\n  hosts:\n    branch: {ansible_host: 203.0.113.10}\n    hq: {ansible_host: 203.0.113.20}\n")
    sets = ["hosts={client: branch, gateway: hq}", "links[0].shape=true", "links[1].shape=true"]
    result = CliRunner().invoke(app, ["run", "small-business-2011", "--inventory", str(inventory), "--dry-run",
                                      *(arg for s in sets for arg in ("--set", s))])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    planned = make_plan(parse_study(overrides.apply(load_study_arg("small-business-2011")[0].source_text, sets)))
    assert len(rows) == len(planned.scenarios) > 100
    assert all("branch+hq" in row for row in rows), [row for row in rows if "branch+hq" not in row][:3]
    assert {s.vpn.layers[0].driver for s in planned.scenarios if s.vpn.layers} == {"pptp", "openvpn"}
    assert all(s.link.background for s in planned.scenarios)
    assert "on real hosts: client branch and gateway hq (not contacted)" in result.output
    nested = (RA_STUDY.replace("{driver: openvpn}]", "{driver: openvpn, inner: {driver: strongswan}}]")
              .replace("topology: remote-access", "topology: site-to-site")
              .replace("{client: gw-a, gateway: gw-b}", "{left: gw-a, right: gw-b}")
              .replace("[{kind: tcp, duration_s: 1, omit_s: 0}]", "[{kind: tcp}, {kind: transfer}]"))
    assert len(make_plan(parse_study(nested)).scenarios) == 6


def test_shape_leaves_the_ids_of_existing_scenarios_alone():
    plain = make_plan(parse_study(S2S_STUDY.replace(", shape: true", "").replace(S2S_HOSTS, "")))
    assert "shape" not in plain.scenarios[0].key["link"]
    shaped = make_plan(parse_study(S2S_STUDY.replace(", {left: gw-c, right: gw-d}", "")))
    assert shaped.scenarios[0].key["link"]["shape"] is True


def test_run_refuses_hosts_without_an_inventory_and_unknown_hosts(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(RA_STUDY)
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "give their Ansible inventory with --inventory FILE" in result.output
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("gw-a ansible_host=203.0.113.1\nhq ansible_host=203.0.113.2\n")
    result = CliRunner().invoke(app, ["run", str(study), "--inventory", str(inventory), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no host named 'gw-b' (it has: gw-a, hq)" in result.output
    local = tmp_path / "local.yaml"
    local.write_text(RA_STUDY.replace("hosts: {client: gw-a, gateway: gw-b}\n", ""))
    result = CliRunner().invoke(app, ["run", str(local), "--inventory", str(inventory), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "maps no role to a host" in result.output
    assert not (tmp_path / "out").exists()


# -- the host's own network: never cut -------------------------------------------------------------

def test_guard_keeps_the_controller_out_of_benchmark_routes():
    path = ManagementPath(controller_ip="198.18.0.1", host_ip="198.18.0.2", device="eth0")
    with pytest.raises(VpnlabError, match="holds 198.18.0.1, the controller"):
        guard_ip_line("route replace 198.18.0.0/24 dev vw1b", path)
    with pytest.raises(VpnlabError, match="on the network of 198.18.0.1"):
        guard_ip_line("addr add 198.18.0.9/24 dev vl1a", path)
    assert guard_ip_line("route replace 198.18.128.0/24 dev vw1b", path) == ("routes", "198.18.128.0/24 dev vw1b")


def test_a_testbed_removes_what_the_record_gained_since_it_began():
    before = HostState("ab12cd", "ctl 1", {"pid": 5, "start": 9}, 0.0, links=["keep"], sysctls={"a": "0"})
    now = HostState("ab12cd", "ctl 1", {"pid": 5, "start": 9}, 0.0, links=["keep", "vlab12cd0l1"],
                    namespaces=["vlab12cd-0server"], qdiscs=["eth0"], sysctls={"a": "0", "b": "1"})
    added = now.since(before)
    assert (added.links, added.namespaces, added.qdiscs, added.sysctls) == (["vlab12cd0l1"], ["vlab12cd-0server"],
                                                                          ["eth0"], {})
    script = added.undo_script()
    assert "ip link del vlab12cd0l1" in script and "keep" not in script and "/run/vpnlab/ab12cd\n" not in script


# -- whole studies on a lab of SSH hosts ---------------------------------------------------------------

@pytest.fixture(scope="module")
def lab():
    """Four SSH "hosts" and a controller in namespaces of their own (hosts_harness.Lab), on a network
    of their own that the testbed's addresses do not overlap; all of it removed afterwards."""
    with built_lab(study_home=True, names=("gw-a", "gw-b", "gw-c", "gw-d"), subnet=LAB_SUBNET) as built:
        yield built


def read_store(out):
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    try:
        runs = [dict(r) for r in db.execute("SELECT * FROM runs")]
        scenarios = {(r["vpn_label"], r["link_label"]): dict(r) for r in db.execute("SELECT * FROM scenarios")}
        samples = {(r["vpn_label"], r["link_label"], r["repetition"], r["metric"]): r["value"] for r in db.execute(
            "SELECT sc.vpn_label, sc.link_label, s.repetition, s.metric, s.value FROM samples s"
            " JOIN scenarios sc ON sc.id = s.scenario_id")}
        return runs, scenarios, samples
    finally:
        db.close()


def sessions(host) -> int:
    return host.log.read_text().count(f"Accepted publickey for root from {LAB_SUBNET}.1 port")


@pytest.mark.integration
def test_prepare_installs_what_the_study_runs(lab, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(RA_STUDY)
    result = lab.vpnlab("hosts", "prepare", "--inventory", lab.inventory, "--limit", "gw-a,gw-b", "--study", study,
                        "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    for report in json.loads(result.stdout):
        assert report["status"] == "ok", report
        assert {"openvpn", "wireguard-tools", "wireguard-go", "iperf3", "tcpdump"} <= set(report["packages"])
        assert set(report["packages"].values()) == {"present"} and report["features"]["tun"]
    doctor = lab.vpnlab("doctor", "--inventory", lab.inventory, "--json")  # as `vpnlab hosts doctor`
    reports = {r["host"]: r for r in json.loads(doctor.stdout)}
    assert reports["gw-a"]["reachable"] and reports["gw-a"]["tools"]["openvpn"].startswith("OpenVPN 2.")
    assert not reports["gw-down"]["reachable"] and doctor.returncode == 1


@pytest.mark.integration
def test_a_remote_access_study_runs_on_two_hosts_over_ssh(lab, tmp_path):
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    study, out = tmp_path / "study.yaml", lab.dir / "remote-access"
    study.write_text(RA_STUDY)
    before = {h.name: sessions(h) for h in (a, b)}
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    runs, scenarios, samples = read_store(out)
    assert {s["status"] for s in scenarios.values()} == {"done"}
    assert all(json.loads(s["hosts"]) == {"client": "gw-a", "gateway": "gw-b"} for s in scenarios.values())
    assert all(json.loads(s["as_run"])["link"]["rate_mbit"] is None for s in scenarios.values())  # as asked
    machines = json.loads(runs[0]["hosts"])
    assert machines["gw-a"]["role"] == "client" and machines["gw-b"]["nic"]["driver"] == "veth"
    assert machines["gw-a"]["cpu_model"] and machines["gw-a"]["tools"]["openvpn"].startswith("OpenVPN 2.")
    # through the real path between the hosts, and through each tunnel (proof: the probes crossed
    # it encrypted, of the size the encapsulation model says)
    link = "unshaped"
    assert samples[("none", link, 1, "throughput_mbps")] > 10
    assert samples[("wireguard", link, 1, "overhead_bytes")] == samples[("wireguard", link, 1, "overhead_model_bytes")] == 72
    assert samples[("openvpn aes-256-gcm udp", link, 1, "overhead_bytes")] == 52
    assert samples[("wireguard", link, 1, "throughput_mbps")] > 1 and ("wireguard", link, 1, "cpu_vpn_gateway_pct") in samples
    assert samples[("openvpn aes-256-gcm udp", link, 1, "cpu_vpn_gateway_pct")] > 0  # a userspace daemon's own ticks
    assert "every result came from client gw-a, gateway gw-b" in (out / "report.html").read_text()
    shown = lab.vpnlab("show", out).stdout
    assert f"measured on: gw-a (client) at {LAB_SUBNET}.2: " in shown and "NIC eth0 (veth, " in shown
    assert not any("busy-machine" in f for f in repetition_flags(out))  # vpnlab's own processes are not other load
    for host in (a, b):
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
        assert sessions(host) == before[host.name] + 1  # one SSH connection per host for the whole run


def repetition_flags(out) -> list[str]:
    db = sqlite3.connect(out / "results.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT flags FROM repetitions ORDER BY scenario_id, repetition")]
    finally:
        db.close()


@pytest.mark.integration
def test_a_program_outside_the_run_on_a_host_flags_the_repetitions_it_disturbed(lab, tmp_path):
    """The real fault: another SSH session busy on the gateway host while the study measures."""
    b = lab.hosts["gw-b"]
    study, out = tmp_path / "study.yaml", lab.dir / "busy-host"
    study.write_text(RA_STUDY.replace("repetitions: 1", "repetitions: 2").replace(
        ", {driver: wireguard}, {driver: openvpn}", ""))
    burner = subprocess.Popen(lab.controller_argv("ssh", "-i", lab.client_key, "-o", "BatchMode=yes",
                                                  f"root@{b.address}", "exec yes > /dev/null"),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: "yes" in b.processes().values()), b.processes()
        result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    finally:
        for pid in [pid for pid, command in b.processes().items() if command == "yes"]:
            os.kill(pid, signal.SIGKILL)  # we started it (over SSH)
        burner.wait(30)
    assert result.returncode == 0, result.stdout + result.stderr
    flags = repetition_flags(out)
    assert len(flags) == 2 and all(f.startswith("busy-machine: programs outside this run took") and " on host gw-b (yes "
                                   in f for f in flags), flags
    assert not any("of a core on host gw-a" in f for f in flags), flags  # gw-a has its own processes


@pytest.mark.integration
def test_a_scenario_the_hosts_kernel_cannot_run_fails_before_it_starts(lab, tmp_path):
    """The lab's hosts have this machine's kernel: no PPP and no netem (FIELD-NOTES). PPTP, and any
    link with a delay, fail with the host and the piece they lack before anything of theirs starts;
    no VPN on the unshaped path runs as always."""
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    study, out = tmp_path / "study.yaml", lab.dir / "kernel-lacks"
    study.write_text(RA_STUDY.replace("[{driver: none}, {driver: wireguard}, {driver: openvpn}]", "[{driver: none}, {driver: pptp}]")
                     .replace("workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]",
                              "links: [{name: as-is}, {name: delayed, delay_ms: 5, shape: true}]\n"
                              "workloads: [{kind: ping, count: 3, interval_s: 0.05}]"))
    probed = json.loads(lab.vpnlab("hosts", "doctor", "--inventory", lab.inventory, "--limit", "gw-a", "--json").stdout)
    assert not probed[0]["features"]["ppp"] and not probed[0]["features"]["netem"], probed  # the premise
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    runs, scenarios, samples = read_store(out)
    assert scenarios[("none", "as-is")]["status"] == "done" and samples[("none", "as-is", 1, "rtt_avg_ms")] > 0
    pptp = next(label for label, _ in scenarios if label.startswith("pptp"))
    for key in ((pptp, "as-is"), ("none", "delayed"), (pptp, "delayed")):
        assert scenarios[key]["status"] == "failed", key
        assert not (out / "logs" / scenarios[key]["id"]).exists()  # nothing of it started
        assert not any(k[:2] == key for k in samples)
    assert scenarios[(pptp, "as-is")]["failure"].startswith("the kernel cannot run it: host gw-a: pptp: ")
    assert "feature 'ppp'" in scenarios[(pptp, "as-is")]["failure"] and "host gw-b:" in scenarios[(pptp, "as-is")]["failure"]
    assert "netem" in scenarios[("none", "delayed")]["failure"]
    assert "failed before it started: the kernel cannot run it: host gw-a" in result.stderr
    exported = json.loads(lab.vpnlab("export", out, "--format", "json").stdout)
    assert exported and {json.loads(row["hosts"])["client"] for row in exported} == {"gw-a"}  # who measured each sample
    for host in (a, b):
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())


# A program of the host's own that holds a UDP port (a system IPsec daemon would hold 500 and 4500).
HOLD_UDP_PORT = ("import socket, sys, time\n"
                 "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                 "s.bind(('0.0.0.0', int(sys.argv[1])))\n"
                 "print('bound', flush=True)\n"
                 "time.sleep(600)\n")


@pytest.mark.integration
def test_a_port_another_program_holds_on_a_host_refuses_the_study_before_anything_is_created(lab, tmp_path):
    """UDP 500 held on gw-b: the strongSwan scenario is refused (exit 2) naming the host, the port and what
    to do, before the run: no results directory, nothing on the hosts. Once the port is free, the same
    study runs."""
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    study, out = tmp_path / "study.yaml", lab.dir / "held-port"
    study.write_text(RA_STUDY.replace("{driver: wireguard}, {driver: openvpn}", "{driver: strongswan}").replace(
        "[{kind: tcp, duration_s: 1, omit_s: 0}]", "[{kind: ping, count: 3, interval_s: 0.05}]"))
    holder = subprocess.Popen(["ip", "netns", "exec", b.namespace, sys.executable, "-c", HOLD_UDP_PORT, "500"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "bound\n"
        refused = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    finally:
        holder.kill()  # we started it
        holder.wait(10)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("scenario 1 (strongswan default psk | unshaped | ping-56B) on client gw-a and gateway gw-b: host gw-b: "
            "UDP 500 is held by another program: stop it, or run on other hosts; `ss -uanp 'sport = :500'` on gw-b "
            "shows which") in refused.stderr, refused.stderr
    assert "host gw-a" not in refused.stderr and "scenario 0" not in refused.stderr
    assert not out.exists()
    for host in (a, b):
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    _, scenarios, _ = read_store(out)
    assert {label: s["status"] for (label, _), s in scenarios.items()} == {"none": "done", "strongswan default psk": "done"}


@pytest.mark.integration
def test_a_port_taken_on_a_host_after_the_probe_is_named_in_the_failure(lab, tmp_path):
    """UDP 51820 taken on gw-b once the run has begun (after the probe that would have refused it):
    WireGuard's repetitions fail there late, and each failure says which port on which host another
    program took, and how to see which."""
    b = lab.hosts["gw-b"]
    study, out = tmp_path / "study.yaml", lab.dir / "taken-port"
    study.write_text(RA_STUDY.replace(", {driver: openvpn}", "").replace(
        "[{kind: tcp, duration_s: 1, omit_s: 0}]", "[{kind: ping, count: 40, interval_s: 0.05}]"))
    run = subprocess.Popen(lab.controller_argv(sys.executable, "-m", "vpnlab", "run", study, "--inventory",
                                               lab.inventory, "--out", out, "--no-progress"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder = None
    try:
        # the store is made after the probe, and the first scenario (no VPN, 2 s of pings) runs before WireGuard's
        assert wait_until(lambda: (out / "results.sqlite").exists() or run.poll() is not None, timeout=120)
        holder = subprocess.Popen(["ip", "netns", "exec", b.namespace, sys.executable, "-c", HOLD_UDP_PORT, "51820"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "bound\n"
        stdout, stderr = run.communicate(timeout=300)
    finally:
        for proc in (run, holder):  # we started them
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert run.returncode == 1, stdout + stderr  # a scenario failed
    _, scenarios, _ = read_store(out)
    assert scenarios[("none", "unshaped")]["status"] == "done"
    wireguard = scenarios[("wireguard", "unshaped")]
    assert wireguard["status"] == "failed", wireguard
    assert ("since the run began, host gw-b: UDP 51820 is held by another program: stop it, or run on other hosts; "
            "`ss -uanp 'sport = :51820'` on gw-b shows which") in wireguard["failure"], wireguard["failure"]
    assert "host gw-a" not in wireguard["failure"]


def pair_repetitions(out, host: str) -> list[str]:
    """When each stored repetition of the scenarios on `host` completed."""
    if not (out / "results.sqlite").exists():
        return []
    db = sqlite3.connect(out / "results.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT r.completed_at FROM repetitions r JOIN scenarios sc ON"
                                         " sc.id = r.scenario_id WHERE sc.hosts LIKE ?", (f'%"{host}"%',))]
    except sqlite3.OperationalError:  # its tables are not there yet
        return []
    finally:
        db.close()


@pytest.mark.integration
def test_two_pairs_run_in_parallel_and_a_lost_host_fails_only_its_scenarios(lab, tmp_path):
    from conftest import default_dispositions

    study, out = tmp_path / "study.yaml", lab.dir / "site-to-site"
    study.write_text(S2S_STUDY)
    d = lab.hosts["gw-d"]
    before = sessions(d)
    run = subprocess.Popen(lab.controller_argv(sys.executable, "-m", "vpnlab", "run", study, "--inventory",
                                               lab.inventory, "--out", out, "--no-progress"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_dispositions)
    try:
        # on gw-c/gw-d: round 1 (no VPN, WireGuard, OpenVPN) and the first of round 2; then cut gw-d's connection
        assert wait_until(lambda: len(pair_repetitions(out, "gw-d")) >= 4 or run.poll() is not None, timeout=240)
        assert run.poll() is None, run.communicate()
        record = json.loads(next(d.path("/run/vpnlab").glob("*/state.json")).read_text())
        os.kill(d.outer_pid(record["owner"]["pid"]), signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stdout + stderr  # some scenarios failed
    runs, scenarios, samples = read_store(out)
    assert runs[0]["status"] == "completed-with-failures"
    ab, cd = "500mbit (gw-a, gw-b)", "500mbit (gw-c, gw-d)"
    for vpn, overhead in (("none", None), ("wireguard", 72), ("openvpn aes-256-gcm tcp", 78)):
        assert scenarios[(vpn, ab)]["status"] == "done"  # the other pair went on to the end
        assert json.loads(scenarios[(vpn, cd)]["hosts"]) == {"left": "gw-c", "right": "gw-d"}
        if overhead:  # site to site through each tunnel, on both pairs (gw-c/gw-d before the cut)
            assert samples[(vpn, ab, 1, "overhead_bytes")] == samples[(vpn, cd, 1, "overhead_bytes")] == overhead
            assert scenarios[(vpn, cd)]["status"] == "failed"
            assert f"host gw-d (root@{LAB_SUBNET}.5:22): the SSH connection was lost" in scenarios[(vpn, cd)]["failure"]
    assert scenarios[("none", cd)]["status"] == "done"  # measured to its rule before the cut
    ab_times, cd_times = pair_repetitions(out, "gw-a"), pair_repetitions(out, "gw-c")
    assert min(cd_times) < max(ab_times) and min(ab_times) < max(cd_times)  # at the same time
    assert "gw-d" in stderr and "SSH connection was lost" in stderr
    report = (out / "report.html").read_text()
    assert "from left gw-a, right gw-b: none | 500mbit (gw-a, gw-b) | ping-56B" in report
    for host in lab.hosts.values():  # gw-d's teardown over a fresh connection
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
    assert sessions(d) == before + 2
    cleaning = lab.vpnlab("hosts", "clean", "--inventory", lab.inventory, "--limit", "lab")
    assert all(f"{name}: nothing to clean" in cleaning.stdout for name in lab.hosts), cleaning.stdout


def test_prepare_installs_what_every_driver_and_workload_kind_needs():
    """`hosts prepare --study` installs, for a study of every driver, every workload kind and the
    office background, every package each of them declares, and the kernel probe's programs."""
    from vpnlab.catalog import DRIVERS, KINDS, declared
    from vpnlab.hosts.prepare import study_packages
    from vpnlab.tools import CORE
    from vpnlab.workloads import background

    study = parse_study(RA_STUDY.replace("[{driver: none}, {driver: wireguard}, {driver: openvpn}]",
                                         "[" + ", ".join(f"{{driver: {name}}}" for name in DRIVERS) + "]")
                        .replace("workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]",
                                 "links: [{background: office}]\nworkloads: [{kind: tcp}, {kind: udp}, {kind: ping}, "
                                 "{kind: transfer, protocol: [http, https, ssh, ftp]}]"))
    wanted = set(study_packages(study))
    installable = {tool.package for tool in declared().values() if tool.debian}
    for driver in DRIVERS.values():
        assert {t.package for t in driver.tools if t.debian} | set(driver.packages) <= wanted, driver.name
    for kind in KINDS.values():
        assert {t.package for t in kind.tools} & installable <= wanted, kind.kind
    assert {t.package for t in background.TOOLS} <= wanted
    assert {"grep", "sed", "coreutils", "iproute2", "openssl", "libreswan", "pptpd", "xl2tpd"} <= wanted and {t.package for t in CORE} <= wanted
    # and no more than the study runs
    assert "nginx-light" not in study_packages(parse_study(RA_STUDY))
    # a program built from a Go module is this machine's build, no package a host could install
    assert not {t.package for driver in DRIVERS.values() for t in driver.tools if t.go} & wanted


def test_the_docs_list_what_each_vpn_and_workload_needs_on_a_host_as_declared():
    from pathlib import Path

    from vpnlab.catalog import hosts_table

    page = (Path(__file__).resolve().parents[1] / "docs" / "real-hosts.md").read_text()
    assert hosts_table() in page, "docs/real-hosts.md's tables differ from the declarations: paste catalog.hosts_table()"
    assert "`pptp` | pptpd: `ppp` |" in hosts_table() and "`strongswan` | kernel: `esp`; else libipsec: `tun` |" in hosts_table()


def test_what_a_hosts_kernel_lacks_names_that_host_or_the_pair_when_only_together(tmp_path):
    """The preflight's reasons, from what each host's probe answered (set here as it would be): a piece
    one host lacks names that host; two hosts that each allow one implementation but not the same
    one are named together."""
    from vpnlab.plan.placement import _kernels_lack
    from vpnlab.core.features import FEATURES
    from vpnlab.hosts.testbed import HostSet

    inventory = tmp_path / "lab.yml"
    inventory.write_text("all:\n  hosts:\n    gw-a: {ansible_host: 203.0.113.10}\n    gw-b: {ansible_host: 203.0.113.20}\n")
    study = parse_study(RA_STUDY.replace("[{driver: none}, {driver: wireguard}, {driver: openvpn}]",
                                         "[{driver: none}, {driver: pptp}, {driver: strongswan}]"))
    hosts = HostSet(study, inventory)
    everything = {name: True for name in FEATURES}
    hosts.facts = {"gw-a": {"kernel": "6.1", "features": everything | {"ppp": False, "esp": False}},
                   "gw-b": {"kernel": "6.1", "features": everything | {"tun": False}}}
    none, pptp, strongswan = make_plan(study).scenarios
    pair = hosts.pair_of(pptp)
    assert _kernels_lack(none, pair, hosts) is None
    assert _kernels_lack(pptp, pair, hosts) == ("the kernel cannot run it: host gw-a: pptp: cannot run here: pptpd "
                                                "needs feature 'ppp' (PPP (/dev/ppp))")
    why = _kernels_lack(strongswan, pair, hosts)
    assert why.startswith("the kernel cannot run it: client gw-a and gateway gw-b together: strongswan: cannot run")
    assert "kernel needs feature 'esp'" in why and "libipsec needs feature 'tun'" in why


def test_a_port_held_on_a_host_refuses_only_the_tunnel_ends_that_bind_it_there(tmp_path):
    """From what each host's probe answered (set here as it would be): strongSwan binds UDP 500 at both
    ends, held on gw-b only; OpenVPN's client binds nothing (gw-a's 1194 is no matter); a nested
    layer's ends are namespaces of their own; a port held over the other protocol is another port."""
    from vpnlab.hosts.testbed import HostSet

    inventory = tmp_path / "lab.yml"
    inventory.write_text("all:\n  hosts:\n    gw-a: {ansible_host: 203.0.113.10}\n    gw-b: {ansible_host: 203.0.113.20}\n")
    study = parse_study(S2S_STUDY.replace(S2S_HOSTS, "hosts: {left: gw-a, right: gw-b}\n").replace(
        "[{driver: none}, {driver: wireguard}, {driver: openvpn, options: {transport: tcp}}]",
        "[{driver: none}, {driver: strongswan}, {driver: openvpn}, {driver: openvpn, inner: {driver: strongswan}}, "
        "{driver: wireguard}]"))
    hosts = HostSet(study, inventory)
    hosts.held_ports = {"gw-a": {("udp", 1194)}, "gw-b": {("udp", 500), ("tcp", 51820)}}
    held = {s.vpn.label: hosts.ports_held(s) for s in make_plan(study).scenarios}
    assert held.pop("strongswan default psk") == ["host gw-b: UDP 500 is held by another program: stop it, or run "
                                                  "on other hosts; `ss -uanp 'sport = :500'` on gw-b shows which"]
    assert set(held) == {"none", "openvpn aes-256-gcm udp", "strongswan default psk in openvpn aes-256-gcm udp",
                         "wireguard"} and not any(held.values()), held


@pytest.mark.integration
def test_a_host_without_the_python_modules_a_transfer_needs_is_refused_before_anything_starts(lab, tmp_path):
    """A transfer's files are made on the host by its own python3, with numpy and Pillow: on a host
    that has neither (Debian's directory of Python packages hidden under an empty tmpfs, in that host's
    own mounts) the run is refused naming the host and the packages, not failed scenario by scenario."""
    b = lab.hosts["gw-b"]
    packages = sh("/usr/bin/python3", "-c", "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))").stdout.strip()
    study, out = tmp_path / "study.yaml", lab.dir / "no-numpy"
    study.write_text(RA_STUDY.replace("[{driver: none}, {driver: wireguard}, {driver: openvpn}]", "[{driver: none}]")
                     .replace("[{kind: tcp, duration_s: 1, omit_s: 0}]", "[{kind: transfer, size: 1M}]"))
    sh("nsenter", f"--target={b.init_pid}", "--mount", "mount", "-t", "tmpfs", "vpnlab-test-no-numpy", packages)
    try:
        result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    finally:
        sh("nsenter", f"--target={b.init_pid}", "--mount", "umount", packages)
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert "on host gw-b, the Python modules PIL (python3-pil)" in said, said  # (numpy may live elsewhere too)
    assert "hosts prepare" in said
    assert "gw-a, the Python" not in said and not out.exists()
    assert wait_until(lambda: host_is_clean(b)), (b.processes(), b.links())
