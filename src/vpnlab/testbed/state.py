"""What a run owns on this machine, written down before it is created.

Every namespace, process, cgroup and file a run makes is recorded in
/run/vpnlab/<run-id>/state.json *before* it exists, so that whatever kills the
run (an exception, Ctrl-C, SIGTERM, SIGKILL, a power cut of the tool alone),
the run itself or the next one can remove exactly that and nothing else.
/run is a tmpfs: after a reboot both the record and the namespaces are gone.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cgroups import remove_group
from . import netns

STATE_ROOT = Path(os.environ.get("VPNLAB_STATE_DIR", "/run/vpnlab"))
NAMESPACE_PREFIX = "vl"  # namespaces are named vl<run-id>-<role>
KILLED_EXIT_WAIT_S = 10  # how long stop_process waits for a process it killed to be gone


def process_start_time(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (None if gone).

    Paired with the PID it identifies a process uniquely, so cleanup never
    signals an unrelated process that reused a PID.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def _alive(pid: int, start: int | None) -> bool:
    now = process_start_time(pid)
    return now is not None and (start is None or now == start)


@dataclass
class RunState:
    """The record of one run's resources, kept on disk as JSON."""

    run_id: str
    directory: Path
    owner_pid: int
    owner_start: int | None
    namespaces: list[str] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)  # each tunnel end's (placement.py)

    @classmethod
    def create(cls) -> "RunState":
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        os.chmod(STATE_ROOT, 0o700)
        while True:
            run_id = secrets.token_hex(3)
            directory = STATE_ROOT / run_id
            try:
                directory.mkdir(mode=0o700)
                break
            except FileExistsError:
                continue
        pid = os.getpid()
        state = cls(run_id, directory, pid, process_start_time(pid))
        state.secrets_dir.mkdir(mode=0o700)
        state.save()
        return state

    @classmethod
    def load(cls, directory: Path) -> "RunState":
        data = json.loads((directory / "state.json").read_text())
        return cls(
            run_id=data["run_id"],
            directory=directory,
            owner_pid=data["owner_pid"],
            owner_start=data.get("owner_start"),
            namespaces=data.get("namespaces", []),
            processes=data.get("processes", []),
            files=data.get("files", []),
            dirs=data.get("dirs", []),
            cgroups=data.get("cgroups", []),
        )

    @property
    def secrets_dir(self) -> Path:
        """Per-run keys and passwords: 0700 directory on tmpfs, removed at the end."""
        return self.directory / "secrets"

    def namespace_name(self, role: str) -> str:
        return f"{NAMESPACE_PREFIX}{self.run_id}-{role}"

    def save(self) -> None:
        data = {
            "run_id": self.run_id,
            "owner_pid": self.owner_pid,
            "owner_start": self.owner_start,
            "namespaces": self.namespaces,
            "processes": self.processes,
            "files": self.files,
            "dirs": self.dirs,
            "cgroups": self.cgroups,
        }
        tmp = self.directory / "state.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.directory / "state.json")

    # -- recording -------------------------------------------------------
    def add_namespace(self, name: str) -> None:
        self.namespaces.append(name)
        self.save()

    def add_process(self, pid: int, what: str) -> None:
        self.processes.append({"pid": pid, "start": process_start_time(pid), "what": what})
        self.save()

    def add_file(self, path: str | Path) -> None:
        self.files.append(str(path))
        self.save()

    def add_dir(self, path: str | Path) -> None:
        self.dirs.append(str(path))
        self.save()

    def add_cgroup(self, path: str | Path) -> None:
        self.cgroups.append(str(path))
        self.save()

    def forget_cgroup(self, path: str | Path) -> None:
        """Drop a cgroup from the record without touching it (it was not this run's to make)."""
        if str(path) in self.cgroups:
            self.cgroups.remove(str(path))
            self.save()

    def owner_alive(self) -> bool:
        return _alive(self.owner_pid, self.owner_start)

    # -- teardown --------------------------------------------------------
    def stop_process(self, pid: int, grace: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; only if it is still ours."""
        entry = next((p for p in self.processes if p["pid"] == pid), None)
        start = entry["start"] if entry else None
        if _alive(pid, start):
            _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _alive(pid, start):
                _reap(pid)
                time.sleep(0.02)
            if _alive(pid, start):
                _signal(pid, signal.SIGKILL)
                # a killed process ends at once on an idle machine, later on a loaded one: wait for it to be
                # gone rather than return with it still there
                deadline = time.monotonic() + KILLED_EXIT_WAIT_S
                while _alive(pid, start) and time.monotonic() < deadline:
                    _reap(pid)
                    time.sleep(0.01)
        if entry:
            self.processes.remove(entry)
            self.save()

    def remove_namespaces(self, names: list[str]) -> None:
        """Kill what still runs inside these namespaces of ours, then delete them, with one `ip` (each
        process costs a third of a second under emulation, in a VM guest)."""
        names = [name for name in names if name in self.namespaces]
        if not names:
            return
        for name in names:
            for pid in netns.pids(name):
                _signal(pid, signal.SIGKILL)
                _reap(pid)
        # Whatever a namespace's state (an `ip netns add` cut short by a signal may have left only its
        # mount point), delete it: a failure means there was nothing to delete, and -force goes on.
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {name}\n" for name in names),
                       capture_output=True, text=True)
        for name in names:
            self.namespaces.remove(name)
        self.save()

    def remove_cgroup(self, path: str | Path) -> None:
        """Remove a cgroup of this run's (what still runs in it first) and drop it from the record."""
        if str(path) not in self.cgroups:
            return
        if remove_group(Path(path)):
            self.forget_cgroup(path)

    def teardown(self) -> None:
        """Remove everything recorded, in the safe order, then the record itself."""
        for entry in list(self.processes):
            self.stop_process(entry["pid"])
        self.remove_namespaces(list(self.namespaces))
        for path in list(self.cgroups):
            self.remove_cgroup(path)
        for path in self.files:
            Path(path).unlink(missing_ok=True)
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.directory, ignore_errors=True)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect a child's exit status so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _records() -> list[RunState]:
    if not STATE_ROOT.is_dir():
        return []
    found = []
    for directory in sorted(STATE_ROOT.iterdir()):
        if not (directory / "state.json").is_file() or _claimed_by_live_cleaner(directory):
            continue
        try:
            found.append(RunState.load(directory))
        except (OSError, ValueError, KeyError):
            continue
    return found


