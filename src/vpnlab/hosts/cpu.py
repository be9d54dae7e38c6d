"""CPU on real hosts: the source cpu.CpuMeter reads a host through, its own /proc over the host's
SSH connection, parsed by cpu.parse_snapshot as this machine's is.

- The VPN daemons: the processes vpnlab started at each tunnel end (RemoteNode.spawned; the
  traffic tools aside), their threads and reaped children, in clock ticks of that host.
- Other load: every process of the host but the SSH session that reads it (and all below it) and
  what vpnlab started there (a daemon that left its shell), nor kernel threads.
"""

from __future__ import annotations

from ..catalog import TRAFFIC_TOOLS
from ..measure.cpu import Snapshot, outside, parse_snapshot

# parse_snapshot's input from a host: clock ticks per second, this shell's PID, /proc/stat's machine
# and core lines, every process's stat line, and per thread of each PID given its stat line.
SNAPSHOT = r"""
echo "K $(getconf CLK_TCK)"; echo "S $$"
cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^/O /'
for p in "$@"; do
  for t in /proc/$p/task/*/stat; do
    s=$(cat "$t" 2>/dev/null) && echo "T $p $s"
  done
done
grep '^cpu' /proc/stat
"""


class HostProc:
    """cpu.CpuMeter's source for one host of the pair: the daemons vpnlab started there at the tunnel
    ends (`sides`: side -> its RemoteNodes), every process it started there (`nodes`: the testbed's)."""

    record = {"method": "clock ticks from each host's /proc, over its SSH connection"}

    def __init__(self, site, sides: dict[str, list], nodes: list) -> None:
        self.site, self.host = site, site.name
        here = [node for node in nodes if node.host is site.ssh]
        self.has_ends = any(sides.values())
        self.daemons = {proc.pid: (side, proc.what) for side, ends in sides.items() for node in ends
                        if node.host is site.ssh for proc in node.spawned if proc.what not in TRAFFIC_TOOLS}
        # every process the run started on the host, wherever it now hangs in the process tree: not other load
        self.spawned = [proc.pid for node in here for proc in node.spawned]

    def read(self) -> Snapshot:
        shown = self.site.ssh.run(["sh", "-c", SNAPSHOT, "sh", *map(str, self.daemons)], timeout=30).stdout
        snapshot = parse_snapshot(shown)
        snapshot.daemons = {pid: found for pid, found in self.daemons.items() if pid in snapshot.procs}
        snapshot.others = _others(snapshot, self.spawned)
        return snapshot


def _others(snapshot: Snapshot, spawned: list[int]) -> dict[int, tuple[str, int]]:
    """The host's processes outside the run: not below the SSH session that took the snapshot (the
    first sshd above its shell: every command vpnlab runs there), nor below a process vpnlab started
    (a daemon that left its shell)."""
    procs, session = snapshot.procs, snapshot.shell
    while session in procs and not procs[session][1].startswith("sshd") and procs[session][0] > 1:
        session = procs[session][0]
    return outside(procs, [session, *spawned])
