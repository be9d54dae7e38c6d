"""A real host driven over one SSH connection, recording on the host what it creates.

asyncssh is async and the node interface is not, so every host shares one event
loop running in a background thread, and each call here waits for its coroutine.
One connection per host carries every command. A command runs in the host's
long-lived shell (one channel, opened with the first command), which saves sshd a
session and a login shell per command (an emulated host took 0.28 s a command that
way, 0.11 s in the shell); one given input or read as bytes, or one sent while the
shell is busy with another thread's, gets a channel of its own, as a daemon does.
When the connection is lost, everything on that host fails with HostUnreachable from then
on (it is not silently reopened: what was running there is in an unknown state),
while other hosts carry on; `close` then tears down over a fresh connection.

Host keys are checked as Ansible's ssh would (the policy is read with the inventory):
against the user's known-hosts files and the system's, or not at all when checking is
off. With accept-new, a host that has no key in those files is accepted for this run
and nothing is written: a changed key is refused.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import os
import shlex
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import asyncssh

from ..core.errors import CommandError, VpnlabError
from .hoststate import PROCSTAT, REMOTE_ROOT, RESOURCES, SHELL_FUNCTIONS, HostState, ManagementPath
from .inventory import Host, HostKeyPolicy

CONNECT_TIMEOUT = 15
TIMEOUT_MARGIN = 15  # the remote `timeout` ends a command; this catches a host that stopped answering
SAVE_TIMEOUT_S = 60  # writing the record: a tmpfs file, but the host may be busy or emulated
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"  # OpenSSH reads it besides the user's files

# Run first on every connection: the sshd process serving it (the first sshd ancestor), whose
# life is the connection's, so `clean` can tell a crashed controller's run from a live one.
SESSION_PROBE = r"""
p=$$; while [ "$p" -gt 1 ]; do case $(cat /proc/$p/comm) in sshd|sshd-session) break;; esac
  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2); done
echo "$p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)"
set -- $SSH_CONNECTION; echo "$1 $3"; ip -o route get "$1" | sed -n 's/.* dev \([^ ]*\).*/\1/p'
"""

# The record (its JSON, then its path), written through a file of the writer's own, renamed.
SAVE = 'u=$(umask); umask 077 && printf "%s" "$1" > "$2.$$" && mv "$2.$$" "$2" && umask "$u"'
SAVED = "vpnlab: record saved"  # what a spawn wrapper prints once the record with its process is on the host

# A spawned command (its record's path first) prints its PID, start time, session and the session
# leader's start time (read with the shell's own `read`: SHELL_FUNCTIONS says why), then waits for the
# record with them in it, one line, writes it, says so (SAVED) and only then runs the program: the
# record is on the host before the program runs, in the round trip that starts it. Anything but a
# record (the connection closed) and it never runs.
SPAWN_WRAPPER = (PROCSTAT + '; f() { s=; b=; procstat "$1"; [ -n "$r" ] || return 0; '
                 'set -- ${r##*") "}; s=$4; b=${20}; }; '
                 'f $$; me=$b; f "$s"; echo "$$ $me $s ${b:-0}"; '
                 'r=$1; shift; IFS= read -r j; case $j in "{"*"}") ;; *) exit 125;; esac; '
                 'set -- "$j" "$r" "$@"; ' + SAVE + f' || exit 125; echo "{SAVED}"; shift 2; exec "$@"')


class HostUnreachable(VpnlabError):
    """The SSH connection to a host could not be made or was lost."""


class HostKeyUntrusted(HostUnreachable):
    """The host's key is not one the known-hosts files vouch for."""


class _EventLoop:
    """One asyncio loop in a daemon thread, shared by all hosts."""

    _instance: "_EventLoop | None" = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="vpnlab-ssh", daemon=True).start()

    @classmethod
    def get(cls) -> "_EventLoop":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro, timeout: float | None = None):
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


class RemoteProcess:
    """A process spawned on a host, shaped like subprocess.Popen for code that polls, waits, stops."""

    def __init__(self, host: "SshHost", record: dict, done: concurrent.futures.Future):
        self.host, self.record = host, record  # the host's record of it: pid, start, what, session
        self.pid, self.start, self.what = record["pid"], record["start"], record["what"]
        self._done = done  # resolves to the exit status once its output is all in the local log

    @property
    def returncode(self) -> int | None:
        return self._done.result() if self._done.done() else None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        try:
            return self._done.result(timeout)
        except concurrent.futures.TimeoutError:
            raise subprocess.TimeoutExpired(f"{self.what} on {self.host.host.name}", timeout) from None


