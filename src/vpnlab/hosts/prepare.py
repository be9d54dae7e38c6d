"""`vpnlab hosts prepare`: install what a study needs on real hosts, through Ansible.

The shipped playbook (prepare.yml) is run by ansible-playbook as a program. It
installs the packages it is given and runs features.KERNEL_PROBE, the probe every machine gets
(this one, a VM guest, a host over SSH), and leaves one JSON report per host for us here.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog import DRIVERS, KINDS, declared
from ..core.errors import VpnlabError
from ..core.features import KERNEL_PROBE, parse_probe
from ..tools import CORE
from ..workloads import background
from .inventory import ansible_program, limit, load_inventory

PLAYBOOK = Path(__file__).with_name("prepare.yml")

# Until the study's drivers and workloads declare theirs: what every study needs.
DEFAULT_PACKAGES = ("iperf3", "iproute2", "tcpdump")

# Features a host cannot be used without: roles that are not mapped live in namespaces
# there, joined by veth pairs, and the userspace VPNs need TUN.
REQUIRED_FEATURES = ("netns", "veth", "tun")

# Always there for a testbed on a host: its namespaces, links, probes, captures and the proof's sender.
TESTBED_TOOLS = ("ip", "tc", "ss", "sysctl", "ping", "tcpdump", "python3")


def study_packages(study) -> list[str]:
    """The Debian packages a study's scenarios run on real hosts: the testbed's programs and the kernel
    probe's, its VPNs' (and the packages they need without a program), its workloads' and its links'
    background mixes'."""
    tools = declared()
    commands = {tool.command for tool in CORE}  # the testbed's (TESTBED_TOOLS among them) and the kernel probe's
    for workload in study.workloads:
        commands |= set(KINDS[workload.kind].needs(workload))
    for link in study.links:
        commands |= background.needs(link.background) if link.background else set()
    wanted = {tools[name].package for name in commands if name in tools and tools[name].debian}
    for vpn in study.vpns:
        for layer in vpn.layers:
            driver = DRIVERS[layer.driver]
            # a package bootstrap.sh unpacks privately here (libreswan) is installed on a host as Debian's
            wanted |= {t.package for t in driver.tools if t.debian} | set(driver.packages)
    wanted |= {package for workload in study.workloads for package in KINDS[workload.kind].packages}
    if any(link.background for link in study.links):
        wanted |= set(background.PACKAGES)
    return sorted(wanted)


@dataclass
class PrepareReport:
    """What `prepare` found and did on one host."""

    host: str
    status: str                                   # ok, failed, unreachable
    message: str = ""
    packages: dict[str, str] = field(default_factory=dict)   # name: present | installed
    kernel: str = ""
    cpu_model: str = ""
    features: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def prepare(inventory: str | Path, pattern: str | None = None,
            packages: tuple[str, ...] | list[str] = DEFAULT_PACKAGES) -> list[PrepareReport]:
    """Run the shipped playbook on the inventory's hosts (or those `pattern` selects)."""
    if not packages or any(not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", p) for p in packages):
        raise VpnlabError(f"not a list of Debian package names: {' '.join(packages) or '(none)'}")
    hosts = limit(load_inventory(inventory), pattern, inventory)
    with tempfile.TemporaryDirectory(prefix="vpnlab-prepare-") as tmp:
        probe = Path(tmp, "probe.sh")
        probe.write_text(KERNEL_PROBE)
        reports = Path(tmp, "reports")
        reports.mkdir()
        extra = Path(tmp, "vars.json")
        extra.write_text(json.dumps({"vpnlab_packages": list(packages), "vpnlab_probe": str(probe),
                                     "vpnlab_report_dir": str(reports),
                                     "vpnlab_remote_report": f"/run/vpnlab-prepare-{secrets.token_hex(8)}.json"}))
        argv = [ansible_program("ansible-playbook"), "-i", str(inventory), str(PLAYBOOK),
                "-e", f"@{extra}", "--limit", ",".join(h.name for h in hosts)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
        found = {path.stem: json.loads(path.read_text()) for path in reports.glob("*.json")}
    return [_report(host.name, found.get(host.name), proc.stdout + proc.stderr, packages) for host in hosts]


def _report(name: str, raw: dict | None, output: str, packages) -> PrepareReport:
    if raw is None:
        match = re.search(rf"fatal: \[{re.escape(name)}\]: UNREACHABLE! => (.*)", output)
        if match:
            return PrepareReport(name, "unreachable", _message(match.group(1)))
        tail = "\n".join(output.strip().splitlines()[-5:])
        return PrepareReport(name, "failed", f"the playbook left no report:\n{tail}")
    missing = set(raw.get("missing_before", []))
    if raw["status"] != "ok":
        return PrepareReport(name, "failed", f"{raw.get('task')}: {raw.get('message')}".strip(),
                             {p: "missing" for p in missing})
    probe = parse_probe(raw["probe"])
    report = PrepareReport(name, "ok", packages={p: "installed" if p in missing else "present" for p in packages},
                           kernel=probe["kernel"], cpu_model=probe["cpu_model"], features=probe["features"])
    lacking = [f for f in REQUIRED_FEATURES if not report.features.get(f)]
    if lacking:
        report.status, report.message = "failed", f"the kernel lacks {', '.join(lacking)}"
    return report


def _message(text: str) -> str:
    """The `msg` of Ansible's JSON after `=>`, else the text itself."""
    try:
        return json.loads(text).get("msg", text).strip()
    except ValueError:
        return text.strip()
