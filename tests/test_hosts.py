"""Real hosts through Ansible and SSH: the inventory, the guard, and a lab of SSH "hosts"."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hosts_harness import CONTROLLER_ADDRESS, PYTHON, lab  # noqa: F401  (lab is the fixture)
from idle_checks import EXPECTED
from vpnlab.cli import app
from vpnlab.core.errors import StudyError, VpnlabError
from vpnlab.hosts.hoststate import SHELL_FUNCTIONS, HostState, ManagementPath, guard_ip_line, root_qdisc_device
from vpnlab.hosts.inventory import USER_KNOWN_HOSTS, host_key_policy, limit, load_inventory, select, ssh_options
from vpnlab.hosts.ssh import SAVED, SPAWN_WRAPPER

YAML_INVENTORY = """\
all:
  vars: {ansible_user: root}
  children:
    gateways:
      vars: {ansible_port: 2222, ansible_ssh_private_key_file: ~/.ssh/lab}
      hosts:
        hq-gw: {ansible_host: 198.18.0.2}
        branch-gw: {ansible_host: 198.18.0.3, ansible_port: 22}
      children:
        edge: {hosts: {edge-1: {}}}
    laptops: {hosts: {laptop: {ansible_become: true, ansible_user: me}}}
"""

INI_INVENTORY = """\
laptop ansible_host=198.18.0.9

[gateways]
gw-a ansible_host=198.18.0.2
gw-b ansible_host=198.18.0.3 ansible_port=2200

