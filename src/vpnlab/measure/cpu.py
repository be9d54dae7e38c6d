"""CPU cost of a tunnel during one measurement window: one meter (CpuMeter) over the machines its
sources read (Namespaces here, hosts/cpu.py's HostProc on each real host), every /proc read by one
parser (parse_snapshot), whichever machine it came from.

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
from dataclasses import dataclass, field
from pathlib import Path

from ..core.backend import EMULATED
from ..core.flags import Flag, declare as declare_flag
from ..metrics import declare
from ..testbed import netns

TICK = os.sysconf("SC_CLK_TCK")
SATURATED_PCT = 90.0  # machine-wide busy share above which throughput is CPU-bound

_ALL = "tcp, udp, udp_capacity, ping, transfer"
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


@dataclass
class Snapshot:
    """One machine's /proc at one moment, as parse_snapshot reads it from this machine or a host."""

    tick: int                                          # clock ticks per second there
    machine: tuple[int, int, int]                      # (kernel, busy, total) ticks over all CPUs
    cores: list[tuple[int, int, int]]                  # per core: (busy, softirq, total) ticks
    procs: dict[int, tuple[int, str, int, int]]        # every process: parse_stat's
    threads: dict[tuple[int, int], tuple[str, int]]    # (pid, tid) -> (name, ticks) of the daemons' threads
    shell: int = 0                                     # the PID of the shell that read it (a host's)
    at: float = 0.0                                    # time.monotonic() here when it was read
    daemons: dict[int, tuple[str, str]] = field(default_factory=dict)   # pid -> (side, program): the source's
    others: dict[int, tuple[str, int]] = field(default_factory=dict)    # outside the run: the source's


def parse_snapshot(text: str) -> Snapshot:
    """The one reader of /proc, whatever machine it came from: "K <ticks per second>", "S <shell's
    PID>", /proc/stat's cpu lines as they are, "O <a /proc/PID/stat line>" per process and
    "T <PID> <a /proc/PID/task/TID/stat line>" per thread of a daemon."""
    tick, shell, machine, cores, procs, threads = TICK, 0, (0, 0, 0), [], {}, {}
    for line in text.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "K":
            tick = int(rest)
        elif tag == "S":
            shell = int(rest)
        elif tag == "O" and ")" in rest:
            pid = int(rest.split(None, 1)[0])
            procs[pid] = parse_stat(pid, rest)
        elif tag == "T" and ")" in rest:
            pid, stat = rest.split(" ", 1)
            fields = stat.rsplit(")", 1)[1].split()
            threads[(int(pid), int(stat.split(None, 1)[0]))] = (stat[stat.index("(") + 1:stat.rindex(")")],
                                                                 int(fields[11]) + int(fields[12]))
        elif tag.startswith("cpu"):
            fields = ([int(v) for v in rest.split()] + [0] * 8)[:8]
            user, nice, system, idle, iowait, irq, softirq, steal = fields
            if tag == "cpu":
                machine = (system + irq + softirq, sum(fields) - idle - iowait, sum(fields))
            else:
                cores.append((sum(fields) - idle - iowait, softirq, sum(fields)))
    return Snapshot(tick, machine, cores, procs, threads, shell, time.monotonic())


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None  # a process that ended meanwhile


def local_snapshot(daemons=()) -> Snapshot:
    """This machine's /proc, fed to parse_snapshot as a host's is: every process, the threads of
    `daemons`, /proc/stat last (the window opens as the workload starts)."""
    lines = [f"K {TICK}"]
    lines += [f"O {stat.strip()}" for entry in os.scandir("/proc") if entry.name.isdigit()
              if (stat := _read(f"{entry.path}/stat"))]
    for pid in daemons:
        try:
            tids = [t.name for t in os.scandir(f"/proc/{pid}/task")]
        except OSError:
            continue
        lines += [f"T {pid} {stat.strip()}" for tid in tids if (stat := _read(f"/proc/{pid}/task/{tid}/stat"))]
    lines += [line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("cpu")]
    return parse_snapshot("\n".join(lines))


