"""A lab of "real hosts" for the hosts tests: network namespaces that behave like machines.

Each host is a network namespace of ours with its own mount namespace (private
/run, /tmp and /root: a "remote" command that in fact ran on the controller would
leave its traces in the wrong place), its own PID namespace, and its own OpenSSH
server with per-test host and client keys and its own log. The controller runs
in a namespace of its own too, with a private home (known_hosts, Ansible's
config and temporary files), and reaches the hosts over a bridge in a switch
namespace. Addresses come only from 198.18.0.0/24 and exist only inside these
namespaces: nothing is added to the default namespace.

Run as a program (`python hosts_harness.py SCENARIO INVENTORY WORKDIR`) this file
is the controller side of the tests: see the `scenario_*` functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from vpnlab.plan.study import builtin_studies

PREFIX = f"vlh{os.getpid()}"            # every namespace, file and interface of this test run
SUBNET = "198.18.0"                    # /24 on the lab's bridge: controller .1, hosts .2, .3 ...
CONTROLLER_ADDRESS = f"{SUBNET}.1"
PYTHON = sys.executable
HARNESS = Path(__file__).resolve()

SSHD_CONFIG = """\
ListenAddress {address}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile none
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
# the key files sit under /var/tmp, which is world-writable
StrictModes no
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""

# Started with `unshare --pid --fork --mount-proc`: sshd is PID 1 of the host, so ending the
# `unshare` we started (--kill-child) ends every process of the host with it. Its /run holds what a
# booted Debian host's does before anyone logs in: sshd's folder and /run/lock (pppd's lock files).
HOST_INIT = ("mount -t tmpfs -o mode=755 lab-run /run && mkdir -m 755 /run/sshd && mkdir -m 1777 /run/lock "
             "&& mount -t tmpfs -o mode=1777 lab-tmp /tmp && mount -t tmpfs -o mode=700 lab-root /root "
             '&& exec /usr/sbin/sshd -D -f "$0" -E "$1"')

# Ansible's ControlPersist master would outlive each command: the lab counts its processes.
ANSIBLE_CFG = ("[defaults]\ninterpreter_python = auto_silent\n"
               "[ssh_connection]\nssh_args = -o ControlMaster=no\npipelining = True\n")


def sh(*argv, check: bool = True, input: str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))}: {proc.stderr.strip()}")
    return proc


def netns_pids(namespace: str) -> list[int]:
    return [int(p) for p in sh("ip", "netns", "pids", namespace, check=False).stdout.split()]


@dataclass
class LabHost:
    name: str
    namespace: str
    address: str
    log: Path
    wrapper: subprocess.Popen | None = None  # the `unshare` we started
    init_pid: int = 0                         # its child: sshd, PID 1 of the host

    def path(self, inside: str) -> Path:
        """A path as this host sees it (its private /run, /tmp, /root)."""
        return Path(f"/proc/{self.init_pid}/root") / inside.lstrip("/")

    def listdir(self, inside: str) -> list[str]:
        folder = self.path(inside)
        return sorted(os.listdir(folder)) if folder.is_dir() else []

    def pids(self) -> list[int]:
        """Outer PIDs of every process in this host (its PID namespace), the sshd listener aside."""
        own = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        found = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and int(entry) != self.init_pid and os.readlink(f"/proc/{entry}/ns/pid") == own:
                    found.append(int(entry))
            except OSError:
                continue  # gone meanwhile
        return found

    def processes(self) -> dict[int, str]:
        """Outer PID -> command line of every process in this host, the sshd listener aside."""
        found = {}
        for pid in self.pids():
            try:
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
        return found

    def outer_pid(self, inner: int) -> int | None:
        """The PID we see for a process the host knows as `inner` (it has its own PID namespace)."""
        for pid in self.pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            nspids = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
            if int(nspids[-1]) == inner:
                return pid
        return None

    def sysctl(self, key: str) -> str:
        return sh("ip", "netns", "exec", self.namespace, "sysctl", "-n", key).stdout.strip()

    def links(self) -> str:
        return sh("ip", "-n", self.namespace, "-o", "link").stdout

    def addresses(self) -> list[str]:
        """Global addresses in the host's own network namespace."""
        shown = sh("ip", "-n", self.namespace, "-o", "addr", "show", "scope", "global").stdout
        return sorted(line.split()[3] for line in shown.splitlines())