CLAIM = ".cleaning-"  # a stale record renamed by the vpnlab command that tears it down


def _claimed_by_live_cleaner(directory: Path) -> bool:
    """A record another vpnlab is tearing down is its alone; one whose cleaner died is stale again."""
    _, claim, pid = directory.name.rpartition(CLAIM)
    return bool(claim) and pid.isdigit() and process_start_time(int(pid)) is not None


def stale_runs() -> list[RunState]:
    """Records of runs whose tool process is gone (crashed, killed)."""
    return [state for state in _records() if not state.owner_alive()]


def other_live_runs(run_id: str) -> list[str]:
    """Other vpnlab runs going on on this machine now: they load the same CPUs."""
    return [f"{s.run_id} (pid {s.owner_pid})" for s in _records() if s.run_id != run_id and s.owner_alive()]


PROBE_PREFIX = f"{NAMESPACE_PREFIX}probe"  # capability probes: vlprobe<pid of the vpnlab that probes>


def stale_probes() -> list[str]:
    """Probe namespaces whose vpnlab is gone (killed while it probed the kernel)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.startswith(PROBE_PREFIX)]
    return [n for n in names if n[len(PROBE_PREFIX):].isdigit()
            and process_start_time(int(n[len(PROBE_PREFIX):])) is None]


def clean_stale_runs() -> list[str]:
    """Tear down what crashed runs (and crashed capability probes) left behind; a line per run cleaned."""
    cleaned = []
    for state in stale_runs():
        # Two vpnlab commands may find the same stale run: the one that renames its record first
        # cleans it up, the other leaves it alone.
        claimed = state.directory.with_name(f"{state.run_id}{CLAIM}{os.getpid()}")
        try:
            os.rename(state.directory, claimed)
        except OSError:
            continue
        state.directory = claimed
        cleaned.append(f"run {state.run_id}: {len(state.namespaces)} namespaces, "
                       f"{len(state.processes)} processes, {len(state.cgroups)} cgroups, "
                       f"{len(state.files) + len(state.dirs)} files")
        state.teardown()
    for name in stale_probes():
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        cleaned.append(f"capability probe {name}")
    return cleaned