OTHER_LOAD_PCT = 20.0  # % of one core that programs outside the run may take before a sample says so
PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (kernel WireGuard's, ESP's work is the run's)


def parse_stat(pid: int, stat: str) -> tuple[int, str, int, int]:
    """(parent, name, ticks, kernel thread) of a process from its /proc/PID/stat line. The ticks are
    utime + stime and the children's it reaped: a build's compilers come and go inside a window and
    are seen only there, as are a daemon's (ocserv forks a worker per session). Not init's: it reaps
    orphans of any age, whose whole lives would count."""
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


BUSY_MACHINE = declare_flag("busy-machine", "programs outside the run took a share of the CPU during it", disturbed=True)
SHARED_MACHINE = declare_flag("shared-machine", "another vpnlab run measured on this machine at the same time", disturbed=True)
CPU_SATURATED = declare_flag("cpu-saturated", "a core, a daemon's thread or the whole machine was busy all the time: "
                             "the figures are a bound set by it", cpu_bound=True)


def shared_machine_flag(others) -> Flag:
    """The flag of a repetition measured while other vpnlab runs (their ids and PIDs) were going on."""
    return SHARED_MACHINE(f"another vpnlab run shared this machine ({', '.join(sorted(set(others)))}): its load is "
                          "in these CPU and throughput figures")


def busy_machine_flags(used: dict[str, float], wall: float, where: str = "") -> list[Flag]:
    """A flag when programs outside the run (name -> CPU seconds) took more than OTHER_LOAD_PCT of a
    core over `wall` seconds, naming the three busiest (and `where`: on which host)."""
    share = 100 * sum(used.values()) / wall if wall > 0 else 0.0
    if share <= OTHER_LOAD_PCT:
        return []
    top = ", ".join(f"{name} {100 * t / wall:.0f}%" for name, t in sorted(used.items(), key=lambda u: -u[1])[:3])
    return [BUSY_MACHINE(f"programs outside this run took {share:.0f}% of a core{where} ({top}): their "
                         "load is in these CPU and throughput figures")]


def used_since(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]],
               tick: int = TICK) -> dict[str, float]:
    """CPU seconds per program name between two readings (a process that appeared started from zero)."""
    used: dict[str, float] = {}
    for pid, (name, ticks) in after.items():
        if spent := ticks - before.get(pid, (name, 0))[1]:
            used[name] = used.get(name, 0.0) + spent / tick
    return used


def _other_ticks(ours: set[int]) -> dict[int, tuple[str, int]]:
    """Every user-space process here outside the run: not in its namespaces (`ours`), not vpnlab
    itself or a process it started (at any depth: a VM's qemu), not a kernel thread."""
    return outside(local_snapshot().procs, [os.getpid()], ours)


class OtherLoadSeries:
    """CPU that programs outside the run took here, sampled over time while a VM guest measures: the
    guest sees only its own processes, so the host judges each of its repetitions by the samples
    within its span."""

    def __init__(self):
        self._last = _other_ticks(set())
        self.samples: list[tuple[float, dict[str, float]]] = []  # (time, CPU seconds per name since the last)

    def sample(self) -> None:
        now = _other_ticks(set())
        self.samples.append((time.time(), used_since(self._last, now)))
        self._last = now

    def flags(self, start: float, end: float) -> list[Flag]:
        """For a span of wall-clock time: the samples taken in it (each covers the poll before it)."""
        used: dict[str, float] = {}
        for at, spent in self.samples:
            if start < at <= end:
                for name, seconds in spent.items():
                    used[name] = used.get(name, 0.0) + seconds
        return busy_machine_flags(used, end - start)


@dataclass
class Namespaces:
    """The meter's source on this machine: the tunnel ends are namespaces here, their daemons every
    process in them but the traffic tools; what runs outside `everywhere` (every namespace of the
    run's testbed) and outside vpnlab's own process tree is other load."""

    left: list[str]    # namespaces of the tunnel ends on the client side
    right: list[str]   # ... and on the gateway side
    everywhere: list[str] | None = None
    # The programs of the workloads and the WAN capture (catalog.TRAFFIC_TOOLS): not the VPN, though a
    # remote-access transfer's curl or scp (and its ssh) runs in the client-side end's namespace.
    traffic: frozenset[str] = frozenset()

    host = ""  # this machine
    record = {"method": "ticks"}

    @property
    def has_ends(self) -> bool:
        return bool(self.left or self.right)

    def read(self) -> Snapshot:
        sides = {"client": self.left, "gateway": self.right}
        found = {pid: side for side, names in sides.items() for ns in names for pid in netns.pids(ns)}
        snapshot = local_snapshot(found)
        snapshot.daemons = {pid: (side, snapshot.procs[pid][1]) for pid, side in found.items()
                            if pid in snapshot.procs and snapshot.procs[pid][1] not in self.traffic}
        snapshot.threads = {key: t for key, t in snapshot.threads.items() if key[0] in snapshot.daemons}
        ours = {pid for ns in self.everywhere or [*self.left, *self.right] for pid in netns.pids(ns)}
        snapshot.others = outside(snapshot.procs, [os.getpid()], ours)
        return snapshot


