"""A node is a network namespace that executes commands (Mininet's "Nodes execute commands")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..core.backend import SLOWDOWN
from ..core.errors import CommandError, VpnlabError
from ..core import sessions
from ..core.signals import held
from . import netns
from .state import RunState

LISTEN_TIMEOUT_S = 10  # for a server to open its port (times SLOWDOWN: a Python server takes seconds under TCG)


def proc_state(stat: str, syscall: str) -> tuple[str, str] | None:
    """A process's state letter and the first word of its /proc/<pid>/syscall, from those two files'
    text; None if either is empty (the kernel does not say)."""
    state, call = stat.rsplit(")", 1)[-1].split()[:1], syscall.split()[:1]
    return (state[0], call[0]) if state and call else None


def wait_listening(listening, port: int, proc, log: Path, where: str) -> None:
    """Poll `listening(port)` until true; fail, with the server's log, once `proc` has exited or the
    time is up, saying which."""
    timeout = LISTEN_TIMEOUT_S * SLOWDOWN
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if listening(port):
            return
        if time.monotonic() > deadline:
            why = f"was not listening on port {port} after {timeout} s"
            break
        time.sleep(0.05)
    else:
        why = f"exited with code {proc.returncode} before listening on port {port}"
    raise VpnlabError(f"{log.stem} {where} {why}: {log.read_text(errors='replace')[-500:].strip()}")


@dataclass
class Node:
    role: str
    namespace: str
    state: RunState
    # Set while a tunnel end's daemons start (placement.Placement.starting): what `spawn` puts before
    # `ip netns exec` so that they are in the end's cgroup and on its core from the first instruction.
    launcher: list[str] = field(default_factory=list, repr=False)

    def _wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *map(str, argv)]

    def run(
        self,
        argv: list,
        *,
        check: bool = True,
        timeout: float | None = 120,
        input: str | None = None,
        env: dict | None = None,
    ) -> subprocess.CompletedProcess:
        """Run a command in this namespace and wait for it."""
        full = self._wrap(argv)
        try:
            proc = subprocess.run(
                full,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=input,
                env={**os.environ, **env} if env else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(full, -1, "", f"timed out after {timeout} s") from exc
        if check and proc.returncode != 0:
            raise CommandError(full, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def ip(self, *lines: str) -> None:
        """Apply `ip` commands in this namespace in one batch."""
        self._batch("ip", lines)

    def tc(self, *lines: str) -> None:
        """Apply `tc` commands in this namespace in one batch."""
        self._batch("tc", lines)

    def _batch(self, tool: str, lines) -> None:
        if not lines:
            return
        argv = [tool, "-n", self.namespace, "-batch", "-"]
        script = "\n".join(lines) + "\n"
        proc = subprocess.run(argv, input=script, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CommandError([*argv, "<<", script.strip()], proc.returncode, "", proc.stderr)

    def listening(self, port: int, udp: bool = False) -> bool:
        """Does a TCP socket listen on this port in this namespace (with `udp`: is a UDP one bound)?"""
        return netns.listening(self.namespace, port, udp)

    def read_net(self, name: str) -> str:
        """This namespace's /proc/net/<name>."""
        return netns.read_net(self.namespace, name)

    def ipv4_address_once_up(self, device: str) -> str | None:
        """The device's IPv4 address here once the device is up (None: no address yet, down, or no
        such device)."""
        return netns.ipv4_address_once_up(self.namespace, device)

    def accepts(self, socket_path) -> bool:
        """Does a daemon of ours accept connections on this Unix socket?"""
        return netns.accepts(socket_path)

    def process_state(self, pid: int) -> tuple[str, str] | None:
        try:
            stat, syscall = (Path(f"/proc/{pid}/{name}").read_text() for name in ("stat", "syscall"))
        except OSError:
            return None
        return proc_state(stat, syscall)

    def wait_listening(self, port: int, proc: subprocess.Popen, log: Path) -> None:
        """Wait until the server `proc` listens on `port`; fail with its log if it dies or never does."""
        wait_listening(self.listening, port, proc, log, f"in {self.role}")

    def sysctl(self, **settings) -> None:
        netns.sysctl(self.namespace, settings)

    def spawn(self, argv: list, log_path: Path, *, env: dict | None = None, what: str = "",
              stdin: Path | None = None) -> subprocess.Popen:
        """Start a long-running process in this namespace, recorded for cleanup.

        `ip netns exec` execs the command, so the PID is the daemon's own (as does the launcher
        of a tunnel end's daemon: a shell that joins the end's cgroup, then taskset).
        """
        log = open(log_path, "wb")  # a fresh log: readiness checks read it
        source = open(stdin, "rb") if stdin else subprocess.DEVNULL
        try:
            with held():  # started, then recorded: a signal between the two would leave it unseen
                proc = sessions.start([*self.launcher, *self._wrap(argv)], stdout=log, stderr=subprocess.STDOUT,
                                      stdin=source, env={**os.environ, **env} if env else None)
                self.state.add_process(proc.pid, what or str(argv[0]))
        finally:
            log.close()
            if stdin:
                source.close()
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = 3.0) -> None:
        self.state.stop_process(proc.pid, grace)
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass

    # -- files: a namespace shares this machine's (a real host's node, hosts/node.py, writes them there)
    python = sys.executable

    def exists(self, path) -> bool:
        return Path(path).exists()

    def record_file(self, path) -> None:
        """A file a program of ours may leave behind (a killed daemon's socket): removed with the run."""
        self.state.add_file(path)

    def remove_file(self, path) -> None:
        Path(path).unlink(missing_ok=True)

    def record_dir(self, path) -> None:
        if str(path) not in self.state.dirs:
            self.state.add_dir(path)

    def scratch(self) -> PurePosixPath:
        return PurePosixPath(self.state.secrets_dir)

    def write_file(self, path, content: str | bytes, mode: int = 0o600) -> str:
        path = Path(self._inside_scratch(path))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, mode)  # an existing file keeps its mode through O_CREAT
            out.write(content.encode() if isinstance(content, str) else content)
        return str(path)

    def read_file(self, path) -> bytes:
        return Path(path).read_bytes()

    def remove_tree(self, path) -> None:
        shutil.rmtree(self._inside_scratch(path), ignore_errors=True)

    def _inside_scratch(self, path) -> str:
        return inside(path, self.scratch())


