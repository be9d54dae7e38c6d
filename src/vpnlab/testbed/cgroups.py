"""Each tunnel end in a cgroup of its own, for its CPU, and on a core of its own when the machine has
the cores (the seeds' gateways were separate machines; here the tunnel ends share the CPUs).

Accounting, detected, never assumed (`detect`):
  cgroup v2 with the cpu controller  -> each end's cpu.stat usage_usec (microseconds)
  else cgroup v1 with cpuacct        -> each end's cpuacct.usage (nanoseconds)
  else                               -> clock ticks of the ends' processes in /proc (cpu.py), 1/CLK_TCK s
A cgroup counts every thread and child of what is in it, also those that exit during the window,
and only the daemons; the ticks count the processes alive in an end's namespace when they are read.

Each end's cgroup is a child of vpnlab's own cgroup in that hierarchy (nothing above or beside it is
touched), named like the end's namespace (vl<run>-<scenario><role>), recorded in the run's state
before it is made and removed on every way out (Testbed.destroy, RunState.teardown, `vpnlab clean`).
A daemon is in its cgroup from its first instruction: while a tunnel comes up (`starting`),
Node.spawn starts the daemons of an end through a shell that writes its own PID into the cgroup and
execs taskset and `ip netns exec`, which exec the daemon in turn, so the PID stays the daemon's and
its threads and forked children are counted too. The traffic tools that later run in a client-side
end's namespace (remote access) are not in it.

Pinning: with at least one core per tunnel end among the cores vpnlab may use, each end's daemons
get a core of their own by sched_setaffinity (taskset; threads and children inherit it), the ends
taking the last cores in chain order, so that with cores to spare the first (where interrupts and
housekeeping usually run) is left to the rest. No core is reserved for the rest (traffic tools,
vpnlab): that would forbid pinning the one-tunnel case on two cores, the usual small machine and
the case where the two gateways compete most; the rest is not pinned, and the per-core saturation
flag says when an end's core bounded a sample. A cpuset cgroup is not used: in vpnlab's own cgroup it
would need the controller delegated by a cgroup vpnlab did not create, while affinity works alike
on cgroup v1, v2, without cgroups and in a VM guest. Otherwise: "not pinned: N cores for M tunnel ends".
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..core.errors import VpnlabError

# What joins a cgroup before the daemon's first instruction: this shell writes its own PID into
# the cgroup, then execs the rest (taskset, `ip netns exec`, the daemon: the same PID throughout).
JOIN = 'echo $$ > "$1" && shift && exec "$@"'
METHODS = {
    "cgroup2": "cgroup v2 cpu.stat usage_usec of each tunnel end's own cgroup (microseconds)",
    "cgroup1": "cgroup v1 cpuacct.usage of each tunnel end's own cgroup (nanoseconds)",
    "ticks": "clock ticks of the processes in each tunnel end's namespace, from /proc "
             f"({1000 / os.sysconf('SC_CLK_TCK'):g} ms each)",
}
PINNED_HOW = "sched_setaffinity (taskset)"


@dataclass(frozen=True)
class Accounting:
    """How this machine lets vpnlab count a tunnel end's CPU, and where its cgroups go."""

    method: str                  # "cgroup2", "cgroup1" or "ticks"
    parent: Path | None = None   # vpnlab's own cgroup in that hierarchy: the ends' cgroups go inside
    why_not: str = ""            # with "ticks": why no cgroup could be used

    @property
    def text(self) -> str:
        return METHODS[self.method]

    def usage_s(self, group: Path) -> float:
        """CPU-seconds used so far by everything that ever ran in this cgroup."""
        if self.method == "cgroup2":
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            raise VpnlabError(f"{group}/cpu.stat has no usage_usec")
        return int((group / "cpuacct.usage").read_text()) / 1e9


def _unescape(path: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, list[str]]]:
    """(file system type, mount point, root of the mount inside its file system, super options)."""
    found = []
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if sep and len(fields) >= 5 and len(tail) >= 3:
            found.append((tail[0], _unescape(fields[4]), _unescape(fields[3]), tail[2].split(",")))
    return found


def _own(membership: str, want) -> str | None:
    """vpnlab's own cgroup in the hierarchy whose controllers `want` accepts (/proc/self/cgroup)."""
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and want(parts[0], parts[1].split(",") if parts[1] else []):
            return parts[2]
    return None