class Lab:
    """The switch, the controller and the hosts; `teardown` removes all of it, always."""

    def __init__(self, names=("gw-a", "gw-b"), subnet: str = SUBNET, outside: str | None = None):
        """`outside`: a folder of a controller outside this machine, on the switch's bridge at the
        controller's address (.1): its key, home and inventory go there, in a folder of the lab's."""
        self.subnet, self.controller_address, self.with_controller = subnet, f"{subnet}.1", outside is None
        self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-", dir="/var/tmp"))
        self.controller_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-", dir=outside)) if outside else self.dir
        self.switch, self.controller = f"{PREFIX}-sw", f"{PREFIX}-ctl"
        self.namespaces: list[str] = []
        self.hosts = {name: LabHost(name, f"{PREFIX}-{name}", f"{subnet}.{i + 2}", self.dir / f"sshd-{name}.log")
                      for i, name in enumerate(names)}
        self.home = self.controller_dir / "controller-home"
        self.inventory = self.controller_dir / "inventory.yml"
        self.client_key = self.controller_dir / "client_key"

    # -- building ----------------------------------------------------------
    def build(self) -> "Lab":
        self._add_namespace(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        if self.with_controller:
            self._attach(self.controller, self.controller_address, "ctl")
        for i, host in enumerate(self.hosts.values()):
            self._attach(host.namespace, host.address, f"h{i}")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{PREFIX}-controller", "-f", self.client_key)
        (self.dir / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        for host in self.hosts.values():
            self._start_sshd(host)
        self._write_controller_home()
        self._write_inventory()
        for host in self.hosts.values():
            self._wait_listening(host)
        return self

    def _add_namespace(self, name: str) -> None:
        self.namespaces.append(name)  # recorded first: teardown removes it whatever happens next
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _attach(self, namespace: str, address: str, port: str) -> None:
        """A namespace with one interface, eth0, on the switch's bridge."""
        self._add_namespace(namespace)
        sh("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        sh("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", namespace, "link", "set", "eth0", "up")

    def _start_sshd(self, host: LabHost) -> None:
        host_key = self.dir / f"host_key_{host.name}"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", host_key)
        config = self.dir / f"sshd_config_{host.name}"
        config.write_text(SSHD_CONFIG.format(address=host.address, host_key=host_key,
                                             authorized_keys=self.dir / "authorized_keys"))
        host.wrapper = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, "unshare", "--pid", "--fork", "--kill-child=SIGKILL",
             "--mount-proc", "sh", "-c", HOST_INIT, str(config), str(host.log)],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / f"init-{host.name}.log", "wb"))
        host.init_pid = self._child_of(host.wrapper.pid, "sshd")

    @staticmethod
    def _child_of(pid: int, comm: str) -> int:
        """The child `unshare` forked, once it has become `comm`."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split() if Path(f"/proc/{pid}").exists() else []
            for child in map(int, children):
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() == comm:
                        return child
                except OSError:
                    continue
            time.sleep(0.02)
        raise RuntimeError(f"process {pid} never started {comm}")

    def _wait_listening(self, host: LabHost) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if sh("ip", "netns", "exec", host.namespace, "ss", "-Htln", "sport = :22").stdout.strip():
                return
            if host.wrapper.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd of {host.name} is not listening: {host.log.read_text(errors='replace')}")

    def _write_controller_home(self) -> None:
        ssh_dir = self.home / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        known = [" ".join([h.address, *(self.dir / f"host_key_{h.name}.pub").read_text().split()[:2]])
                 for h in self.hosts.values()]
        (ssh_dir / "known_hosts").write_text("\n".join(known) + "\n")
        (self.home / ".ansible.cfg").write_text(ANSIBLE_CFG)

    def _write_inventory(self) -> None:
        """YAML with groups and group variables, as users write them, and one host whose port
        nobody listens on."""
        hosts = "\n".join(f"        {h.name}: {{ansible_host: {h.address}}}" for h in self.hosts.values())
        self.inventory.write_text(
            f"all:\n  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: {self.client_key}\n"
            f"  children:\n    lab:\n      vars:\n        ansible_port: 22\n      hosts:\n{hosts}\n"
            f"    down:\n      hosts:\n        gw-down: {{ansible_host: {self.controller_address}, ansible_port: 2222}}\n")

    # -- the controller ------------------------------------------------------
    def controller_argv(self, *argv) -> list[str]:
        """Run a program as the controller: in its namespace, with its private home as /root."""
        return as_controller(self.controller, self.home, *argv)

    def vpnlab(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.controller_argv(PYTHON, "-m", "vpnlab", *args),
                              capture_output=True, text=True, timeout=timeout)

    def scenario(self, name: str) -> subprocess.Popen:
        """Start a controller scenario of this file; it talks JSON lines on stdout."""
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.dir))
        return subprocess.Popen(self.controller_argv(PYTHON, HARNESS, name, self.inventory, workdir),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # -- teardown -----------------------------------------------------------
    def teardown(self) -> None:
        """End what we started, by PID, then our namespaces and files."""
        for host in self.hosts.values():
            if host.wrapper and host.wrapper.poll() is None:
                host.wrapper.kill()  # --kill-child takes the host's PID 1, and so all of the host
                host.wrapper.wait(10)
        for name in reversed(self.namespaces):
            for pid in netns_pids(name):  # anything still in a namespace of ours was started by us
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", name, check=False)
        self.namespaces.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.controller_dir, ignore_errors=True)


def as_controller(namespace: str, home: Path, *argv) -> list[str]:
    """`argv` run in `namespace` with `home` as /root (ip netns exec's mount namespace is its own)."""
    return ["ip", "netns", "exec", namespace, "sh", "-c", 'mount --bind "$0" /root && exec "$@"',
            str(home), "env", "HOME=/root", *map(str, argv)]


@contextlib.contextmanager
def built_lab(study_home: bool = False, **options):
    """A Lab (`options` as Lab takes them) removed afterwards, on failure too; then nothing of it may
    remain and the default namespace must be as it was. With `study_home`, the controller's private
    home gets matplotlib's font list (a study's report), or its first report would build one."""
    from conftest import default_namespace_snapshot

    before = default_namespace_snapshot()
    built = Lab(**options)
    try:
        built.build()
        if study_home:
            import matplotlib  # here: a guest's program (kernel_lab.py) imports this module under emulation
            shutil.copytree(matplotlib.get_cachedir(), built.home / ".cache" / "matplotlib", dirs_exist_ok=True)
        yield built
    finally:
        built.teardown()
    assert leftovers() == [], "namespaces or processes of the lab left behind"
    assert default_namespace_snapshot() == before, "the default namespace changed"


# -- seed studies from their own files, shortened --------------------------------------------------

def _picked(entries: list[dict], picks: list) -> list[dict]:
    """The entries at the picked indices, an (index, fields) pick with those fields replaced (in
    `options` for a VPN)."""
    chosen = []
    for pick in picks:
        index, fields = pick if isinstance(pick, tuple) else (pick, {})
        entry = dict(entries[index])
        if "driver" in entry and fields:
            entry["options"] = {**entry.get("options", {}), **fields}
        else:
            entry.update(fields)
        chosen.append(entry)
    return chosen


def seed_drivers(name: str, cut: dict) -> list[str]:
    """The drivers of the vpns `cut` picks from seed `name` (of a nested one, the outer)."""
    return [vpn["driver"] for vpn in _picked(yaml.safe_load(builtin_studies()[name])["vpns"], cut["vpns"])]


# A seed's two ends on the lab's first two hosts, by its topology.
SEED_ENDS = {"remote-access": {"client": "gw-a", "gateway": "gw-b"}, "site-to-site": {"left": "gw-a", "right": "gw-b"}}


def seed_hosts(name: str, cut: dict | None = None) -> dict[str, str]:
    """Seed `name`'s ends mapped to the lab's hosts: the cut's own `hosts`, or the first two."""
    return (cut or {}).get("hosts") or SEED_ENDS[yaml.safe_load(builtin_studies()[name])["topology"]]


def seed_cut(name: str, cut: dict) -> list[str]:
    """The --set assignments that shorten seed `name` as `cut` says: its `repetitions` (two unless it
    says), its ends on the
    lab's hosts (seed_hosts: the cut's `hosts`, or the first two), its links shaped on them, and a
    subset of its scenarios: entries of the file's own lists by index (`vpns`, `links`, `workloads`),
    a swept field narrowed to one of its values."""
    study = yaml.safe_load(builtin_studies()[name])
    links = [link | {"shape": True} for link in _picked(study["links"], cut["links"])]
    return [f"repetitions={cut.get('repetitions', 2)}", f"hosts={json.dumps(seed_hosts(name, cut))}", f"links={json.dumps(links)}",
            f"vpns={json.dumps(_picked(study['vpns'], cut['vpns']))}",
            f"workloads={json.dumps(_picked(study['workloads'], cut['workloads']))}"]


def stored_scenarios(db: Path) -> dict[tuple[str, str], dict]:
    """A store's scenarios: (vpn label, workload label) -> driver, its implementation, status, failure,
    hosts mapping, notes and where it was measured."""
    found = _rows(db, "SELECT vpn_label, workload_label, vpn, implementation, status, failure, hosts, notes, measured_in"
                      " FROM scenarios")
    return {(label, workload): {"vpn": vpn, "implementation": implementation, "status": status, "failure": failure,
                                "hosts": json.loads(hosts or "{}"), "notes": notes, "measured_in": measured_in}
            for label, workload, vpn, implementation, status, failure, hosts, notes, measured_in in found}


def stored_values(db: Path) -> dict[tuple[str, str, str], list[float]]:
    """A store's samples: (vpn label, workload label, metric) -> its values, one per repetition."""
    found: dict = {}
    for label, workload, metric, value in _rows(
            db, "SELECT sc.vpn_label, sc.workload_label, s.metric, s.value FROM samples s"
                " JOIN scenarios sc ON sc.id = s.scenario_id ORDER BY s.repetition"):
        found.setdefault((label, workload, metric), []).append(value)
    return found


def check_seed_store(db: Path, seed: str, cut: dict) -> None:
    """The store of seed `seed` shortened as `cut` says (seed_cut): the cut's VPNs (of a nested one,
    the outer), every scenario done on the lab's hosts (none refused, none in the VM backend), each
    with each repetition's samples of the cut's `metrics`; through a tunnel (proved encrypted on the
    hosts' WAN: status done), its overhead on the WAN as modelled."""
    scenarios, values = stored_scenarios(db), stored_values(db)
    outer = [s["vpn"].split("-in-")[-1] for s in scenarios.values()]  # a nested one is stored inner-in-outer
    assert sorted(outer) == sorted(seed_drivers(seed, cut))
    for key, scenario in scenarios.items():
        assert (scenario["status"], scenario["failure"], scenario["hosts"], scenario["measured_in"]) == (
            "done", None, seed_hosts(seed, cut), "host"), (key, scenario)
        for metric in cut["metrics"]:
            assert len(values[(*key, metric)]) == cut.get("repetitions", 2), (key, metric)
        if scenario["vpn"] != "none":
            check_overhead(scenario["vpn"], values[(*key, "overhead_bytes")], values[(*key, "overhead_model_bytes")])


def check_overhead(driver: str, measured: list[float], model: list[float]) -> None:
    """Each repetition's overhead on the WAN as the driver models it. PPTP's GRE acknowledgement
    (4 bytes) rides nearly every packet, not all (pptp.py's model)."""
    for overhead, modelled in zip(measured, model, strict=True):
        assert overhead == modelled or (driver == "pptp" and overhead == modelled - 4), (driver, overhead, modelled)


def _rows(db: Path, query: str) -> list[tuple]:
    connection = sqlite3.connect(db)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def lab():
    """Two SSH hosts and a controller in namespaces (built_lab)."""
    with built_lab() as built:
        yield built


def leftovers() -> list[str]:
    """Namespaces of this test run, and processes in them, still present."""
    names = [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line.startswith(PREFIX)]
    return [f"namespace {n} (processes {netns_pids(n)})" for n in names]


# -- the controller side (run inside the controller namespace) ---------------------------------

def emit(kind: str, data: dict) -> None:
    print(json.dumps({"kind": kind, **data}), flush=True)


def connect_both(inventory: str):
    from vpnlab.hosts.inventory import load_inventory, select
    from vpnlab.hosts.ssh import SshHost

    run_id = secrets.token_hex(3)
    hosts = select(load_inventory(inventory), ["gw-a", "gw-b"], inventory)
    return run_id, [SshHost(h, run_id).connect() for h in hosts]


# A program that forks a child and leaves it behind when it ends, as pppd's pptp leaves its call manager.
ORPHANING_SLEEP = "sleep 600 & exec sleep 601"


def scenario_live(inventory: str, workdir: Path) -> None:
    """Measure between two hosts, use a namespace on one, wait for the test to cut host a's
    SSH connection, then check a fails cleanly while b works, and close both."""
    from vpnlab.core.errors import VpnlabError
    from vpnlab.hosts.node import RemoteNode

    run_id, (a, b) = connect_both(inventory)
    left, right = RemoteNode("left", a), RemoteNode("right", b)
    out = {"run_id": run_id}
    try:
        out.update(_measure(left, right, workdir, run_id))
        out.update(_namespace_on_host(a, left, run_id))
        for name, argv, timeout in (("refused", ["ip", "route", "add", "default", "via", CONTROLLER_ADDRESS], 10),
                                    ("failed", ["false"], 10), ("timed_out", ["sleep", "5"], 1)):
            try:
                left.run(argv, timeout=timeout)
            except VpnlabError as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
        out["secret"] = left.write_file(f"{left.scratch()}/keys/psk", "not for the controller\n")
        out["secret_mode"] = left.run(["stat", "-c", "%a", out["secret"]]).stdout.strip()
        left.sysctl(**{"net.ipv4.ip_forward": 1})
        sleeper_a = left.spawn(["sleep", "600"], workdir / "sleep-a.log", what="sleep")
        sleeper_b = right.spawn(["sh", "-c", ORPHANING_SLEEP], workdir / "sleep-b.log", what="sleep")
        out["sleepers"] = {"gw-a": sleeper_a.pid, "gw-b": sleeper_b.pid}
        emit("ready", out)
        sys.stdin.readline()  # the test cuts host a's SSH connection now
        out["after"] = _after_cut(left, right, sleeper_a, sleeper_b, workdir)
    finally:
        out["close"] = {}
        for host in (a, b):
            try:
                host.close()
                out["close"][host.host.name] = "ok"
            except VpnlabError as exc:
                out["close"][host.host.name] = str(exc)
        emit("done", out)


def _measure(left, right, workdir: Path, run_id: str) -> dict:
    server_address = right.host.host.address
    log = workdir / "iperf3-server.log"
    server = right.spawn(["iperf3", "-s", "-B", server_address, "-p", "5201"], log, what="iperf3 -s")
    right.wait_listening(5201, server, log)
    client = json.loads(left.run(["iperf3", "-c", server_address, "-p", "5201", "-t", "1", "-J"], timeout=30).stdout)
    right.stop(server)
    marker = f"/tmp/vpnlab-test-{run_id}-marker"
    left.run(["touch", marker])
    return {"iperf3": {"received_bps": client["end"]["sum_received"]["bits_per_second"],
                       "remote_host": client["start"]["connected"][0]["remote_host"]},
            "server_log": log.read_text(), "server_exit": server.returncode, "marker": marker}


def _namespace_on_host(a, left, run_id: str) -> dict:
    """A role not mapped to a host: a namespace on host a, joined to it by a veth pair."""
    from vpnlab.hosts.node import namespace_node

    inner = namespace_node(a, "host-a", f"vl{run_id}-host-a")
    veth = f"vl{run_id}a"
    left.ip(f"link add {veth} type veth peer name eth0 netns {inner.namespace}",
            f"addr add 198.18.1.1/30 dev {veth}", f"link set {veth} up")
    inner.ip("addr add 198.18.1.2/30 dev eth0", "link set eth0 up")
    inner.run(["ping", "-c", "1", "-W", "2", "198.18.1.1"])
    inner_marker = f"/tmp/vpnlab-test-{run_id}-inner"
    inner.run(["touch", inner_marker])
    return {"namespace": inner.namespace, "veth": veth, "inner_marker": inner_marker,
            "inner_addresses": inner.run(["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout}


def _after_cut(left, right, sleeper_a, sleeper_b, workdir: Path) -> dict:
    from vpnlab.core.errors import VpnlabError

    after = {}
    for name, attempt in (("run", lambda: left.run(["true"])),
                          ("spawn", lambda: left.spawn(["sleep", "1"], workdir / "late.log"))):
        try:
            attempt()
            after[f"a_{name}"] = "worked"
        except VpnlabError as exc:
            after[f"a_{name}"] = f"{type(exc).__name__}: {exc}"
    after["a_sleeper_exit"] = sleeper_a.wait(timeout=10)
    after["a_sleeper_log"] = (workdir / "sleep-a.log").read_text()
    after["b_uname"] = right.run(["uname", "-r"]).stdout.strip()
    right.stop(sleeper_b)
    after["b_sleeper_exit"] = sleeper_b.returncode
    session = sleeper_b.record["session"]  # what it left behind went with it
    after["b_session_left"] = right.run(["sh", "-c", f"ps -o stat=,args= -s {session} | grep -v '^Z'; true"]).stdout
    return after


def scenario_crash(inventory: str, workdir: Path) -> None:
    """Create things on both hosts, then die without tearing anything down."""
    from vpnlab.hosts.node import RemoteNode, namespace_node

    run_id, (a, b) = connect_both(inventory)
    left, right = RemoteNode("left", a), RemoteNode("right", b)
    inner = namespace_node(a, "host-a", f"vl{run_id}-host-a")
    left.ip(f"link add vl{run_id}c type veth peer name eth0 netns {inner.namespace}",
            f"addr add 198.18.2.1/30 dev vl{run_id}c")
    sleepers = {"gw-a": left.spawn(["sleep", "600"], workdir / "a.log").pid,
                "gw-b": right.spawn(["sh", "-c", ORPHANING_SLEEP], workdir / "b.log").pid,
                "inner": inner.spawn(["sleep", "600"], workdir / "inner.log").pid}
    # what each host's record held as the last spawn returned, read before anything else writes it
    recorded = {host.host.name: [p["pid"] for p in json.loads(host.run(["cat", host.state.path]).stdout)["processes"]]
                for host in (a, b)}
    # spawn returns once a record is sent; crash only when each host runs what it was sent
    for node, pid in ((left, sleepers["gw-a"]), (right, sleepers["gw-b"]), (inner, sleepers["inner"])):
        while not node.run(["cat", f"/proc/{pid}/cmdline"], check=False).stdout.startswith("sleep"):
            time.sleep(0.1)
    emit("ready", {"run_id": run_id, "sleepers": sleepers, "recorded": recorded, "link": f"vl{run_id}c"})
    os._exit(3)  # as a crash would: no teardown, no goodbye to the hosts


def scenario_shell(inventory: str, workdir: Path) -> None:
    """Commands in a host's long-lived shell, one after another and from several threads at once:
    what each printed, on which stream, and its exit status."""
    from concurrent.futures import ThreadPoolExecutor

    run_id, (a, b) = connect_both(inventory)
    try:
        ran = a.run(["sh", "-c", 'printf "no newline"; printf "to stderr" >&2; exit 3'], check=False)
        seen = {"first": [ran.stdout, ran.stderr, ran.returncode],
                "stdin": a.run(["cat"]).stdout,  # the shell's input is the commands after it, not this one's
                "next": a.run(["echo", "next"]).stdout,
                "given": a.run(["cat"], input="given input").stdout,  # a channel of its own
                "bytes": a.read_file("/proc/self/cmdline").split(b"\0")[0].decode()}
        with ThreadPoolExecutor(4) as pool:  # one in the shell, the others in channels of their own
            seen["threads"] = list(pool.map(lambda n: a.run(["sh", "-c", f"sleep 0.5; echo {n}"]).stdout, range(4)))
        emit("done", seen)
    finally:
        for host in (a, b):
            host.close()


def scenario_idle(inventory: str, workdir: Path) -> None:
    """idle_checks.observe on host a, through the node contract over SSH."""
    from idle_checks import observe
    from vpnlab.hosts.node import RemoteNode

    run_id, (a, b) = connect_both(inventory)
    try:
        emit("done", observe(RemoteNode("left", a), workdir))
    finally:
        for host in (a, b):
            host.close()


def host_is_clean(host) -> bool:
    """No process but sshd, no record, namespace, link, address or qdisc of a run left on the host,
    its sysctls as they were."""
    qdiscs = sh("ip", "netns", "exec", host.namespace, "tc", "qdisc", "show", "dev", "eth0").stdout
    links = [line.split(": ")[1] for line in host.links().splitlines()]
    return (host.processes() == {} and host.listdir("/run/vpnlab") == [] and host.listdir("/run/netns") == []
            and not [name for name in links if name.startswith("vl")] and host.addresses() == [f"{host.address}/24"]
            and "tbf" not in qdiscs and host.sysctl("net.ipv4.ip_forward") == "0")


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.05)
    return predicate()


if __name__ == "__main__":
    scenario, inventory_path, work = sys.argv[1:4]
    {"live": scenario_live, "crash": scenario_crash, "shell": scenario_shell,
     "idle": scenario_idle}[scenario](inventory_path, Path(work))