def inside(path, folder: PurePosixPath) -> str:
    """`path` as a string, once it is known to lie under `folder` (what a node writes or removes)."""
    if not PurePosixPath(path).is_relative_to(folder) or ".." in PurePosixPath(path).parts:
        raise VpnlabError(f"{path}: not under the run's folder {folder}")
    return str(path)


# Runs a program in a mount namespace of its own, whose mounts nobody else sees (propagation
# private): `ip netns exec` gives one too, but a node in a host's own network namespace has none.
PRIVATE_MOUNTS = ["unshare", "--mount", "--propagation=private"]


def private_run(argv: list, keep, make: tuple[str, ...] = ()) -> list:
    """Wrap a daemon so it gets an empty private /run (where it writes a fixed pid file), with
    `keep` (under /run: a folder on the daemon's node) still visible and the directories `make`
    created in it, all in a mount namespace of its own (PRIVATE_MOUNTS): none of it is seen outside."""
    script = ('exec 3<"$1"; shift; mount -t tmpfs vpnlab-run /run && mkdir -p "$KEEP" $MAKE '
              '&& mount --no-canonicalize --bind /proc/self/fd/3 "$KEEP" && exec 3<&- && exec "$@"')
    return [*PRIVATE_MOUNTS, "env", f"KEEP={keep}", f"MAKE={' '.join(make)}", "sh", "-c", script, "sh", str(keep),
            *map(str, argv)]
