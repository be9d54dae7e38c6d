"""A node on a real host: the same interface as the namespace testbed's Node.

A role mapped onto a host is a RemoteNode without a namespace: its commands run
in the host's own network namespace, so its `ip` lines pass the management
guard and what they, `tc` and `sysctl` change is recorded on the host first and
undone at teardown. A role that is not mapped is a namespace on its neighbour's
host: a RemoteNode with a namespace, whose commands run under `ip netns exec`
there and whose changes vanish with the namespace.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..core.errors import VpnlabError
from ..testbed.node import inside, proc_state, wait_listening
from .hoststate import guard_ip_line, root_qdisc_device
from .ssh import HostUnreachable, RemoteProcess, SshHost

IP_OPTIONS_WITH_VALUE = {"-f", "-family", "-rc", "-rcvbuf", "-l", "-loops"}


@dataclass
class RemoteNode:
    role: str
    host: SshHost
    namespace: str | None = None  # None: the host's own network namespace
    spawned: list[RemoteProcess] = field(default_factory=list, repr=False)  # running, for the CPU meter
    python = "python3"  # the host's, not the controller's

    @property
    def own_namespace(self) -> bool:
        """Does this node run in the host's own network namespace (the one SSH comes through)?"""
        return self.namespace is None

    def run(self, argv: list, *, check: bool = True, timeout: float | None = 120,
            input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run a command on the host (in this node's namespace) and wait for it."""
        if self.own_namespace and argv and Path(str(argv[0])).name == "ip":
            self._guard_ip_argv([str(a) for a in argv[1:]])
        return self.host.run(argv, namespace=self.namespace, check=check, timeout=timeout,
                             input=input, env=env)

    def _guard_ip_argv(self, words: list[str]) -> None:
        """`ip` run directly in the host's own namespace passes the same guard as node.ip."""
        while words and words[0].startswith("-"):
            option = words.pop(0)
            if option in ("-n", "-netns"):
                return  # it targets another namespace
            if option in ("-b", "-batch", "-force"):
                raise VpnlabError(f"on host {self.host.host.name}, give `ip` batches to node.ip()")
            if option in IP_OPTIONS_WITH_VALUE and words:
                words.pop(0)
        self._record_ip_lines([" ".join(words)])

    def ip(self, *lines: str) -> None:
        """Apply `ip` commands on this node in one batch."""
        if lines:
            if self.own_namespace:
                self._record_ip_lines(lines)
            self._batch("ip", lines)

    def tc(self, *lines: str) -> None:
        """Apply `tc` commands on this node in one batch; a root qdisc set on the host's own
        interfaces is recorded first and deleted at teardown (the kernel default returns)."""
        if lines:
            if self.own_namespace:
                for device in filter(None, map(root_qdisc_device, lines)):
                    self.host.record("qdiscs", device)
            self._batch("tc", lines)

    def _record_ip_lines(self, lines) -> None:
        for line in lines:
            created = guard_ip_line(line, self.host.management)
            if created:
                self.host.record(*created)

    def _batch(self, tool: str, lines) -> None:
        """The lines go as arguments, not input: a command without input runs in the host's shell
        (ssh.py), not a channel of its own."""
        where = ["-n", self.namespace] if self.namespace else []
        self.host.run(["sh", "-c", 'printf "%s\\n" "$@" | ' + shlex.join([tool, *where, "-batch", "-"]), "sh", *lines])

    def sysctl(self, **settings) -> None:
        """Set sysctls (-e: a key this kernel lacks is left alone). In the host's own namespace
        the values before are recorded on the host first and put back at teardown."""
        wanted = {key.replace("/", "."): str(value) for key, value in settings.items()}
        if self.own_namespace:
            if all(self.host.sysctls_set.get(k) == v for k, v in wanted.items()):
                return  # set by an earlier testbed of this run
            shown = self.host.run(["sysctl", "-e", *wanted]).stdout
            before = dict(line.split(" = ", 1) for line in shown.splitlines() if " = " in line)
            self.host.record("sysctls", {k: v for k, v in before.items() if k not in self.host.state.sysctls})
        self.run(["sysctl", "-q", "-e", "-w", *(f"{k}={v}" for k, v in wanted.items())])
        if self.own_namespace:
            self.host.sysctls_set.update(wanted)

    def listening(self, port: int, udp: bool = False) -> bool:
        """Does a TCP socket listen on this port on this node (with `udp`: is a UDP one bound)?"""
        return self.run(["ss", "-Hlnu" if udp else "-Htln", f"sport = :{port}"], check=False).stdout.strip() != ""

    def read_net(self, name: str) -> str:
        """This node's /proc/net/<name>."""
        return self.run(["cat", f"/proc/net/{name}"]).stdout

    def ipv4_address_once_up(self, device: str) -> str | None:
        """The device's IPv4 address on this node once the device is up (None: no address yet,
        down, or no such device)."""
        words = self.run(["ip", "-o", "-4", "addr", "show", "dev", device, "up"], check=False).stdout.split()
        return words[words.index("inet") + 1].split("/")[0] if "inet" in words else None

    def accepts(self, socket_path) -> bool:
        """Does a daemon accept connections on this Unix socket on this node?"""
        check = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"
        return self.run([self.python, "-c", check, str(socket_path)], check=False).returncode == 0

    def process_state(self, pid: int) -> tuple[str, str] | None:
        """Both files read by the shell itself, in one round trip: a look at an idle process is two
        of them, 10 ms apart."""
        read = 'read -r s < "/proc/$1/stat" && read -r c < "/proc/$1/syscall" && printf "%s\\n%s\\n" "$s" "$c"'
        lines = self.host.run(["sh", "-c", read, "sh", str(pid)], check=False).stdout.splitlines()
        return proc_state(*lines) if len(lines) == 2 else None

    def wait_listening(self, port: int, proc: RemoteProcess, log: Path) -> None:
        """Wait until the server `proc` listens on `port`; fail with its log if it dies or never does."""
        wait_listening(self.listening, port, proc, log, f"in {self.role} on host {self.host.host.name}")

    def spawn(self, argv: list, log_path: Path, *, env: dict | None = None, what: str = "",
              stdin: Path | None = None) -> RemoteProcess:
        """Start a long-running process on this node, recorded on the host before it runs.
        Its output streams back into the local `log_path` while it runs."""
        proc = self.host.spawn(argv, log_path, namespace=self.namespace, env=env, what=what, stdin=stdin)
        self.spawned.append(proc)
        return proc

    def stop(self, proc: RemoteProcess, grace: float = 3.0) -> None:
        self.host.stop(proc, grace)
        if proc in self.spawned:
            self.spawned.remove(proc)

    def scratch(self) -> PurePosixPath:
        return PurePosixPath(self.host.secrets_dir)

    def write_file(self, path, content: str | bytes, mode: int = 0o600) -> str:
        path = inside(path, self.scratch())
        data = content.encode() if isinstance(content, str) else content
        self.host.put_files({path: data}, mode, [str(PurePosixPath(path).parent)])
        return path

    def read_file(self, path) -> bytes:
        return self.host.read_file(str(path))

    def remove_tree(self, path) -> None:
        path = inside(path, self.scratch())
        try:
            self.host.run(["rm", "-rf", "--", path])
        except HostUnreachable:
            pass  # the run's folder goes with `close`

    def exists(self, path) -> bool:
        return self.host.run(["test", "-e", str(path)], check=False).returncode == 0

    def record_file(self, path) -> None:
        """A file a program of ours may leave behind (a killed daemon's socket): recorded on the host,
        removed with the testbed."""
        self.host.record("files", str(path))

    def record_dir(self, path) -> None:
        """A folder of ours outside the run's folder there: recorded on the host, removed when the run
        ends (not with the testbed: the next one's files are the same)."""
        self.host.run_dirs.add(str(path))
        self.host.record("dirs", str(path))

    def remove_file(self, path) -> None:
        try:
            self.host.remove_file(str(path))
        except HostUnreachable:
            pass  # it stays recorded there: `close` removes it


def namespace_node(host: SshHost, role: str, name: str) -> RemoteNode:
    """A role that is not mapped to a host: a namespace on its neighbour's host, recorded first."""
    host.add_namespace(name)
    return RemoteNode(role, host, name)
