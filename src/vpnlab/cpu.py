"""CPU cost of a tunnel during one measurement window.

- The VPN daemons' own CPU time, per side of the tunnel: from each tunnel end's cgroup where the
  kernel offers CPU accounting (placement.py: cgroup v2 in microseconds, else v1 cpuacct in
  nanoseconds), which counts every thread and child of the daemons, also those that exit during
  the window, and nothing else. Otherwise, and always as a cross-check stored beside it, clock ticks
  (1/CLK_TCK s) of every process in the tunnel ends' namespaces except the traffic tools (iperf3,
  ping), summed over threads and reaped children (ocserv forks a worker per session), from
  /proc/<pid>/stat. The sample's raw output 'cpu' says which method gave the figures.
- The kernel's share, from /proc/stat: system, irq and softirq time on all CPUs.
  Kernel data planes (kernel WireGuard, ESP, PPP) and the TUN path of userspace
  ones do their work there; all traffic on the machine is the test's own.
- CPU-seconds per gigabyte carried, and whether something was saturated, in which case
  throughput is a bound set by this CPU and the sample is flagged with what bounded it: the
  whole machine, one core (often its softirq: the usual case is one core at 100% while the
  machine looks half idle), or one thread of a VPN daemon (a userspace data plane is one thread).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .backend import EMULATED
from .judging import DISTURBED
from .metrics import declare
from .testbed import netns

TICK = os.sysconf("SC_CLK_TCK")
SATURATED_PCT = 90.0  # machine-wide busy share above which throughput is CPU-bound

_ALL = "tcp, udp, ping, transfer"
METRICS = (
    declare("cpu_vpn_client_pct", "%", "CPU of the VPN daemons (all their threads and children) at the client-side "
            "tunnel end during the measurement, % of one core; absent without a VPN", False, level="cpu",
            producers=_ALL),
    declare("cpu_vpn_gateway_pct", "%", "the same at the gateway-side tunnel end, % of one core", False, level="cpu",
            producers=_ALL),
    declare("cpu_kernel_pct", "%", "kernel time (system, irq, softirq) on all CPUs, % of one core: where kernel "
            "WireGuard, ESP and PPP, and the TUN path of userspace VPNs, do their work", False, level="cpu",
            producers=_ALL),
    declare("cpu_busy_pct", "%", "the machine's busy share, % of all cores; above 90% the sample is flagged",
            False, level="cpu", producers=_ALL),
    declare("cpu_s_per_gb", "s/GB", "daemon plus kernel CPU-seconds per gigabyte carried (on a link with background, its bytes "
            "too)", False, level="cpu",
            positive=True, producers="tcp, udp, transfer"),
    declare("cpu_busiest_core_pct", "%", "busy share of the busiest core; above 90% the sample is flagged with "
            "the core and its softirq share", False, level="cpu", producers=_ALL),
    declare("cpu_busiest_thread_pct", "%", "the busiest thread of the VPN daemons, % of one core; above 90% the "
            "sample is flagged with the daemon and thread", False, level="cpu", producers=_ALL),
)


def _process_ticks(pid: int) -> tuple[str, int] | None:
    """(command name, user + system ticks of the process, its threads and reaped children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return name, utime + stime + cutime + cstime


def _daemon_ticks(namespaces: list[str], traffic: frozenset[str]) -> dict[int, int]:
    ticks = {}
    for ns in namespaces:
        for pid in netns.pids(ns):
            found = _process_ticks(pid)
            if found and found[0] not in traffic:
                ticks[pid] = found[1]
    return ticks


def _thread_ticks(pids) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, tid) -> ("daemon/thread" names, user + system ticks) for every thread of these processes."""
    ticks = {}
    for pid in pids:
        daemon = _process_ticks(pid)
        try:
            tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ticks[(pid, tid)] = (f"{daemon[0] if daemon else '?'}/{name}", int(fields[11]) + int(fields[12]))
    return ticks


def _core_ticks() -> list[tuple[int, int, int]]:
    """Per core: (busy, softirq, total) ticks."""
    cores = []
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        if not (line.startswith("cpu") and line[3].isdigit()):
            break
        fields = [int(v) for v in line.split()[1:]]
        user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        total = sum(fields[:8])
        cores.append((total - idle - iowait, softirq, total))
    return cores


def _machine_ticks() -> tuple[int, int, int]:
    """(kernel, busy, total) ticks over all CPUs."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    kernel = system + irq + softirq
    total = sum(fields[:8])
    return kernel, total - idle - iowait, total


