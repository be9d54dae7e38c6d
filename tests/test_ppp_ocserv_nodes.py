"""PPTP, L2TP and ocserv act only through their nodes (issue 33): their private mounts stay private
on a node that is a host's own network namespace (no `ip netns exec` around them), and ocserv runs
between real hosts over SSH, its files and programs there, its traffic encrypted on their WAN.
(PPTP and L2TP need kernel PPP and L2TP, which this kernel lacks: tests/test_vm_remote_access.py and test_vm_site_to_site.py run them.)"""

import sqlite3
import subprocess
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from conftest import recorded_algorithms
from hosts_harness import built_lab, host_is_clean, wait_until
from test_hosts_study import LAB_SUBNET
from test_tunnels import build, iperf_through
from vpnlab.catalog import DRIVERS
from vpnlab.drivers.base import Tunnel, TunnelEnv, wait_for
from vpnlab.core.errors import TunnelError
from vpnlab.run.proof import prove
from vpnlab.drivers.ppp import private_etc, write_etc
from vpnlab.testbed.node import Node, inside, private_run


class HostOwnNode:
    """A node in this machine's own network and mount namespaces, as RemoteNode(namespace=None) is on
    a host: its commands run as they are, with no `ip netns exec` (and so no mount namespace) around them."""

    role = "gateway"

    def __init__(self, scratch: Path):
        self.folder = scratch

    def scratch(self) -> PurePosixPath:
        return PurePosixPath(self.folder)

    def write_file(self, path, content, mode=0o600) -> str:
        path = Path(inside(path, self.scratch()))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
        return str(path)


def mounts() -> list[str]:
    """This machine's mounts, less the network namespaces' (tests running beside this one add and
    remove theirs under /run/netns)."""
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if " /run/netns" not in line]


def test_pppd_sees_the_tunnel_s_etc_ppp_and_nobody_else_does(state, tmp_path):
    node = HostOwnNode(state.secrets_dir)
    env = TunnelEnv(state, 0, tmp_path, "pptpd")
    write_etc(env, [node])
    before, chap = mounts(), Path("/etc/ppp/chap-secrets").read_bytes()
    files = ("/etc/ppp/chap-secrets", "/etc/ppp/options", "/etc/ppp/ip-up", "/proc/self/mounts")
    seen = subprocess.run(private_etc(env, node, ["sh", "-c", 'for f; do cat "$f"; echo "=== $f"; done', "sh", *files]),
                          capture_output=True, timeout=10)
    assert seen.returncode == 0, seen.stderr
    shown, rest = {}, seen.stdout
    for name in files:  # each file's bytes, then "=== its name"
        shown[name], rest = rest.split(f"=== {name}\n".encode(), 1)
    ours = Path(env.folder(node), "chap-secrets").read_bytes()
    assert ours.startswith(b'"vpnlab" "vpnlab-gw" "') and shown["/etc/ppp/chap-secrets"] == ours
    assert shown["/etc/ppp/options"] == b"" and shown["/etc/ppp/ip-up"] == Path("/bin/true").read_bytes()
    assert b"vpnlab-lock /run/lock tmpfs" in shown["/proc/self/mounts"]
    assert mounts() == before and Path("/etc/ppp/chap-secrets").read_bytes() == chap  # nothing seen outside


def test_a_private_run_keeps_its_folder_and_hides_the_rest_of_run(state):
    node = HostOwnNode(state.secrets_dir)
    kept = node.write_file(f"{node.scratch()}/l0-x/config", "kept\n")
    before = mounts()
    argv = private_run(["sh", "-c", 'cat "$0"; for f in /run/*; do echo "${f#/run/}"; done; cat /proc/self/mounts', kept],
                       keep=Path(kept).parent, make=("/run/xl2tpd",))
    seen = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    listed = set(lines[1:lines.index(next(line for line in lines if " / " in line))])
    # the kept folder's top under /run, `make`, and mount(8)'s own table: nothing else of /run
    assert lines[0] == "kept" and {Path(kept).parts[2], "xl2tpd"} <= listed <= {Path(kept).parts[2], "xl2tpd", "mount"}
    assert any(line.startswith("vpnlab-run /run tmpfs") for line in lines)
    assert mounts() == before and not any("vpnlab-run" in line for line in mounts())