class SshHost:
    """One inventory host over one SSH connection, for one run."""

    def __init__(self, host: Host, run_id: str):
        self.host = host
        self.run_id = run_id
        self.state: HostState | None = None
        self.management: ManagementPath | None = None
        self._loop = _EventLoop.get()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = threading.Lock()  # the record is read-modify-write; runner threads may share a host
        self._shell: asyncssh.SSHClientProcess | None = None  # the long-lived shell commands run in
        self._shell_lock = threading.Lock()  # one command in it at a time; others take a channel each
        self._dirty = False  # the record changed since it was last written on the host
        # One write of the record at a time, each landed before the next is sent: writes reach the host
        # by several ways (its long-lived shell, a channel, a spawn's own), and an older one landing last
        # would leave out what the newer one recorded (a crash then leaks it).
        self._record_lock = threading.Lock()
        self.sysctls_set: dict[str, str] = {}  # in the host's own namespace, by this run (RemoteNode.sysctl)
        self.run_dirs: set[str] = set()  # recorded folders kept to the run's end, not undone with a testbed

    # -- connection ----------------------------------------------------------
    def attach(self) -> "SshHost":
        """Open the connection only: for looking at the host, not for a run."""
        self._shell = None  # a shell of a lost connection is gone with it
        self._conn = self._loop.call(self._open(), CONNECT_TIMEOUT + 5)
        return self

    def connect(self) -> "SshHost":
        """Open the connection and create this run's directory and record on the host."""
        return self.attach().begin()

    def begin(self) -> "SshHost":
        """Over the open connection: create this run's directory and record on the host."""
        try:
            owner, ssh_path, device = (self.script(SESSION_PROBE).stdout.splitlines() + ["", "", ""])[:3]
            pid, start = owner.split()
            controller_ip, host_ip = ssh_path.split()
        except (VpnlabError, ValueError) as exc:
            self.disconnect()
            raise HostUnreachable(f"host {self.host}: not a usable SSH session ({exc})") from exc
        self.management = ManagementPath(controller_ip, host_ip, device)
        self.state = HostState(self.run_id, f"{socket.gethostname()} {os.getpid()}",
                               {"pid": int(pid), "start": int(start)}, time.time())
        self.script(f"umask 077 && mkdir -p {REMOTE_ROOT} && mkdir {self.state.directory} "
                    f"&& mkdir {self.secrets_dir}")
        self._save()
        return self

    async def _open(self) -> asyncssh.SSHClientConnection:
        host = self.host
        trusted, recorded = known_hosts_for(host)
        try:
            return await asyncssh.connect(
                host.address, host.port, username=host.user or (), known_hosts=trusted,
                client_keys=[host.key_file] if host.key_file else (),
                connect_timeout=CONNECT_TIMEOUT, keepalive_interval=10, keepalive_count_max=3)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyUntrusted(untrusted_message(host, recorded)) from exc
        except asyncssh.KeyImportError as exc:  # (a ValueError) the file is not a private key
            raise HostUnreachable(f"host {host}: ansible_ssh_private_key_file {host.key_file}: not a private key "
                                  f"vpnlab can read ({exc})") from exc
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            why = str(exc) or (f"no answer within {CONNECT_TIMEOUT} s" if isinstance(exc, asyncio.TimeoutError)
                               else type(exc).__name__)
            raise HostUnreachable(f"cannot connect to host {host}: {why}") from exc

    @property
    def lost(self) -> bool:
        return self._conn is None or self._conn.is_closed()

    @property
    def secrets_dir(self) -> str:
        return f"{self.state.directory}/secrets"

    def close(self) -> None:
        """Tear down everything recorded on the host (over a fresh connection if the first was
        lost), then disconnect. Raises HostUnreachable, naming what is left, if it cannot."""
        if self.state is None:
            self.disconnect()
            return
        try:
            if self.lost:
                self._reconnect_for_teardown()
            self.script(self.state.teardown_script(), timeout=60)
        except HostUnreachable as exc:
            raise HostUnreachable(f"{exc}\n  run {self.run_id} is left on host {self.host.name}: "
                                  "remove it with `vpnlab hosts clean --inventory FILE`") from exc
        finally:
            self.disconnect()
        self.state = None

    def _reconnect_for_teardown(self) -> None:
        """The record on the host is the truth: a lost connection may have missed its last update."""
        self.attach()
        text = self.script(f"cat {self.state.path}", check=False).stdout
        try:
            self.state = HostState.from_json(text) if text.strip() else self.state
        except (ValueError, TypeError) as exc:
            raise HostUnreachable(f"host {self.host.name}: its record {self.state.path} is unreadable ({exc})") from exc

    def disconnect(self) -> None:
        self._shell = None
        if self._conn is not None:
            self._conn.close()
            self._loop.call(self._conn.wait_closed(), 10)
            self._conn = None

    # -- commands ------------------------------------------------------------
    def command(self, argv: list, *, namespace: str | None = None, env: dict | None = None,
                timeout: float | None = None, become: bool = True) -> list[str]:
        """The argv as the host runs it: in a namespace, with env, under `timeout`, via sudo."""
        argv = [str(a) for a in argv]
        if env:
            argv = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        if namespace:
            argv = ["ip", "netns", "exec", namespace, *argv]
        if timeout is not None:
            argv = ["timeout", "-k", "2", f"{timeout:g}", *argv]
        return ["sudo", "-n", "--", *argv] if become and self.host.become else argv

    def run(self, argv: list, *, namespace: str | None = None, check: bool = True,
            timeout: float | None = 120, input: str | bytes | None = None, env: dict | None = None,
            binary: bool = False) -> subprocess.CompletedProcess:
        """Run a command on the host and wait for it (CommandError on failure or timeout). A change
        to the record is written on the host first."""
        shown = [f"{self.host.name}:", *self.command(argv, namespace=namespace, env=env, timeout=timeout)]
        self._write_record()
        full = self.command(argv, namespace=namespace, env=env, timeout=timeout)
        wait = None if timeout is None else timeout + TIMEOUT_MARGIN
        proc = self._exec(shlex.join(full), input, wait, binary)
        if timeout is not None and proc.returncode == 124:
            raise CommandError(shown, -1, "", f"timed out after {timeout} s")
        if check and proc.returncode != 0:
            raise CommandError(shown, proc.returncode, proc.stdout, proc.stderr)
        return subprocess.CompletedProcess(list(map(str, argv)), proc.returncode, proc.stdout, proc.stderr)

    def script(self, text: str, *, check: bool = True, timeout: float | None = 120,
               input: str | None = None) -> subprocess.CompletedProcess:
        """Run a POSIX sh script on the host (as root)."""
        return self.run(["sh", "-c", text], check=check, timeout=timeout, input=input)

    def _exec(self, command: str, input, wait: float | None, binary: bool) -> subprocess.CompletedProcess:
        if self.lost:
            raise self._unreachable()
        if input is None and not binary and self._shell_lock.acquire(blocking=False):
            try:
                return self._in_shell(command, wait)
            finally:
                self._shell_lock.release()
        try:
            text = {"encoding": "utf-8", "errors": "replace"} if not binary else {"encoding": None}
            result = self._loop.call(self._conn.run(command, input=input, **text), wait)
        except concurrent.futures.TimeoutError:
            raise HostUnreachable(f"host {self.host.name} did not answer within {wait} s: {command}") from None
        except (OSError, asyncssh.Error) as exc:
            raise self._unreachable(exc) from exc
        if result.returncode is None:  # the channel closed without an exit status
            raise self._unreachable()
        return subprocess.CompletedProcess(command, result.returncode, result.stdout, result.stderr)

    def _in_shell(self, command: str, wait: float | None) -> subprocess.CompletedProcess:
        """Run `command` in the host's long-lived shell. A shell that does not answer in time, or
        ends, is dropped, and the host is taken as lost, as when a command's own channel fails."""
        try:
            if self._shell is None:
                self._shell = self._loop.call(self._open_shell(), CONNECT_TIMEOUT)
            return self._loop.call(_ask_shell(self._shell, command), wait)
        except concurrent.futures.TimeoutError:
            self._drop_shell()
            raise HostUnreachable(f"host {self.host.name} did not answer within {wait} s: {command}") from None
        except (OSError, asyncssh.Error, asyncio.IncompleteReadError, ValueError) as exc:
            self._drop_shell()
            raise self._unreachable(exc) from exc

    async def _open_shell(self) -> asyncssh.SSHClientProcess:
        return await self._conn.create_process("sh", encoding="utf-8", errors="replace")

    def _drop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            self._loop.loop.call_soon_threadsafe(shell.close)

    def _unreachable(self, exc: Exception | None = None) -> HostUnreachable:
        why = f" ({exc})" if exc and str(exc) else ""
        return HostUnreachable(f"host {self.host}: the SSH connection was lost{why}; "
                               "its scenarios cannot go on")

    # -- the record ----------------------------------------------------------
    def record(self, kind: str, value) -> None:
        """Write `value` into the host's record under `kind`, before creating it: the next command
        (the one that creates it) writes the record on the host before it runs."""
        with self._lock:
            entries = getattr(self.state, kind)
            if isinstance(entries, dict):
                entries.update(value)
            elif value not in entries:
                entries.append(value)
            self._dirty = True

    def mark(self) -> HostState:
        """A copy of the record as it is now, for `undo` later."""
        with self._lock:
            return HostState.from_json(self.state.to_json())

    def undo(self, mark: HostState) -> None:
        """Remove what was recorded since `mark`, then forget it (HostUnreachable if the host is
        lost: it stays recorded there, and `close` removes it over a fresh connection)."""
        added = self.state.since(mark)
        added.dirs = [path for path in added.dirs if path not in self.run_dirs]
        self.script(added.undo_script(), timeout=60)
        with self._lock:
            for kind in RESOURCES:
                kept = [item for item in getattr(self.state, kind) if item not in getattr(added, kind)]
                setattr(self.state, kind, kept)
            self._dirty = True  # written with the next command: an entry left over meanwhile is harmless

    def forget(self, kind: str, value) -> None:
        with self._lock:
            entries = getattr(self.state, kind)
            if value in entries:
                entries.remove(value)
                self._dirty = True

    def _save(self) -> None:
        """Write the record on the host now."""
        with self._lock:
            self._dirty = True
        self._write_record()

    def _write_record(self) -> None:
        """If the record changed, write it on the host and wait until it is there."""
        with self._record_lock:
            with self._lock:
                record, self._dirty = (self.state.to_json() if self._dirty else None), False
            if record is None:
                return
            try:
                saved = self._exec(shlex.join(self.command(["sh", "-c", SAVE, "sh", record, self.state.path])),
                                   None, SAVE_TIMEOUT_S, False)
            except HostUnreachable:
                self._dirty = True
                raise
            if saved.returncode != 0:
                self._dirty = True
                raise CommandError([f"{self.host.name}:", "write the record", self.state.path], saved.returncode,
                                   saved.stdout, saved.stderr)

    # -- namespaces, files -----------------------------------------------------
    def add_namespace(self, name: str) -> None:
        self.record("namespaces", name)
        self.run(["sh", "-c", 'ip netns add "$1" && ip -n "$1" link set lo up', "sh", name])

    def put_file(self, path: str, content: str | bytes, mode: int = 0o644) -> str:
        """Write a file on the host, recorded first; created with `mode`, never wider."""
        self.record("files", path)
        q = shlex.quote(path)
        self.run(["sh", "-c", f"umask {0o777 & ~mode:03o} && cat > {q} && chmod {mode:o} {q}"],
                 input=content, binary=isinstance(content, bytes))
        return path

    def put_files(self, files: dict[str, bytes], mode: int = 0o600, dirs: list[str] = ()) -> None:
        """Write several files on the host in one round trip (their folders `dirs` made first, 0700),
        each recorded first and created with `mode`, never wider."""
        q = shlex.quote
        for path in files:
            self.record("files", path)
        steps = [f"umask {0o777 & ~mode:03o}"] + ([f"mkdir -p -m 700 -- {' '.join(map(q, dirs))}"] if dirs else [])
        steps += [f"printf %s {base64.b64encode(content).decode()} | base64 -d > {q(path)} && chmod {mode:o} {q(path)}"
                  for path, content in files.items()]
        self.script(" && ".join(steps))

    def read_file(self, path: str) -> bytes:
        return self.run(["cat", "--", path], binary=True).stdout

    def remove_file(self, path: str) -> None:
        self.run(["rm", "-f", "--", path])
        self.forget("files", path)

    # -- processes -----------------------------------------------------------
    def spawn(self, argv: list, log_path: Path, *, namespace: str | None = None, env: dict | None = None,
              what: str = "", stdin: Path | None = None) -> RemoteProcess:
        """Start a long-running process on the host; its output streams into the local `log_path`."""
        if self.lost:
            raise self._unreachable()
        Path(log_path).write_bytes(b"")  # a fresh log: readiness checks read it
        command = shlex.join(self.command(["sh", "-c", SPAWN_WRAPPER, "sh", self.state.path,
                                           *self.command(argv, namespace=namespace, env=env, become=False)]))
        channel, (pid, start, session, session_start) = self._loop.call(self._start(command), CONNECT_TIMEOUT)
        record = {"pid": pid, "start": start, "what": what or str(argv[0]),
                  "session": session, "session_start": session_start}
        feed = Path(stdin).read_bytes() if stdin else b""
        with self._record_lock:
            self.record("processes", record)
            with self._lock:
                line, self._dirty = self.state.to_json(compact=True), False
            if not self._loop.call(self._release(channel, line.encode() + b"\n" + feed), CONNECT_TIMEOUT):
                self._dirty = True  # not written there: it never ran, and the next command writes the record
        done = self._loop.submit(self._copy_output(channel, Path(log_path)))
        return RemoteProcess(self, record, done)

    async def _start(self, command: str):
        try:
            channel = await self._conn.create_process(command, stderr=asyncssh.STDOUT, encoding=None)
            shown = [int(n) for n in (await channel.stdout.readline()).split()]
            if len(shown) != 4:
                raise ValueError(f"the spawn wrapper printed {shown}")
        except (OSError, asyncssh.Error, ValueError) as exc:
            raise self._unreachable(exc) from exc
        return channel, shown

    @staticmethod
    async def _release(channel, feed: bytes) -> bool:
        """Let the program start (the record, then its stdin); whether the wrapper wrote the record."""
        try:
            channel.stdin.write(feed)
            channel.stdin.write_eof()
            await channel.stdin.drain()
            return (await channel.stdout.readline()).rstrip(b"\n") == SAVED.encode()
        except (OSError, asyncssh.Error):
            return False  # the connection is gone: the copy of its output ends at once and says so

    async def _copy_output(self, channel, log_path: Path) -> int:
        """Copy the process's output into the local log until it ends; its exit status."""
        with open(log_path, "ab") as log:
            try:
                while chunk := await channel.stdout.read(65536):
                    log.write(chunk)
                    log.flush()
                await channel.wait_closed()
            except (OSError, asyncssh.Error):
                pass  # the connection is gone: said below
            if channel.returncode is None:
                log.write(f"\nvpnlab: the SSH connection to {self.host.name} was lost\n".encode())
                return 255  # as ssh(1) reports a connection error
        return channel.returncode

    def stop(self, proc: RemoteProcess, grace: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; only if it is still ours; then the same for
        what it left in its session. On a lost host this does nothing: the process stays recorded
        there and `close` removes it."""
        if self.lost:
            return
        try:
            self.script(SHELL_FUNCTIONS + f"stop {proc.pid} {proc.start} {round(grace * 100)} {proc.record['session']} "
                        f"{proc.record['session_start']}", timeout=2 * grace + 10)
        except HostUnreachable:
            return  # lost meanwhile: as above
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self.forget("processes", proc.record)


async def _ask_shell(shell: asyncssh.SSHClientProcess, command: str) -> subprocess.CompletedProcess:
    """The command's output, errors and exit status, each stream ended by a mark no output holds. The
    command reads nothing of the shell's input, which is the commands that follow it."""
    mark = f"vpnlab-{uuid.uuid4().hex}"
    shell.stdin.write(f"{command} </dev/null; printf '\\n{mark} %s\\n' \"$?\"; printf '\\n{mark}\\n' >&2\n")
    out, err = await asyncio.gather(shell.stdout.readuntil(f"\n{mark} "), shell.stderr.readuntil(f"\n{mark}\n"))
    status = int((await shell.stdout.readline()).strip())
    return subprocess.CompletedProcess(command, status, out[:-len(mark) - 2], err[:-len(mark) - 2])


def known_files(policy: HostKeyPolicy) -> list[str]:
    """The known-hosts files OpenSSH would read under this policy that exist."""
    return [f for f in (*policy.known_hosts, GLOBAL_KNOWN_HOSTS) if os.path.isfile(f)]


def known_hosts_for(host: Host):
    """asyncssh's `known_hosts` for this host (None: no check), and whether the files hold a key
    for it (so a refusal is a changed key, not an unknown one)."""
    policy = host.host_keys
    if policy.checking == "no":
        return None, False
    files = known_files(policy)
    try:
        trusted = asyncssh.read_known_hosts(files) if files else asyncssh.import_known_hosts("")
    except (OSError, ValueError) as exc:
        raise HostUnreachable(f"host {host}: cannot read the known-hosts files {', '.join(files)}: {exc}") from exc
    keys, ca_keys, *_ = asyncssh.match_known_hosts(trusted, host.address, "", None if host.port == 22 else host.port)
    recorded = bool(keys or ca_keys)
    if policy.checking == "accept-new" and not recorded:
        return None, False  # accepted for this run only: nothing is written to the files
    return trusted, recorded


def untrusted_message(host: Host, recorded: bool) -> str:
    """What failed, in which files vpnlab looked, and both ways out."""
    policy = host.host_keys
    files = known_files(policy)
    read = ", ".join(files) if files else f"none: {', '.join(policy.known_hosts) or '/dev/null'} (absent)"
    target = policy.known_hosts[0] if policy.known_hosts else os.path.expanduser("~/.ssh/known_hosts")
    entry = host.address if host.port == 22 else f"[{host.address}]:{host.port}"  # as known_hosts names it
    problem = (f"its host key does not match the one recorded for it in the known-hosts files vpnlab read "
               f"({read}): the host was reinstalled, or this is not that host. Check, then replace the "
               f"entry (`ssh-keygen -R '{entry}' -f {target}`) and add the new key:"
               if recorded else
               f"its host key is not in the known-hosts files vpnlab read ({read}), and host-key checking "
               f"is on ({policy.why}). Either add the key after checking its fingerprint against the host's "
               f"own (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` there):")
    return (f"host {host}: {problem}\n  ssh-keyscan -p {host.port} {host.address} >> {target}\n"
            "or turn host-key checking off in the inventory as Ansible itself does: "
            "`ansible_host_key_checking: false`, or `ansible_ssh_common_args: -o StrictHostKeyChecking=no` "
            "(or `-o StrictHostKeyChecking=accept-new` to accept a host's first key but never a changed one)")


def stale_runs(ssh: SshHost) -> tuple[list[HostState], list[str]]:
    """Runs recorded on the host whose controller's connection is gone, and those still live."""
    listing = ssh.script(f"for f in {REMOTE_ROOT}/*/state.json; do [ -f \"$f\" ] && "
                         "{ echo '<<<'; cat \"$f\"; echo; }; done; true").stdout
    states = []
    for text in listing.split("<<<")[1:]:
        try:
            states.append(HostState.from_json(text))
        except (ValueError, TypeError):
            continue  # not a remote run's record (a local run on that host has its own clean)
    checks = "".join(f"alive {s.owner['pid']} {s.owner['start']} && echo {s.run_id}\n" for s in states)
    live = set(ssh.script(SHELL_FUNCTIONS + checks + "true").stdout.split())
    return [s for s in states if s.run_id not in live], sorted(live)


def clean_host(host: Host) -> list[str]:
    """Remove what crashed runs left on a host; one line per run removed or kept."""
    ssh = SshHost(host, run_id="").attach()
    try:
        stale, live = stale_runs(ssh)
        lines = []
        for state in stale:
            ssh.script(state.teardown_script(), timeout=60)
            lines.append(f"{host.name}: removed run {state.run_id} of {state.controller}: "
                         f"{len(state.namespaces)} namespaces, {len(state.processes)} processes, "
                         f"{len(state.files) + len(state.dirs)} files, "
                         f"{len(state.links) + len(state.addresses) + len(state.routes)} links/addresses/routes")
        lines += [f"{host.name}: run {run_id} is still connected; left alone" for run_id in live]
        return lines
    finally:
        ssh.disconnect()