class CpuMeter:
    """Start before a measurement, `finish` after it: the one meter, over the machines its sources
    read (Namespaces here; hosts/cpu.py's HostProc per real host), each parsed by parse_snapshot.
    `placement`: the tunnel ends' cgroups here (placement.Placement), whose figures win where it has any."""

    def __init__(self, sources: list, placement=None) -> None:
        self.sources = sources
        self.placement = placement
        self.record: dict = placement.record() if placement else dict(sources[0].record)
        self._groups = placement.usage() if placement else None
        self._before = [source.read() for source in sources]
        self._start = time.monotonic()

    @classmethod
    def here(cls, left: list[str], right: list[str], placement=None, everywhere: list[str] | None = None,
             traffic: frozenset[str] = frozenset()) -> "CpuMeter":
        """A meter of tunnel ends that are namespaces on this machine."""
        return cls([Namespaces(left, right, everywhere, traffic)], placement)

    def finish(self, bytes_carried: float | None) -> tuple[dict[str, float], list[Flag]]:
        groups = self.placement.usage() if self._groups is not None else None
        wall = time.monotonic() - self._start
        window = _Window()
        for source, before in zip(self.sources, self._before):
            window.add(source, before, source.read(), wall)
        used, kernel_s, busiest = window.used, window.kernel_s, window.busiest
        self.record |= {"wall_s": wall, "ticks_s": dict(used)}
        if len(self.sources) > 1 or self.sources[0].host:
            self.record["hosts"] = [source.host for source in self.sources]
        if groups is not None:
            used = {side: groups[side] - self._groups[side] for side in ("client", "gateway")}
            self.record["cgroup_s"] = dict(used)
        values = {"cpu_kernel_pct": 100 * kernel_s / wall, "cpu_busy_pct": busiest[0]}
        if any(source.has_ends for source in self.sources) or groups is not None:  # the baseline has no daemons
            values["cpu_vpn_client_pct"] = 100 * used["client"] / wall
            values["cpu_vpn_gateway_pct"] = 100 * used["gateway"] / wall
        if bytes_carried:
            values["cpu_s_per_gb"] = (used["client"] + used["gateway"] + kernel_s) / (bytes_carried / 1e9)
        flags = window.flags + bottleneck_flags(values, max(window.cores, default=None), max(window.threads, default=None))
        if busiest[0] > SATURATED_PCT:
            flags.append(saturated_flag(*busiest))
        return values, flags


@dataclass
class _Window:
    """What a measurement's window cost, summed over the meter's machines."""

    used: dict[str, float] = field(default_factory=lambda: {"client": 0.0, "gateway": 0.0})  # daemons' s
    kernel_s: float = 0.0
    busiest: tuple[float, str] = (0.0, "")      # the busiest machine's busy share and its host
    flags: list[Flag] = field(default_factory=list)
    cores: list[tuple] = field(default_factory=list)    # (busy %, softirq %, which)
    threads: list[tuple] = field(default_factory=list)  # (% of one core, which)

    def add(self, source, before: Snapshot, after: Snapshot, wall: float) -> None:
        on, tick = (f" on host {source.host}", f" of host {source.host}") if source.host else ("", ""), after.tick
        for pid, (side, _) in after.daemons.items():  # a process that appeared started from zero
            self.used[side] += (after.procs[pid][2] - before.procs.get(pid, (0, "", 0, 0))[2]) / tick
        self.flags += busy_machine_flags(used_since(before.others, after.others, tick), wall, on[0])
        self.kernel_s += (after.machine[0] - before.machine[0]) / tick
        total = after.machine[2] - before.machine[2]
        self.busiest = max(self.busiest, (100 * (after.machine[1] - before.machine[1]) / total if total else 0.0,
                                          source.host))
        self.cores += [(100 * (b - b0) / (t - t0), 100 * (si - si0) / (t - t0), f"{n}{on[1]}")
                       for n, ((b, si, t), (b0, si0, t0)) in enumerate(zip(after.cores, before.cores)) if t - t0]
        span = after.at - before.at  # its own: reading many threads takes a while under emulation
        self.threads += [(100 * (t - before.threads.get(key, (name, 0))[1]) / tick / span,
                          f"{after.daemons[key[0]][1]}/{name}" + (f" on {source.host}" if source.host else ""))
                         for key, (name, t) in after.threads.items() if key[0] in after.daemons and span > 0]


def saturated_flag(share: float, host: str) -> Flag:
    """The flag of a machine whose cores were all busy (a host's by name, else this one or its VM)."""
    if host:
        return CPU_SATURATED(f"cpu saturated on host {host} ({share:.0f}% of all cores): throughput is a bound set "
                             "by that host, not by the VPN alone")
    if EMULATED:
        return CPU_SATURATED(f"cpu saturated in an emulated VM ({share:.0f}% of all guest cores): throughput is a "
                             "lower bound set by emulation, not by the VPN")
    return CPU_SATURATED(f"cpu saturated ({share:.0f}% of all cores): throughput is a bound set by this machine, "
                         "not by the VPN alone")


def bottleneck_flags(values: dict[str, float], core: tuple | None, thread: tuple | None) -> list[Flag]:
    """The busiest core (busy %, softirq %, which) and daemon thread (% of one core, which), into
    `values`; a flag for each that was saturated."""
    flags = []
    if core:
        busy, soft, which = core
        values["cpu_busiest_core_pct"] = busy
        if busy > SATURATED_PCT:
            flags.append(CPU_SATURATED(f"core {which} saturated ({busy:.0f}% busy, {soft:.0f}% in softirq): "
                                       "throughput is a bound set by that core"))
    if thread:
        share, which = thread
        values["cpu_busiest_thread_pct"] = share
        if share > SATURATED_PCT:
            flags.append(CPU_SATURATED(f"thread {which} at {share:.0f}% of a core: throughput is a bound set by "
                                       "that single-threaded daemon"))
    return flags
