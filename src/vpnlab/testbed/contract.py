"""The contract of a node: what a driver, a workload or the testbed may ask of the place a role runs.

Two implementations keep it: a network namespace on this machine (testbed/node.py Node) and a real
host, or a namespace on one, over SSH (hosts/node.py RemoteNode). Drivers and workloads type their
nodes with this Protocol, so either serves; tests/test_layout.py checks that both classes have every
method here with the same parameters.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath
from typing import Protocol


class Process(Protocol):
    """A program a node started (subprocess.Popen here, hosts/ssh.py RemoteProcess on a host)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Node(Protocol):
    role: str
    namespace: str | None   # its network namespace; None: a host's own (real hosts only)
    python: str             # the Python interpreter there, for helpers run with `python -c`

    # -- programs ------------------------------------------------------------
    def run(self, argv: list, *, check: bool = True, timeout: float | None = 120,
            input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run a command there and wait for it (CommandError when it fails and `check`)."""

    def spawn(self, argv: list, log_path: Path, *, env: dict | None = None, what: str = "",
              stdin: Path | None = None) -> Process:
        """Start a long-running program there, recorded for cleanup; its output goes to `log_path`."""

    def stop(self, proc: Process, grace: float = 3.0) -> None:
        """End a program `spawn` started (SIGTERM, then SIGKILL after `grace` seconds)."""

    def wait_listening(self, port: int, proc: Process, log: Path) -> None:
        """Until the server `proc` listens on `port`; fail with its log if it dies or never does."""

    # -- network configuration -----------------------------------------------
    def ip(self, *lines: str) -> None:
        """Apply `ip` commands there in one batch."""

    def tc(self, *lines: str) -> None:
        """Apply `tc` commands there in one batch."""

    def sysctl(self, **settings) -> None:
        """Set sysctls there."""

    # -- what it shows -------------------------------------------------------
    def listening(self, port: int, udp: bool = False) -> bool:
        """Does a TCP socket listen on this port there (with `udp`: is a UDP one bound)?"""

    def read_net(self, name: str) -> str:
        """Its /proc/net/<name>."""

    def ipv4_address_once_up(self, device: str) -> str | None:
        """The device's IPv4 address once it is up (None: no address yet, down, or no such device)."""

    def accepts(self, socket_path) -> bool:
        """Does a daemon accept connections on this Unix socket there?"""

    def process_state(self, pid: int) -> tuple[str, str] | None:
        """A process's state (R, S, T ...: /proc/<pid>/stat) and what /proc/<pid>/syscall says (the
        number of the system call it is blocked in, or 'running'), read together; None if it has
        ended or the kernel does not say."""

    # -- files -----------------------------------------------------------------
    def exists(self, path) -> bool:
        """Does this path exist there?"""

    def record_file(self, path) -> None:
        """A file a program of ours may leave there (a killed daemon's socket): removed with the run."""

    def remove_file(self, path) -> None:
        """Remove a file there if it exists."""

    def record_dir(self, path) -> None:
        """A folder of ours outside `scratch()` (files too large for tmpfs): removed with the run."""

    def scratch(self) -> PurePosixPath:
        """The run's private folder there (0700; keys, configurations, a daemon's own files), removed
        with the run: where a driver or workload writes what its programs read."""

    def write_file(self, path, content: str | bytes, mode: int = 0o600) -> str:
        """Write a file there, under `scratch()`, with `mode` from its creation (never wider for a
        moment) and its missing folders made 0700; its path there."""

    def read_file(self, path) -> bytes:
        """A file's bytes there (a daemon's own log, a key a program made there)."""

    def remove_tree(self, path) -> None:
        """Remove a folder under `scratch()` and all in it, if it exists."""
