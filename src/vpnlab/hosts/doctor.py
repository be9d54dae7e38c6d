"""`vpnlab hosts doctor`: what each real host offers, asked over SSH.

Per host: kernel, CPU model, the kernel pieces (features.KERNEL_PROBE, every machine's),
the versions of the programs vpnlab declares (vpnlab.tools), and for each other host of the selection the interface that
leads to it, with its driver and speed: the NIC a measurement will cross.
"""

from __future__ import annotations

import concurrent.futures
import shlex
from dataclasses import asdict, dataclass, field

from ..core.errors import VpnlabError
from ..catalog import declared
from ..core.features import parse_probe, probe_argv
from ..tools import Tool, places
from .inventory import Host
from .ssh import SshHost

# For an address: the interface the host routes it through, its driver (the device's, else
# the link kind: veth, bridge ...) and speed in Mbit/s (-1 when the driver does not say).
PATH_PROBE = r"""
to=$(getent ahostsv4 "$1" | sed -n '1s/ .*//p'); to=${to:-$1}
dev=$(ip -o route get "$to" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
drv=$(basename "$(readlink "/sys/class/net/$dev/device/driver" 2>/dev/null)" 2>/dev/null)
[ -n "$drv" ] || drv=$(ip -d -j link show dev "$dev" 2>/dev/null | sed -n 's/.*"info_kind":"\([^"]*\)".*/\1/p')
speed=$(cat "/sys/class/net/$dev/speed" 2>/dev/null || echo -1)
printf '%s\t%s\t%s\t%s\n' "$to" "$dev" "${drv:-unknown}" "${speed:--1}"
"""


@dataclass
class HostReport:
    host: str
    reachable: bool
    error: str = ""
    kernel: str = ""
    cpu_model: str = ""
    cpus: int = 0
    features: dict[str, bool] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    paths: list[dict] = field(default_factory=list)  # toward each other host

    def as_dict(self) -> dict:
        return asdict(self)


def doctor(hosts: list[Host]) -> list[HostReport]:
    """Ask every host at once; an unreachable one is reported, not fatal."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(8, len(hosts)))) as pool:
        return list(pool.map(lambda host: _examine(host, [h for h in hosts if h is not host]), hosts))


def _examine(host: Host, others: list[Host]) -> HostReport:
    try:
        ssh = SshHost(host, run_id="").attach()
    except VpnlabError as exc:
        return HostReport(host.name, False, str(exc))
    try:
        probe = parse_probe(ssh.run(probe_argv()).stdout)
        report = HostReport(host.name, True, kernel=probe["kernel"], cpu_model=probe["cpu_model"],
                            cpus=probe["cpus"], features=probe["features"], tools=_versions(ssh))
        for other in others:
            to, dev, driver, speed = ssh.run(["sh", "-c", PATH_PROBE, "sh", other.address]).stdout.split("\t")
            report.paths.append({"to": other.name, "address": to, "interface": dev,
                                 "driver": driver, "speed_mbit": int(speed)})
        return report
    except (VpnlabError, ValueError, KeyError) as exc:
        return HostReport(host.name, False, f"host {host.name}: {exc}")
    finally:
        ssh.disconnect()


def _versions(ssh: SshHost) -> dict[str, str]:
    shown = ssh.script(version_script(), timeout=300).stdout
    return dict(line.split("\t", 1) for line in shown.splitlines() if "\t" in line)


def locate(tool: Tool) -> str:
    """A shell line that sets $p to the program's path on a host (on PATH, else where Debian installs
    it or bootstrap.sh unpacks it: tools.places) and fails when it has none."""
    q = shlex.quote
    return (f"p=$(command -v {q(tool.command)}"
            + "".join(f" || {{ [ -x {q(place)} ] && echo {q(place)}; }}" for place in places(tool)) + ")")


def version_script(commands=None) -> str:
    """For every program vpnlab declares (or those of `commands`) that the host has: its name, a
    tab and its version, found as vpnlab.tools.versions finds it here (its own first line naming a
    version, else its Debian package's version). The programs are asked all at once: each answer
    is one short line (written whole), and a slow host (an emulated one takes a second a program)
    answers in the time of the slowest."""
    q = shlex.quote
    lines = []
    for tool in declared().values():
        if commands is not None and tool.command not in commands:
            continue
        own = (f'v=$(timeout 10 "$p" {shlex.join(tool.version[1:])} 2>&1 | grep -m 1 -E "[0-9]+[.][0-9]+")'
               if tool.version else "v=")
        package = f"dpkg-query -W -f='{tool.package} ${{Version}}' {q(tool.package)} 2>/dev/null"
        lines.append(f'{{ {locate(tool)} && {{ {own}; [ -n "$v" ] || v=$({package}); '
                     f'printf "%s\\t%s\\n" {q(tool.command)} "${{v:-unknown}}"; }}; }} &')
    return "\n".join(lines) + "\nwait\n"