def _inside(mount_point: str, mount_root: str, own: str | None) -> Path | None:
    """The directory of cgroup `own` under a mount of its hierarchy whose root is `mount_root`,
    if this mount shows it and vpnlab may make cgroups in it."""
    if own is None:
        return None
    root = mount_root.rstrip("/")
    if root and own != root and not own.startswith(root + "/"):
        return None  # the mount shows another part of the hierarchy
    path = Path(mount_point) / own[len(root):].lstrip("/")
    return path if path.is_dir() and os.access(path, os.W_OK) else None


def detect(mountinfo: str | None = None, membership: str | None = None) -> Accounting:
    """The best accounting this machine offers: cgroup v2 if its hierarchy has the cpu controller,
    else cgroup v1's cpuacct, else clock ticks. Reads /proc/self/mountinfo and /proc/self/cgroup
    unless given their text (the tests give fake trees)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if membership is None:
        membership = Path("/proc/self/cgroup").read_text()
    mounts = _mounts(mountinfo)
    problems = []
    for fstype, point, root, _ in mounts:
        if fstype != "cgroup2":
            continue
        try:
            controllers = (Path(point) / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "cpu" not in controllers:
            problems.append(f"cgroup v2 at {point} has no cpu controller")
            continue
        parent = _inside(point, root, _own(membership, lambda hid, names: hid == "0"))
        if parent and (parent / "cgroup.procs").exists():
            return Accounting("cgroup2", parent)
        problems.append(f"vpnlab's own cgroup is not writable under {point}")
    for fstype, point, root, options in mounts:
        if fstype != "cgroup" or "cpuacct" not in options:
            continue
        parent = _inside(point, root, _own(membership, lambda hid, names: "cpuacct" in names))
        if parent and (parent / "cpuacct.usage").exists():
            return Accounting("cgroup1", parent)
        problems.append(f"vpnlab's own cpuacct cgroup is not writable under {point}")
    return Accounting("ticks", why_not="; ".join(problems) or "no cgroup hierarchy with CPU accounting is mounted")


@lru_cache(maxsize=1)
def this_machine() -> Accounting:
    return detect()


def cores() -> list[int]:
    """The cores this process (and so every daemon it starts) may run on."""
    return sorted(os.sched_getaffinity(0))


def assign(ends: int, available: list[int]) -> list[int] | None:
    """A core of its own for each of `ends` tunnel ends, in chain order (the last cores, so a spare
    first core stays with the rest), or None when there are fewer cores than ends."""
    if not ends or len(available) < ends:
        return None
    return available[-ends:]


def assign_sets(ends: int, available: list[int], each: int) -> tuple[list[tuple[int, ...]], bool] | None:
    """`each` cores for each of `ends` tunnel ends (a VPN entry's `cores`): sets of their own from the
    last cores when there are enough, else the same last `each` cores for all (shared: True); None
    when the machine has fewer than `each`."""
    if not ends or len(available) < each:
        return None
    if len(available) >= ends * each:
        chosen = available[-ends * each:]
        return [tuple(chosen[n * each:(n + 1) * each]) for n in range(ends)], False
    return [tuple(available[-each:])] * ends, True


@dataclass
class End:
    """One tunnel end: its node, which side of the tunnel it is on, its cgroup and core."""

    side: str                  # "client" or "gateway": cpu_vpn_client_pct, cpu_vpn_gateway_pct
    node: object               # a testbed Node (its daemons start through Node.spawn)
    group: Path | None = None  # its cgroup (None: ticks)
    core: int | None = None    # its core (None: not pinned)
    cores: tuple[int, ...] = ()  # its cores, when the VPN entry asks for a number of them (`cores`)

    @property
    def cpus(self) -> str:
        """Its cores as taskset takes them ('' unpinned)."""
        return ",".join(map(str, self.cores)) if self.cores else "" if self.core is None else str(self.core)

    def launcher(self) -> list[str]:
        """What Node.spawn puts before `ip netns exec` while this end's daemons start."""
        argv = ["sh", "-c", JOIN, "vpnlab-join", str(self.group / "cgroup.procs")] if self.group else []
        return argv + (["taskset", "-c", self.cpus] if self.cpus else [])


@dataclass
class Placement:
    """The tunnel ends of one testbed, their cgroups and cores; `remove` takes the cgroups away."""

    state: object
    accounting: Accounting
    ends: list[End] = field(default_factory=list)
    cores_available: int = 0
    pin: bool = True   # False: the study turned pinning off (pin_tunnel_ends)
    shared: bool = False  # the ends' `cores` sets are one set: too few cores for a set each

    @classmethod
    def create(cls, state, layout, nodes: list, accounting: Accounting | None = None,
               available: list[int] | None = None, pin: bool = True, per_end: int | None = None) -> "Placement":
        """One cgroup per tunnel end (recorded in the run's state before it is made) and a core
        each when there are enough and `pin` (or `per_end` cores each, a VPN entry's `cores`: assign_sets); a testbed without
        tunnel layers has no ends."""
        accounting = accounting or this_machine()
        available = cores() if available is None else available
        placement = cls(state, accounting, cores_available=len(available), pin=pin)
        indices = sorted({i for pair in layout.tunnels for i in pair})
        left = {a for a, _ in layout.tunnels}
        chosen = assign(len(indices), available) if pin and per_end is None else None
        sets = assign_sets(len(indices), available, per_end) if per_end else None
        if per_end and sets is None and indices:
            raise VpnlabError(f"cores: {per_end} asked for each tunnel end, this machine gives {len(available)}")
        placement.shared = bool(sets and sets[1])
        try:
            for n, index in enumerate(indices):
                node = nodes[index]
                end = End("client" if index in left else "gateway", node, core=chosen[n] if chosen else None,
                          cores=sets[0][n] if sets else ())
                if accounting.parent is not None:
                    end.group = accounting.parent / node.namespace
                    state.add_cgroup(end.group)  # recorded first: a crash right after still gets cleaned
                    try:
                        end.group.mkdir()
                    except FileExistsError:
                        state.forget_cgroup(end.group)  # not made by this run: never touched
                        raise VpnlabError(f"cgroup {end.group} already exists") from None
                placement.ends.append(end)
        except BaseException:
            placement.remove()
            raise
        return placement

    @property
    def pinned(self) -> bool:
        return bool(self.ends) and all(end.cpus for end in self.ends)

    @property
    def text(self) -> str:
        """How the ends were placed, in a sentence: 'not pinned: 2 cores for 4 tunnel ends'."""
        if not self.ends:
            return "no tunnel ends"
        if self.ends[0].cores:
            shared = f" (one set for all: {self.cores_available} cores for {len(self.ends)} ends)" if self.shared else ""
            return "pinned by " + PINNED_HOW + ": " + ", ".join(
                f"{end.node.role} on cores {end.cpus}" for end in self.ends) + shared
        if not self.pin:
            return "not pinned: the study turns pinning off (pin_tunnel_ends: false)"
        if not self.pinned:
            return f"not pinned: {self.cores_available} cores for {len(self.ends)} tunnel ends"
        return "pinned by " + PINNED_HOW + ": " + ", ".join(
            f"{end.node.role} on core {end.core}" for end in self.ends)

    @contextlib.contextmanager
    def starting(self):
        """While a tunnel comes up: every process Node.spawn starts in an end's namespace is that
        end's, in its cgroup and on its core from the first instruction."""
        for end in self.ends:
            end.node.launcher = end.launcher()
        try:
            yield
        finally:
            for end in self.ends:
                end.node.launcher = []

    def usage(self) -> dict[str, float] | None:
        """CPU-seconds so far per side ("client", "gateway"), from the cgroups; None with ticks."""
        if self.accounting.parent is None or not self.ends:
            return None
        sides = {"client": 0.0, "gateway": 0.0}
        for end in self.ends:
            sides[end.side] += self.accounting.usage_s(end.group)
        return sides

    def observed(self) -> dict[str, str]:
        """Per end (its role), the cores its daemons may run on now (/proc/<pid>/status), as the kernel
        says: what the record of the placement is checked against."""
        seen = {}
        for end in self.ends:
            allowed = set()
            for pid in _procs(end.group) if end.group else []:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                allowed |= {m.group(1) for m in re.finditer(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)}
            seen[end.node.role] = ",".join(sorted(allowed)) or "-"
        return seen

    def record(self) -> dict:
        """What a repetition stores about its placement (raw output 'cpu')."""
        return {
            "method": self.accounting.method, "method_text": self.accounting.text,
            "why_not_cgroups": self.accounting.why_not, "pinned": self.pinned, "placement": self.text,
            "cores_available": self.cores_available,
            "ends": [{"side": e.side, "role": e.node.role, "namespace": e.node.namespace,
                      "cgroup": str(e.group) if e.group else None, "core": e.core} for e in self.ends],
            "observed_cores": self.observed(),
        }

    def remove(self) -> None:
        """Take every end's cgroup away (what still runs in one, our daemons' leftovers, is killed)."""
        for end in self.ends:
            if end.group is not None:
                self.state.remove_cgroup(end.group)
                end.group = None


def _procs(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_group(group: Path, wait_s: float = 5.0) -> bool:
    """Remove a cgroup this run made: kill what still runs in it (only processes vpnlab started and
    their children are ever put there), then rmdir it. False if it is still there after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        for pid in _procs(group):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.02)