@pytest.mark.integration
def test_ocserv_s_files_are_private_to_its_tunnel_and_go_with_it(state, tmp_path):
    """Site to site in namespaces: TCP through it, encrypted on the WAN; every file it wrote in its
    tunnel's folder 0600 (its connect script 0700), the folder and its daemons gone with the tunnel."""
    bed = build(state, "site-to-site", 1)
    driver, options = DRIVERS["ocserv"], DRIVERS["ocserv"].Options()
    left, right = bed.tunnel_sites(0)
    tunnel = driver.up(left, right, options, "default", TunnelEnv(state, 0, tmp_path, "ocserv"))
    assert iperf_through(bed) > 1_000_000
    proof = prove(bed, tunnel.channels, left.underlay_ip, tmp_path / "p.pcap")
    assert proof.ok and not proof.marker_in_clear, proof.problems
    folder = Path(tunnel.env.folder(left.node))
    modes = {p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777 for p in folder.rglob("*") if p.is_file()}
    assert {"ocserv.conf", "ocpasswd", "password", "connect-script", "client-ready", "users/vpnlab"} <= set(modes)
    modes.pop("client-ready")  # the script's own: the client's tunnel address and MTU
    assert modes.pop("connect-script") == 0o700
    assert set(modes.values()) == {0o600}, modes
    pids = [proc.pid for _, proc, _ in tunnel.processes]
    tunnel.down()
    assert not folder.exists()
    assert all(subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0 for pid in pids)


def test_a_log_a_daemon_writes_on_its_node_is_quoted_and_kept_here(state, tmp_path):
    """pppd writes its `logfile` on its node (a host, over there): a tunnel that never carries quotes
    it, read through the node, and once the tunnel is down its copy stays beside the other logs."""
    node = Node("gateway", "not-used-by-files", state)  # a namespace node: its files are this machine's
    env = TunnelEnv(state, 0, tmp_path, "pptpd")
    tunnel = Tunnel(env, ("gre", None))
    env.write(node, "options", "")
    written = tunnel.own_log(node, "pppd-gateway")
    assert written.startswith(f"{env.folder(node)}/") and not env.log("pppd-gateway").exists()
    node.write_file(written, "rcvd [proto=0x8f] e9 0a\nUnsupported protocol 0x8f received\n")
    with pytest.raises(TunnelError) as error:
        wait_for(lambda: False, 0.01, "the first packet", tunnel)
    assert "l0-pppd-gateway.log:" in str(error.value) and "Unsupported protocol 0x8f received" in str(error.value)
    node.write_file(written, "Unsupported protocol 0x8f received\nConnection terminated.\n")
    tunnel.down()
    assert not Path(env.folder(node)).exists()
    assert env.log("pppd-gateway").read_text().endswith("Connection terminated.\n")


HOSTS_STUDY = """\
name: ocserv-on-hosts
topology: {topology}
hosts: {hosts}
repetitions: 1
order: listed
vpns: [{{driver: none}}, {{driver: ocserv}}, {{driver: ocserv, options: {{transport: tls}}}}]
workloads: [{{kind: tcp, duration_s: 1, omit_s: 0}}]
"""


@pytest.fixture(scope="module")
def lab():
    """Two SSH "hosts" and a controller in namespaces of their own (hosts_harness.Lab), on a network the
    testbed's site-to-site addresses do not overlap; all of it removed afterwards."""
    with built_lab(study_home=True, subnet=LAB_SUBNET) as built:
        yield built


@pytest.mark.integration
@pytest.mark.parametrize("topology", ["remote-access", "site-to-site"])
def test_ocserv_runs_between_real_hosts_over_ssh(lab, tmp_path, topology):
    """Its certificates, password and configuration on the hosts, `openssl passwd`, ocserv,
    openconnect and its connect script run there; TCP through it, encrypted on the WAN, with the
    modelled overhead and the algorithms it declares; nothing of it left on either host. Site to
    site, the gateway also routes the client's LAN into the client's session (a per-user file there)."""
    study, out = tmp_path / "study.yaml", lab.dir / f"ocserv-{topology}"
    ends = "{client: gw-a, gateway: gw-b}" if topology == "remote-access" else "{left: gw-a, right: gw-b}"
    study.write_text(HOSTS_STUDY.format(topology=topology, hosts=ends))
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    db = sqlite3.connect(out / "results.sqlite")
    try:
        status = {vpn: (state, failure) for vpn, state, failure in db.execute("SELECT vpn_label, status, failure FROM scenarios")}
        values = {(vpn, metric): value for vpn, metric, value in db.execute(
            "SELECT sc.vpn_label, s.metric, s.value FROM samples s JOIN scenarios sc ON sc.id = s.scenario_id")}
    finally:
        db.close()
    vpns = ("ocserv dtls", "ocserv tls")
    assert status == {vpn: ("done", None) for vpn in ("none", *vpns)}, status  # done: the proof found it encrypted
    for vpn, overhead in zip(vpns, (66, 89)):
        assert values[(vpn, "overhead_bytes")] == values[(vpn, "overhead_model_bytes")] == overhead, vpn
        assert values[(vpn, "throughput_mbps")] > 1, vpn
    recorded, flags = recorded_algorithms(out)
    assert flags == [] and recorded["ocserv dtls"][0]["negotiated"]["data"].startswith("DTLS 1.2"), recorded
    for host in lab.hosts.values():  # nothing of it left: no daemon, file, interface (its own TUNs too)
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
        links = [line.split(": ")[1] for line in host.links().splitlines()]
        assert not [name for name in links if name.startswith(("vc", "vpns"))], links
