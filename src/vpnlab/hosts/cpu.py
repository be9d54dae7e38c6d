"""CPU on real hosts during one measurement window, read over each host's SSH connection from its
own /proc: the same metrics as cpu.py's CpuMeter gives for this machine.

- The VPN daemons: the processes vpnlab started at each tunnel end (RemoteNode.spawned; the
  traffic tools aside), their threads and reaped children, in clock ticks of that host.
- The kernel's share: system, irq and softirq time of both hosts together, % of one core.
- Busy share, busiest core: of the busier host, and a flag naming the host when one saturated.
"""

from __future__ import annotations

import time

from ..catalog import TRAFFIC_TOOLS
from ..cpu import SATURATED_PCT, bottleneck_flags, busy_machine_flags, outside, parse_stat, used_since

# Clock ticks per second, /proc/stat's machine and core lines, "S" and this shell's PID, every
# process's stat line after "O ", then for each PID given, per thread: "T pid tid utime stime comm".
SNAPSHOT = r"""
getconf CLK_TCK; grep '^cpu' /proc/stat; echo "S $$"
cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^/O /'
for p in "$@"; do
  for t in /proc/$p/task/*; do
    s=$(sed 's/.*) //' "$t/stat" 2>/dev/null) || continue
    set -- $s; echo "T $p ${t##*/} ${12} ${13} $(cat "$t/comm" 2>/dev/null)"
  done
done
true
"""


def _snapshot(ssh, pids: list[int]) -> dict:
    lines = ssh.run(["sh", "-c", SNAPSHOT, "sh", *map(str, pids)], timeout=30).stdout.splitlines()
    tick, out = int(lines[0]), {"machine": None, "cores": [], "threads": {}, "procs": {}}
    for line in lines[1:]:
        words = line.split()
        if words[0] == "O" and ")" in line:
            pid = int(words[1])
            out["procs"][pid] = parse_stat(pid, line[2:])
        elif words[0] == "S":
            out["shell"] = int(words[1])
        elif words[0] == "cpu":
            fields = [int(v) for v in words[1:]] + [0] * 8
            user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
            out["machine"] = (system + irq + softirq, sum(fields[:8]) - idle - iowait, sum(fields[:8]))
        elif words[0].startswith("cpu"):
            fields = [int(v) for v in words[1:]] + [0] * 8
            out["cores"].append((sum(fields[:8]) - fields[3] - fields[4], fields[6], sum(fields[:8])))
        elif words[0] == "T":
            out["threads"][(int(words[1]), int(words[2]))] = (" ".join(words[5:]), int(words[3]) + int(words[4]))
    out["daemons"] = {pid: out["procs"][pid][2] for pid in pids if pid in out["procs"]}  # with reaped children's
    return out | {"tick": tick}


def _others(snapshot: dict, spawned: list[int]) -> dict[int, tuple[str, int]]:
    """The host's processes outside the run: not below the SSH session that took the snapshot (the
    first sshd above its shell: every command vpnlab runs there), nor below a process vpnlab started
    (a daemon that left its shell)."""
    procs, session = snapshot["procs"], snapshot["shell"]
    while session in procs and not procs[session][1].startswith("sshd") and procs[session][0] > 1:
        session = procs[session][0]
    return outside(procs, [session, *spawned])


class RemoteCpuMeter:
    """Start before a measurement, `finish` after it (as cpu.CpuMeter)."""

    def __init__(self, left: list, right: list, pair, nodes: list) -> None:
        self.pair = pair
        self.sides = {"client": left, "gateway": right}
        self.record: dict = {"method": "clock ticks from each host's /proc, over its SSH connection"}
        self._pids = {id(site.ssh): self._daemons(site.ssh) for site in pair.sites}
        # every process the run started on a host, wherever it now hangs in the process tree: not other load
        self._spawned = {id(site.ssh): [proc.pid for node in nodes if node.host is site.ssh for proc in node.spawned]
                         for site in pair.sites}
        self._start = time.monotonic()
        self._before = self._read()

    def _daemons(self, ssh) -> dict[int, tuple[str, str]]:
        """PID -> (side, program) of the VPN daemons vpnlab started on this host."""
        return {proc.pid: (side, proc.what) for side, nodes in self.sides.items() for node in nodes
                if node.host is ssh for proc in node.spawned if proc.what not in TRAFFIC_TOOLS}

    def _read(self) -> dict:
        return {id(site.ssh): _snapshot(site.ssh, list(self._pids[id(site.ssh)])) for site in self.pair.sites}

    def finish(self, bytes_carried: float | None) -> tuple[dict[str, float], list[str]]:
        after, wall = self._read(), time.monotonic() - self._start
        used = {"client": 0.0, "gateway": 0.0}
        kernel_s, busiest, flags, cores, threads = 0.0, (0.0, ""), [], [], []
        for site in self.pair.sites:
            key = id(site.ssh)
            a, b, tick = after[key], self._before[key], after[key]["tick"]
            for pid, (side, _) in self._pids[key].items():
                if pid in a["daemons"]:
                    used[side] += (a["daemons"][pid] - b["daemons"].get(pid, 0)) / tick
            others = used_since(_others(b, self._spawned[key]), _others(a, self._spawned[key]), tick)
            flags += busy_machine_flags(others, wall, f" on host {site.name}")
            kernel_s += (a["machine"][0] - b["machine"][0]) / tick
            total = a["machine"][2] - b["machine"][2]
            share = 100 * (a["machine"][1] - b["machine"][1]) / total if total else 0.0
            busiest = max(busiest, (share, site.name))
            for n, (now, then) in enumerate(zip(a["cores"], b["cores"])):
                if now[2] - then[2]:
                    cores.append((100 * (now[0] - then[0]) / (now[2] - then[2]),
                                  100 * (now[1] - then[1]) / (now[2] - then[2]), f"{n} of host {site.name}"))
            for tid, (name, ticks) in a["threads"].items():
                program = self._pids[key][tid[0]][1]
                threads.append((100 * (ticks - b["threads"].get(tid, (name, 0))[1]) / tick / wall,
                                f"{program}/{name} on {site.name}"))
        values = {"cpu_kernel_pct": 100 * kernel_s / wall, "cpu_busy_pct": busiest[0]}
        if any(self.sides.values()):
            values["cpu_vpn_client_pct"] = 100 * used["client"] / wall
            values["cpu_vpn_gateway_pct"] = 100 * used["gateway"] / wall
        if bytes_carried:
            values["cpu_s_per_gb"] = (used["client"] + used["gateway"] + kernel_s) / (bytes_carried / 1e9)
        if busiest[0] > SATURATED_PCT:
            flags.append(f"cpu saturated on host {busiest[1]} ({busiest[0]:.0f}% of all cores): throughput is a "
                         "bound set by that host, not by the VPN alone")
        flags += bottleneck_flags(values, max(cores, default=None), max(threads, default=None))
        self.record |= {"wall_s": wall, "ticks_s": used, "hosts": [site.name for site in self.pair.sites]}
        return values, flags