[gateways:vars]
ansible_user=admin
ansible_ssh_private_key_file=/keys/lab
"""

PATH = ManagementPath(controller_ip="203.0.113.5", host_ip="203.0.113.7", device="eth0")


def inventory(tmp_path, text, name="inventory.yml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the inventory, read by ansible-inventory ---------------------------------------------------

def test_yaml_inventory_groups_and_variables(tmp_path):
    hosts = load_inventory(inventory(tmp_path, YAML_INVENTORY))
    assert sorted(hosts) == ["branch-gw", "edge-1", "hq-gw", "laptop"]
    hq, branch, edge, laptop = hosts["hq-gw"], hosts["branch-gw"], hosts["edge-1"], hosts["laptop"]
    assert (hq.address, hq.port, hq.user) == ("198.18.0.2", 2222, "root")
    assert hq.key_file == str(Path("~/.ssh/lab").expanduser())
    assert branch.port == 22  # a host variable beats its group's
    assert edge.address == "edge-1" and edge.port == 2222 and set(edge.groups) == {"edge", "gateways"}
    assert (laptop.user, laptop.become, laptop.key_file, laptop.groups) == ("me", True, None, ("laptops",))


def test_ini_inventory(tmp_path):
    hosts = load_inventory(inventory(tmp_path, INI_INVENTORY, "hosts.ini"))
    assert (hosts["gw-b"].address, hosts["gw-b"].port, hosts["gw-b"].user) == ("198.18.0.3", 2200, "admin")
    assert hosts["gw-a"].key_file == "/keys/lab" and hosts["laptop"].user is None
    assert [h.name for h in limit(hosts, "gateways", "hosts.ini")] == ["gw-a", "gw-b"]
    assert [h.name for h in limit(hosts, "laptop,gw-b", "hosts.ini")] == ["gw-b", "laptop"]


def test_inventory_errors_name_the_file_and_the_host(tmp_path):
    with pytest.raises(StudyError, match=r"inventory .*nope\.yml: no such file"):
        load_inventory(tmp_path / "nope.yml")
    with pytest.raises(StudyError, match=r"inventory .*bad\.yml: Ansible cannot read it"):
        load_inventory(inventory(tmp_path, "all: [unclosed\n", "bad.yml"))
    path = inventory(tmp_path, YAML_INVENTORY)
    hosts = load_inventory(path)
    with pytest.raises(StudyError, match=r"no host named 'hq-gateway' \(it has: branch-gw, edge-1, hq-gw, laptop\)"):
        select(hosts, ["hq-gw", "hq-gateway"], path)
    with pytest.raises(StudyError, match="--limit 'servers' is neither a host nor a group"):
        limit(hosts, "servers", path)
    templated = inventory(tmp_path, "all:\n  hosts:\n    x: {ansible_host: '{{ lookup(\"env\", \"X\") }}'}\n", "t.yml")
    with pytest.raises(StudyError, match="ansible_host is a template"):
        load_inventory(templated)


# -- the host-key policy, as Ansible's ssh follows it ------------------------------------------

HOME_KNOWN_HOSTS = (str(Path(USER_KNOWN_HOSTS).expanduser()),)


def policy(variables, environ=None):
    found = host_key_policy(variables, environ or {}, "inventory i.yml: host h")
    return found.checking, found.known_hosts


def test_ssh_options_are_read_as_ssh_reads_them():
    args = """-o StrictHostKeyChecking=no -oUserKnownHostsFile=/tmp/k -o "ProxyJump jump" -C -o 'Port = 2'"""
    assert ssh_options(args, "x") == {"stricthostkeychecking": "no", "userknownhostsfile": "/tmp/k",
                                      "proxyjump": "jump", "port": "2"}
    assert ssh_options("-o StrictHostKeyChecking=yes -o stricthostkeychecking=no", "x") == \
        {"stricthostkeychecking": "yes"}  # the first value wins
    with pytest.raises(StudyError, match="inventory i.yml: host h: ansible_ssh_extra_args: cannot split"):
        policy({"ansible_ssh_extra_args": "-o 'unclosed"})


def test_host_key_checking_is_on_by_default_against_the_users_known_hosts():
    assert policy({}) == ("yes", HOME_KNOWN_HOSTS)
    assert policy({"ansible_ssh_common_args": "-o ServerAliveInterval=5"}) == ("yes", HOME_KNOWN_HOSTS)


@pytest.mark.parametrize("variables, environ, expected", [
    ({"ansible_host_key_checking": False}, {}, "no"),
    ({"ansible_host_key_checking": "no"}, {}, "no"),
    ({}, {"ANSIBLE_HOST_KEY_CHECKING": "False"}, "no"),
    ({}, {"ANSIBLE_SSH_HOST_KEY_CHECKING": "0"}, "no"),
    ({"ansible_host_key_checking": True}, {"ANSIBLE_HOST_KEY_CHECKING": "False"}, "yes"),  # the host's variable wins
    ({"ansible_ssh_host_key_checking": "yes"}, {"ANSIBLE_HOST_KEY_CHECKING": "no"}, "yes"),
    # checking off puts StrictHostKeyChecking=no first on Ansible's ssh command line: it wins
    ({"ansible_host_key_checking": False, "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes"}, {}, "no"),
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=no"}, {}, "no"),
    ({"ansible_ssh_extra_args": "-oStrictHostKeyChecking=accept-new"}, {}, "accept-new"),
    ({"ansible_ssh_common_args": "-o 'StrictHostKeyChecking ask'"}, {}, "yes"),  # no terminal to ask on
    # common args come before extra args on the command line
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new",
      "ansible_ssh_extra_args": "-o StrictHostKeyChecking=no"}, {}, "accept-new"),
])
def test_host_key_checking_follows_ansibles_precedence(variables, environ, expected):
    assert policy(variables, environ)[0] == expected


def test_the_known_hosts_files_come_from_user_known_hosts_file():
    assert policy({"ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null"}) == ("yes", ())
    two = policy({"ansible_ssh_extra_args": "-o 'UserKnownHostsFile=~/lab_hosts /etc/lab_hosts'"})[1]
    assert two == (str(Path("~/lab_hosts").expanduser()), "/etc/lab_hosts")


def test_bad_host_key_settings_name_the_variable():
    with pytest.raises(StudyError, match=r"host h: ansible_host_key_checking='maybe' is not a boolean"):
        policy({"ansible_host_key_checking": "maybe"})
    with pytest.raises(StudyError, match=r"ANSIBLE_HOST_KEY_CHECKING='sure' is not a boolean"):
        policy({}, {"ANSIBLE_HOST_KEY_CHECKING": "sure"})
    with pytest.raises(StudyError, match=r"ansible_ssh_common_args: StrictHostKeyChecking=sometimes: expected one of"):
        policy({"ansible_ssh_common_args": "-o StrictHostKeyChecking=sometimes"})


def test_an_inventory_carries_each_hosts_policy(tmp_path):
    text = ("all:\n  vars: {ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'}\n"
            "  hosts:\n    lax: {}\n    strict: {ansible_ssh_common_args: '-o UserKnownHostsFile=/keys/lab'}\n")
    hosts = load_inventory(inventory(tmp_path, text))
    assert (hosts["lax"].host_keys.checking, hosts["lax"].host_keys.known_hosts) == ("no", ())
    assert (hosts["strict"].host_keys.checking, hosts["strict"].host_keys.known_hosts) == ("yes", ("/keys/lab",))


def test_cli_bad_inventory_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["hosts", "list", "--inventory", str(tmp_path / "missing.yml")])
    assert result.exit_code == 2
    assert "missing.yml: no such file" in result.output


# -- never cut the branch vpnlab sits on -------------------------------------------------------

@pytest.mark.parametrize("line", [
    "route add default via 203.0.113.1",
    "r a default via 203.0.113.1",
    "route replace 0.0.0.0/0 dev wg0",
    "route add 203.0.113.0/24 dev tun0",   # would take the SSH path
    "route flush table main",
    "rule add from all lookup 100",
    "address add 203.0.113.9/24 dev eth0",
    "address flush dev eth0",
    "link set eth0 down",
    "link set dev eth0 netns elsewhere",
    "link del eth0",
])
def test_guard_refuses_what_could_cut_the_ssh_path(line):
    with pytest.raises(VpnlabError, match="refusing"):
        guard_ip_line(line, PATH)


def test_guard_records_what_a_line_creates():
    assert guard_ip_line("link add vw1a type wireguard", PATH) == ("links", "vw1a")
    assert guard_ip_line("link add link eth0 name vlan7 type vlan id 7", PATH) == ("links", "vlan7")
    assert guard_ip_line("addr add 198.18.1.1/30 dev vw1a", PATH) == ("addresses", "198.18.1.1/30 dev vw1a")
    assert guard_ip_line("route replace 198.18.128.0/24 dev vw1a", PATH) == ("routes", "198.18.128.0/24 dev vw1a")
    assert guard_ip_line("link set vw1a mtu 1420 up", PATH) is None
    assert guard_ip_line("route show", PATH) is None
    assert root_qdisc_device("qdisc replace dev eth0 root handle 1: tbf rate 8mbit burst 4k limit 20k") == "eth0"
    assert root_qdisc_device("qdisc add dev eth0 parent 1:1 handle 10: netem delay 20ms") is None


def test_teardown_script_removes_newest_first_and_only_ours():
    state = HostState("ab12cd", "ctl 1", {"pid": 5, "start": 9}, 0.0, namespaces=["vlab12cd-host-a"],
                      processes=[{"pid": 10, "start": 100, "what": "a", "session": 7, "session_start": 90},
                                 {"pid": 11, "start": 101, "what": "b"}],  # recorded before sessions were
                      links=["vlab12cda"], sysctls={"net.ipv4.ip_forward": "0"}, qdiscs=["eth1"])
    script = state.teardown_script(grace=1.0)
    assert script.index("stop 11 101 100 0 0") < script.index("stop 10 100 100 7 90") < script.index("ip netns del")
    assert "ip link del vlab12cda" in script and "sysctl -q -w net.ipv4.ip_forward=0" in script
    assert "tc qdisc del dev eth1 root" in script and script.rstrip().endswith("true")
    assert "rm -rf -- /run/vpnlab/ab12cd" in script
    with pytest.raises(ValueError):  # a local run's record on that host is its own `vpnlab clean`'s
        HostState.from_json(json.dumps({"run_id": "x", "owner_pid": 1}))


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name: [0] is field 3."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()


def _sh(script: str, *args) -> int:
    """The hosts' shell functions and `script` run here by sh (from a file: a host runs them as
    `sh -c`, which the suite's audit of programs run here cannot parse)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as file:
        file.write(SHELL_FUNCTIONS + script)
        file.flush()
        return subprocess.run(["sh", file.name, *map(str, args)], timeout=30).returncode