OTHER_LOAD_PCT = 20.0  # % of one core that programs outside the run may take before a sample says so
PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (kernel WireGuard's, ESP's work is the run's)


def _other_ticks(ours: set[int]) -> dict[int, tuple[str, int]]:
    """PID -> (name, ticks) of every user-space process outside the run: not in its namespaces (`ours`),
    not vpnlab itself or a process it started (at any depth: a VM's qemu), not a kernel thread."""
    procs = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                procs[int(entry.name)] = parse_stat(int(entry.name), Path(entry.path, "stat").read_text())
            except OSError:
                continue
    return outside(procs, [os.getpid()], ours)


def parse_stat(pid: int, stat: str) -> tuple[int, str, int, int]:
    """(parent, name, ticks, kernel thread) of a process from its /proc/PID/stat line. The ticks are
    utime + stime and the children's it reaped: a build's compilers come and go inside a window and
    are seen only there. Not init's: it reaps orphans of any age, whose whole lives would count."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[1]), stat[stat.index("(") + 1:stat.rindex(")")],
            sum(int(fields[i]) for i in ((11, 12) if pid == 1 else (11, 12, 13, 14))), int(fields[6]) & PF_KTHREAD)


def outside(procs: dict[int, tuple[int, str, int, int]], roots: list[int], ours: set[int] = frozenset()
            ) -> dict[int, tuple[str, int]]:
    """PID -> (name, ticks) of the processes (parse_stat's, by PID) that are neither in `ours` nor
    below one of `roots` (the run itself), nor kernel threads."""
    parents = {pid: parent for pid, (parent, *_rest) in procs.items()}
    mine = set().union(*(_descendants(root, parents) for root in roots))
    return {pid: (name, ticks) for pid, (_, name, ticks, kthread) in procs.items()
            if pid not in ours and pid not in mine and not kthread}


def _descendants(root: int, parents: dict[int, int]) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def busy_machine_flags(used: dict[str, float], wall: float, where: str = "") -> list[str]:
    """A flag when programs outside the run (name -> CPU seconds) took more than OTHER_LOAD_PCT of a
    core over `wall` seconds, naming the three busiest (and `where`: on which host)."""
    share = 100 * sum(used.values()) / wall if wall > 0 else 0.0
    if share <= OTHER_LOAD_PCT:
        return []
    top = ", ".join(f"{name} {100 * t / wall:.0f}%" for name, t in sorted(used.items(), key=lambda u: -u[1])[:3])
    return [f"{DISTURBED}busy machine: programs outside this run took {share:.0f}% of a core{where} ({top}): their "
            "load is in these CPU and throughput figures"]


def used_since(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]],
               tick: int = TICK) -> dict[str, float]:
    """CPU seconds per program name between two readings (a process that appeared started from zero)."""
    used: dict[str, float] = {}
    for pid, (name, ticks) in after.items():
        if spent := ticks - before.get(pid, (name, 0))[1]:
            used[name] = used.get(name, 0.0) + spent / tick
    return used


class OtherLoad:
    """CPU that programs outside the run took during a measurement (a build, a browser, another
    benchmark): their load is in the machine's figures and the throughput, so the sample says so."""

    def __init__(self, namespaces: list[str]):
        self.namespaces = namespaces
        self._before = _other_ticks(self._ours())

    def _ours(self) -> set[int]:
        return {pid for ns in self.namespaces for pid in netns.pids(ns)}

    def flags(self, wall: float) -> list[str]:
        return busy_machine_flags(used_since(self._before, _other_ticks(self._ours())), wall)


class OtherLoadSeries:
    """The same, sampled over time by the host while a VM guest measures: the guest sees only its own
    processes, so the host judges each of its repetitions by the samples within its span."""

    def __init__(self):
        self._last = _other_ticks(set())
        self.samples: list[tuple[float, dict[str, float]]] = []  # (time, CPU seconds per name since the last)

    def sample(self) -> None:
        now = _other_ticks(set())
        self.samples.append((time.time(), used_since(self._last, now)))
        self._last = now

    def flags(self, start: float, end: float) -> list[str]:
        """For a span of wall-clock time: the samples taken in it (each covers the poll before it)."""
        used: dict[str, float] = {}
        for at, spent in self.samples:
            if start < at <= end:
                for name, seconds in spent.items():
                    used[name] = used.get(name, 0.0) + seconds
        return busy_machine_flags(used, end - start)


@dataclass
class CpuMeter:
    """Start before a measurement, `finish` after it."""

    left: list[str]    # namespaces of the tunnel ends on the client side
    right: list[str]   # ... and on the gateway side
    placement: object = None  # the ends' cgroups (placement.Placement): their figures when it has any
    everywhere: list[str] = None  # every namespace of the run's testbed: what runs elsewhere is other load
    # The programs of the workloads and the WAN capture (catalog.TRAFFIC_TOOLS): not the VPN, though a
    # remote-access transfer's curl or scp (and its ssh) runs in the client-side end's namespace.
    traffic: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # The slow /proc scans first, the machine's counters last: the window starts as the workload does.
        self._others = OtherLoad(self.everywhere or [*self.left, *self.right])
        self.record: dict = self.placement.record() if self.placement else {"method": "ticks"}
        self._left = _daemon_ticks(self.left, self.traffic)
        self._right = _daemon_ticks(self.right, self.traffic)
        self._threads = _thread_ticks([*self._left, *self._right])
        self._threads_at = time.monotonic()  # (reading many threads takes a while under emulation)
        self._groups = self.placement.usage() if self.placement else None
        self._cores = _core_ticks()
        self._machine = _machine_ticks()
        self._start = time.monotonic()

    def finish(self, bytes_carried: float | None) -> tuple[dict[str, float], list[str]]:
        groups = self.placement.usage() if self._groups is not None else None
        wall = time.monotonic() - self._start
        left, right = _daemon_ticks(self.left, self.traffic), _daemon_ticks(self.right, self.traffic)
        machine = _machine_ticks()

        def used(before: dict[int, int], after: dict[int, int]) -> float:
            # A process that appeared during the window started from zero.
            return sum(t - before.get(pid, 0) for pid, t in after.items()) / TICK

        left_s, right_s = used(self._left, left), used(self._right, right)
        self.record |= {"wall_s": wall, "ticks_s": {"client": left_s, "gateway": right_s}}
        if groups is not None:
            left_s, right_s = (groups[side] - self._groups[side] for side in ("client", "gateway"))
            self.record["cgroup_s"] = {"client": left_s, "gateway": right_s}
        kernel_s = (machine[0] - self._machine[0]) / TICK
        busy = machine[1] - self._machine[1]
        total = machine[2] - self._machine[2]
        values = {
            "cpu_kernel_pct": 100 * kernel_s / wall,
            "cpu_busy_pct": 100 * busy / total if total else 0.0,
        }
        if self.left or self.right or groups is not None:  # the baseline has no VPN daemons to account for
            values["cpu_vpn_client_pct"] = 100 * left_s / wall
            values["cpu_vpn_gateway_pct"] = 100 * right_s / wall
        if bytes_carried:
            values["cpu_s_per_gb"] = (left_s + right_s + kernel_s) / (bytes_carried / 1e9)
        flags = self._bottlenecks(values, {*left, *right}) + self._others.flags(wall)
        if values["cpu_busy_pct"] > SATURATED_PCT:
            if EMULATED:
                flags.append(f"cpu saturated in an emulated VM ({values['cpu_busy_pct']:.0f}% of all guest cores): "
                             "throughput is a lower bound set by emulation, not by the VPN")
            else:
                flags.append(f"cpu saturated ({values['cpu_busy_pct']:.0f}% of all cores): throughput is a bound "
                             "set by this machine, not by the VPN alone")
        return values, flags

    def _bottlenecks(self, values: dict[str, float], daemons: set[int]) -> list[str]:
        """The busiest core and daemon thread, into `values`; a flag for each that was saturated."""
        cores = [(b - b0, si - si0, t - t0) for (b, si, t), (b0, si0, t0) in zip(_core_ticks(), self._cores)]
        shares = [(100 * busy / total, 100 * soft / total, n) for n, (busy, soft, total) in enumerate(cores) if total]
        after = _thread_ticks(daemons)  # a thread that appeared during the window started from zero
        span = time.monotonic() - self._threads_at  # its own: over the wall time a thread read up to 7 points
        # above its whole tunnel end
        used = [(100 * (t - self._threads.get(key, (name, 0))[1]) / TICK / span, name)
                for key, (name, t) in after.items()]
        return bottleneck_flags(values, max(shares, default=None), max(used, default=None))


def bottleneck_flags(values: dict[str, float], core: tuple | None, thread: tuple | None) -> list[str]:
    """The busiest core (busy %, softirq %, which) and daemon thread (% of one core, which), into
    `values`; a flag for each that was saturated."""
    flags = []
    if core:
        busy, soft, which = core
        values["cpu_busiest_core_pct"] = busy
        if busy > SATURATED_PCT:
            flags.append(f"core {which} saturated ({busy:.0f}% busy, {soft:.0f}% in softirq): "
                         "throughput is a bound set by that core")
    if thread:
        share, which = thread
        values["cpu_busiest_thread_pct"] = share
        if share > SATURATED_PCT:
            flags.append(f"thread {which} at {share:.0f}% of a core: throughput is a bound set by that "
                         "single-threaded daemon")
    return flags


def cpu_bound(flags: str) -> bool:
    """A repetition's flags (';'-joined) say a core, the machine or a daemon's thread was saturated."""
    return any("saturated" in flag or "single-threaded daemon" in flag for flag in flags.split(";"))