def test_the_hosts_shell_functions_stop_a_session_only_while_it_is_ours(tmp_path):
    """`alive`, `members` and `stop` (run by every remote stop and teardown) read /proc with the
    shell's own `read`: a command name holding ") " is skipped right, a reused PID (another start
    time) is left alone, and `stop` ends the leader and what it left in its session."""
    program = tmp_path / "a) b"  # a command name as /proc shows it: "(a) b)"
    program.symlink_to(shutil.which("sleep"))
    leader = subprocess.Popen(["sh", "-c", f'"$0" 60 & exec "$0" 60', program], start_new_session=True)
    try:
        assert wait_until(lambda: _stat_fields(leader.pid)[0] != "R" and "a) b" in Path(f"/proc/{leader.pid}/stat").read_text())
        start = int(_stat_fields(leader.pid)[19])
        assert _sh('alive "$1" "$2"', leader.pid, start) == 0
        assert _sh('alive "$1" "$2"', leader.pid, start + 1) == 1 and _sh('alive 999999999 1') == 1
        assert _sh('members "$1"', leader.pid) == 0 and _sh("members 999999999") == 1
        assert _sh('stop "$1" "$2" 100 "$1" "$2"', leader.pid, start + 1) == 0  # not ours: nothing stopped
        assert leader.poll() is None and _sh('members "$1"', leader.pid) == 0
        assert _sh('stop "$1" "$2" 100 "$1" "$2"', leader.pid, start) == 0
        assert leader.wait(5) == -signal.SIGTERM
        assert wait_until(lambda: _sh('members "$1"', leader.pid) == 1)  # the child it left went too
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(leader.pid)])
        leader.wait()


def test_the_spawn_wrapper_reports_its_process_then_runs_it_once_the_record_is_written(tmp_path):
    record = tmp_path / "state.json"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(SPAWN_WRAPPER)
    proc = subprocess.Popen(["sh", wrapper, record, "true"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    pid, start, session, leader_start = map(int, proc.stdout.readline().split())
    fields = _stat_fields(pid)
    assert (pid, start, session, leader_start) == (proc.pid, int(fields[19]), proc.pid, int(fields[19]))
    assert not record.exists()
    out, _ = proc.communicate('{"processes": []}\n')
    assert (out, record.read_text(), proc.returncode) == (SAVED + "\n", '{"processes": []}', 0)


def test_spawn_wrappers_writing_the_record_at_once_all_run(tmp_path):
    """A host's daemons started together (the background mix's servers) each write the record: each
    through a file of its own, then renamed (one shared temporary file once left the slower
    `mv` with nothing to move, and its daemon never ran)."""
    record = tmp_path / "state.json"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(SPAWN_WRAPPER)
    procs = [subprocess.Popen(["sh", wrapper, record, "true"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True) for _ in range(40)]
    for proc in procs:
        proc.stdout.readline()
    written = [f'{{"processes": [{n}]}}' for n in range(len(procs))]
    for proc, line in zip(procs, written):  # released one after another, faster than each writes
        proc.stdin.write(line + "\n")
        proc.stdin.close()
    assert [proc.wait(timeout=60) for proc in procs] == [0] * len(procs)
    assert record.read_text() in written and [p.name for p in tmp_path.iterdir()] == sorted(["state.json", "wrapper.sh"])


# -- a lab of SSH hosts -----------------------------------------------------------------------

def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.05)
    return predicate()


def host_is_clean(host, run_id: str) -> bool:
    """No process but sshd, no record, namespace, link or address of the run left on the host."""
    return (host.processes() == {} and host.listdir("/run/vpnlab") == []
            and not [n for n in host.listdir("/run/netns") if run_id in n] and f"vl{run_id}" not in host.links()
            and host.addresses() == [f"{host.address}/24"])


@pytest.mark.integration
def test_prepare_runs_the_playbook_on_every_host(lab):
    result = lab.vpnlab("hosts", "prepare", "--inventory", lab.inventory, "--packages", "iperf3,iproute2",
                        "--packages", "openssh-server", "--json")
    assert result.returncode == 1, result.stdout + result.stderr  # gw-down is unreachable
    reports = {r["host"]: r for r in json.loads(result.stdout)}
    for name in ("gw-a", "gw-b"):
        report = reports[name]
        assert report["status"] == "ok", report
        assert report["packages"] == {"iperf3": "present", "iproute2": "present", "openssh-server": "present"}
        assert report["features"]["netns"] and report["features"]["veth"] and report["kernel"] == os.uname().release
    assert reports["gw-down"]["status"] == "unreachable" and "Connection refused" in reports["gw-down"]["message"]
    assert all(host.processes() == {} for host in lab.hosts.values())  # the probe's namespace is gone too
    assert all(host.listdir("/run/netns") == [] for host in lab.hosts.values())


@pytest.mark.integration
def test_doctor_reports_each_host_over_ssh(lab):
    result = lab.vpnlab("hosts", "doctor", "--inventory", lab.inventory, "--json")
    assert result.returncode == 1, result.stderr  # gw-down
    reports = {r["host"]: r for r in json.loads(result.stdout)}
    a = reports["gw-a"]
    assert a["reachable"] and a["kernel"] == os.uname().release and a["cpus"] >= 1
    assert a["features"]["netns"] and a["features"]["veth"]
    assert a["tools"]["iperf3"].startswith("iperf 3")
    toward_b = next(p for p in a["paths"] if p["to"] == "gw-b")
    assert toward_b == {"to": "gw-b", "address": "198.18.0.3", "interface": "eth0", "driver": "veth",
                        "speed_mbit": toward_b["speed_mbit"]}
    assert not reports["gw-down"]["reachable"] and "gw-down" in reports["gw-down"]["error"]


@pytest.mark.integration
def test_commands_in_a_hosts_shell_keep_their_own_output_errors_status_and_input(lab):
    out, err = lab.scenario("shell").communicate(timeout=120)
    seen = json.loads(out.splitlines()[-1]) if out.strip() else pytest.fail(err)
    assert seen["first"] == ["no newline", "to stderr", 3]
    assert (seen["stdin"], seen["next"], seen["given"], seen["bytes"]) == ("", "next\n", "given input", "cat")
    assert seen["threads"] == ["0\n", "1\n", "2\n", "3\n"]


@pytest.mark.integration
def test_a_process_on_a_host_is_idle_and_signalled_only_while_asleep_in_its_call(lab):
    """testbed/idle.py over SSH: each look at a process is one round trip (RemoteNode.process_state)."""
    out, err = lab.scenario("idle").communicate(timeout=120)
    seen = json.loads(out.splitlines()[-1]) if out.strip() else pytest.fail(err)
    assert {key: value for key, value in seen.items() if key != "kind"} == EXPECTED
    a = lab.hosts["gw-a"]
    assert wait_until(lambda: a.processes() == {} and a.listdir("/run/vpnlab") == []), a.processes()


@pytest.mark.integration
def test_remote_nodes_measure_record_and_survive_losing_a_host(lab):
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    controller = lab.scenario("live")
    try:
        line = controller.stdout.readline()
        assert line, controller.stderr.read()
        ready = json.loads(line)
        run_id = ready["run_id"]
        # iperf3 server on b, client on a, over their link; the server's output came back here
        assert ready["iperf3"]["remote_host"] == b.address and ready["iperf3"]["received_bps"] > 1e8
        assert "Accepted connection from 198.18.0.2" in ready["server_log"]
        # commands ran on the host, not on the controller: traces only in a's private /tmp
        for marker in (ready["marker"], ready["inner_marker"]):
            assert a.path(marker).exists() and not b.path(marker).exists() and not Path(marker).exists()
        assert "198.18.1.2/30" in ready["inner_addresses"]
        assert "refusing `ip route add default" in ready["refused"]
        assert ready["failed"].startswith("CommandError: command failed (exit 1): gw-a: timeout -k 2 10 false")
        assert ready["timed_out"].endswith("timed out after 1 s")
        # recorded on the host before it was created; the secret is 0600 there and only there
        # spawn returns once the sleeper's record is sent; the host writes it, then runs the sleeper
        record = a.path(f"/run/vpnlab/{run_id}/state.json")
        assert wait_until(lambda: [p["pid"] for p in json.loads(record.read_text())["processes"]]
                          == [ready["sleepers"]["gw-a"]], timeout=30), record.read_text()
        state = json.loads(record.read_text())
        assert state["namespaces"] == [ready["namespace"]] and state["links"] == [ready["veth"]]
        assert state["sysctls"] == {"net.ipv4.ip_forward": "0"} and a.sysctl("net.ipv4.ip_forward") == "1"
        assert ready["secret_mode"] == "600" and a.path(ready["secret"]).stat().st_mode & 0o777 == 0o600
        assert not Path(ready["secret"]).exists()
        # a clean now leaves the live run alone
        cleaning = lab.vpnlab("hosts", "clean", "--inventory", lab.inventory, "--limit", "lab")
        assert f"gw-a: run {run_id} is still connected; left alone" in cleaning.stdout
        # cut host a's SSH connection: its sshd session process
        os.kill(a.outer_pid(state["owner"]["pid"]), signal.SIGKILL)
        controller.stdin.write("go\n")
        controller.stdin.flush()
        done = json.loads(controller.communicate(timeout=60)[0].splitlines()[-1])
    finally:
        if controller.poll() is None:
            controller.kill()
    check_after_cut(lab, done, run_id)


def check_after_cut(lab, done: dict, run_id: str) -> None:
    """Host a failed cleanly, b went on, both were torn down, and the sshd logs show it."""
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    after = done["after"]
    for attempt in ("a_run", "a_spawn"):
        assert after[attempt].startswith("HostUnreachable: host gw-a (root@198.18.0.2:22): the SSH connection was lost")
    assert after["a_sleeper_exit"] == 255 and "SSH connection to gw-a was lost" in after["a_sleeper_log"]
    assert after["b_uname"] == os.uname().release and after["b_sleeper_exit"] == -signal.SIGTERM
    assert after["b_session_left"] == ""  # the child b's sleeper left behind was stopped with it
    assert done["close"] == {"gw-a": "ok", "gw-b": "ok"}  # a's teardown went over a fresh connection
    for host in (a, b):
        assert wait_until(lambda: host_is_clean(host, run_id)), (host.name, host.processes())
    assert a.sysctl("net.ipv4.ip_forward") == "0"
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{lab.client_key}.pub"], capture_output=True,
                                 text=True).stdout.split()[1]
    for host, connections in ((a, 2), (b, 1)):
        log = host.log.read_text()
        accepted = f"Accepted publickey for root from {CONTROLLER_ADDRESS} port"
        assert log.count(accepted) >= connections and fingerprint in log and "Starting session: command" in log


@pytest.mark.integration
def test_clean_removes_what_a_crashed_controller_left(lab):
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    controller = lab.scenario("crash")
    out, err = controller.communicate(timeout=60)
    assert controller.returncode == 3, err
    crashed = json.loads(out.splitlines()[0])
    run_id = crashed["run_id"]
    assert a.listdir("/run/vpnlab") == [run_id] and b.listdir("/run/vpnlab") == [run_id]
    # each spawn returned once its process was in the host's record: none of them lands late, over a later one
    sleepers = crashed["sleepers"]
    assert crashed["recorded"] == {"gw-a": [sleepers["gw-a"], sleepers["inner"]], "gw-b": [sleepers["gw-b"]]}, crashed
    # the sleeps, orphaned: the crashed controller's sshd sessions and long-lived shells end once they
    # see its connection gone (over 5 s once with the suite's guests on the 2 cores)
    assert wait_until(lambda: len(a.processes()) == 2 and len(b.processes()) == 2, timeout=30), (
        a.processes(), b.processes())
    assert crashed["link"] in a.links()
    result = lab.vpnlab("hosts", "clean", "--inventory", lab.inventory, "--limit", "lab")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"gw-a: removed run {run_id}" in result.stdout and "1 namespaces, 2 processes" in result.stdout
    assert f"gw-b: removed run {run_id}" in result.stdout
    for host in (a, b):
        assert wait_until(lambda: host_is_clean(host, run_id)), (host.name, host.processes())
    again = lab.vpnlab("hosts", "clean", "--inventory", lab.inventory, "--limit", "lab")
    assert "gw-a: nothing to clean" in again.stdout and "gw-b: nothing to clean" in again.stdout


def test_other_load_on_a_host_is_every_process_but_the_runs_own():
    """The SSH session that takes the snapshot and whatever is below it is the run's, as is a
    daemon it started that left its shell; a kernel thread is the kernel's; the rest is other load.
    The snapshot is read by the one parser of /proc (cpu.parse_snapshot), as a host's SNAPSHOT prints it."""
    from vpnlab.measure.cpu import PF_KTHREAD, parse_snapshot
    from vpnlab.hosts.cpu import _others

    def stat(pid, comm, parent, ticks, flags=0):
        return f"O {pid} ({comm}) S {parent} 1 1 0 -1 {flags} 0 0 0 0 {ticks} 0 0 0 20 0 1 0"

    shown = "\n".join(["K 100", "S 61", stat(1, "sshd", 0, 5), stat(50, "sshd", 1, 1), stat(51, "sshd", 50, 9),
                       stat(60, "bash", 51, 1), stat(61, "sh", 60, 0), stat(62, "iperf3", 51, 300),
                       stat(70, "openvpn", 1, 400), stat(80, "yes (1)", 1, 500), stat(90, "kworker", 2, 7, PF_KTHREAD),
                       "T 70 71 (openvpn) S 1 1 1 0 -1 0 0 0 0 0 30 12 0 0 20 0 1 0",
                       "cpu  10 0 20 300 5 1 2 0 0 0", "cpu0 5 0 10 150 2 1 1 0 0 0", "cpu1 5 0 10 150 3 0 1 0 0 0"])
    snapshot = parse_snapshot(shown)
    assert (snapshot.tick, snapshot.shell, snapshot.machine) == (100, 61, (23, 33, 338))
    assert snapshot.cores == [(17, 1, 169), (16, 1, 169)] and snapshot.threads == {(70, 71): ("openvpn", 42)}
    assert _others(snapshot, spawned=[70]) == {1: ("sshd", 5), 50: ("sshd", 1), 80: ("yes (1)", 500)}


# -- host keys, with the lab's real sshd ---------------------------------------------------------

HOST_KEY_STUDY = """\
name: host-keys
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
vpns: [{driver: none}]
workloads: [{kind: ping, count: 2, interval_s: 0.05}]
"""


def keyed_inventory(lab, name: str, **variables) -> Path:
    """The lab's two hosts, with these variables for both, in an inventory file of the lab's."""
    hosts = "".join(f"    {h.name}: {{ansible_host: {h.address}}}\n" for h in lab.hosts.values())
    extra = "".join(f"    {key}: {json.dumps(value)}\n" for key, value in variables.items())
    path = lab.dir / f"{name}.yml"
    path.write_text(f"all:\n  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: {lab.client_key}\n"
                    f"{extra}  hosts:\n{hosts}")
    return path


def reached(lab, inventory: Path, env: dict | None = None) -> dict:
    """gw-a's doctor report: reachable, or the error."""
    result = subprocess.run(lab.controller_argv(PYTHON, "-m", "vpnlab", "hosts", "doctor", "--inventory", inventory,
                                                "--limit", "gw-a", "--json"),
                            capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)[0]


@pytest.mark.integration
def test_an_unknown_host_key_is_accepted_only_where_ansible_would(lab, tmp_path):
    known = lab.dir / "keys-unknown"
    known.write_text("")
    strict = keyed_inventory(lab, "strict", ansible_ssh_common_args=f"-o UserKnownHostsFile={known}")
    lax = keyed_inventory(lab, "lax", ansible_ssh_common_args=f"-o UserKnownHostsFile={known} -oStrictHostKeyChecking=no")
    off = keyed_inventory(lab, "off", ansible_host_key_checking=False, ansible_ssh_extra_args=f"-o 'UserKnownHostsFile {known}'")
    assert reached(lab, lax)["reachable"] and reached(lab, off)["reachable"]
    assert reached(lab, strict, {"ANSIBLE_HOST_KEY_CHECKING": "False"})["reachable"]
    study = tmp_path / "study.yaml"
    study.write_text(HOST_KEY_STUDY)
    result = lab.vpnlab("run", study, "--inventory", strict, "--out", lab.dir / "host-keys", "--no-progress")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert f"host gw-a (root@{lab.hosts['gw-a'].address}:22): its host key is not in the known-hosts files " \
           f"vpnlab read ({known})" in said
    assert f"ssh-keyscan -p 22 {lab.hosts['gw-a'].address} >> {known}" in said
    assert "ansible_host_key_checking: false" in said and "-o StrictHostKeyChecking=no" in said
    # the way out it gives works
    keyscan = subprocess.run(lab.controller_argv("sh", "-c", f"ssh-keyscan -p 22 {lab.hosts['gw-a'].address} >> {known}"),
                             capture_output=True, text=True, timeout=30)
    assert keyscan.returncode == 0 and reached(lab, strict)["reachable"], keyscan.stderr


@pytest.mark.integration
def test_accept_new_takes_a_first_key_for_the_run_but_never_a_changed_one(lab):
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    empty, wrong = lab.dir / "keys-empty", lab.dir / "keys-wrong"
    empty.write_text("")
    wrong.write_text(f"{a.address} " + " ".join((lab.dir / f"host_key_{b.name}.pub").read_text().split()[:2]) + "\n")
    accept_new = "-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={}"
    assert reached(lab, keyed_inventory(lab, "new", ansible_ssh_common_args=accept_new.format(empty)))["reachable"]
    assert empty.read_text() == ""  # accepted for that run only: the file is the user's, not written
    refused = reached(lab, keyed_inventory(lab, "changed", ansible_ssh_common_args=accept_new.format(wrong)))
    assert not refused["reachable"]
    assert f"its host key does not match the one recorded for it in the known-hosts files vpnlab read ({wrong})" \
        in refused["error"]
    # the lab's own known_hosts (~/.ssh/known_hosts of the controller) still serves the default
    assert reached(lab, lab.inventory)["reachable"]
