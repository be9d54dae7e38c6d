"""A disposable full-kernel micro-VM for the scenarios this host's kernel cannot run.

The guest boots a distribution kernel (the host's own when its modules are on disk, else
Debian's linux-image package fetched once into a cache) against the host's root filesystem:
a read-only virtio-9p share under a tmpfs overlay, so every tool installed here is the same
there. A second, writable share is the work folder: the job goes in, results and logs come
out. The guest has no network device. KVM is used when it really works; otherwise QEMU's
software emulation (TCG), which is slow: measurements that saturate the guest's CPU are
flagged by the guest's own CPU meter.
"""

from __future__ import annotations

import compileall
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..catalog import DRIVERS
from ..core.errors import VpnlabError
from ..core.files import tail
from ..core import sessions
from ..core.signals import held
from ..testbed.state import RunState
from ..tools.unpacked import CACHE, UnpackError, unpack

QEMU = "qemu-system-x86_64"
PACKAGE = Path(__file__).resolve().parents[1]  # vpnlab itself, as the guest must find it
BOOT_TIMEOUT_S = 300  # TCG boots Debian's kernel in 5-10 s here, four guests at once on 2 busy cores took over 120
KVM_BOOT_TIMEOUT_S = 20
GUEST_MEMORY_MB = 3072
READY = "vpnlab-guest: ready"
DONE = "vpnlab-guest: done"
EXIT_FILE = "guest.exit"  # in the work folder: the command's exit status, written as it ends
# printed before the backtrace, which a busy emulator prints for seconds; after DONE it is init's own
# end (its poweroff raced), not a death
PANIC = "Kernel panic - not syncing"
# The root filesystem and modules come over virtio-9p; these load first, from the initramfs.
# virtio-rng feeds the guest entropy from the host: IKE daemons read /dev/random at once.
BOOT_MODULES = ("virtio_pci", "virtio_rng", "9pnet_virtio", "9p", "overlay")
# What the guest loads before any scenario (no udev there): the testbed's own pieces; each
# driver declares the data-plane modules and accelerated ciphers it needs (`guest_modules`).
TESTBED_MODULES = ("tun", "veth", "sch_netem", "sch_tbf")
TAP, NET_MODULE = "vm0", "virtio_net"  # a guest with a network (Guest.netns): the host's end, the guest's driver


def guest_modules(drivers) -> tuple[str, ...]:
    """The testbed's modules and those of `drivers` (names): only the job's, since under
    software emulation loading every driver's took 8 s of each boot."""
    return tuple(dict.fromkeys([*TESTBED_MODULES, *(m for d in drivers for m in DRIVERS[d].guest_modules)]))


JOB = "job.json"  # in the work folder: what the guest is to run
RESULTS = "results"  # in the work folder: the guest's results directory


def write_job(work: Path, study, scenario_ids: list[str]) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / JOB).write_text(json.dumps({"study_text": study.source_text, "source": study.source_path,
                                             "scenarios": scenario_ids}))


class VmError(VpnlabError):
    """The VM could not be built, did not boot, or died."""


@dataclass(frozen=True)
class Kernel:
    version: str
    image: Path
    modules: Path  # the folder holding lib/modules/<version>
    source: str  # "host" or the package it came from


def find_kernel(download: bool = True) -> Kernel:
    """The host's kernel if its image and modules are on disk, else Debian's, cached."""
    release = platform.release()
    image, modules = Path(f"/boot/vmlinuz-{release}"), Path(f"/lib/modules/{release}")
    if image.is_file() and (modules / "modules.dep").is_file() and os.access(image, os.R_OK):
        return Kernel(release, image, Path("/"), "host")
    cached = sorted(CACHE.glob("kernel/*/boot/vmlinuz-*"))
    if not cached and download:
        _download_kernel()
        cached = sorted(CACHE.glob("kernel/*/boot/vmlinuz-*"))
    if not cached:
        raise VmError("no kernel for the VM: the host's own has no modules on disk and none is cached "
                      f"in {CACHE}/kernel, and `apt-get download` could not fetch one (./bootstrap.sh setup fetches it)")
    image = cached[-1]
    root = image.parent.parent
    version = image.name.removeprefix("vmlinuz-")
    return Kernel(version, image, root, root.name)


def _download_kernel() -> None:
    """Debian's current kernel package, unpacked into the cache with its module index built."""
    depends = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True).stdout
    match = re.search(r"Depends: (linux-image-[\w.-]+)", depends)
    if not match:
        raise VmError("cannot find Debian's kernel package (apt-cache depends linux-image-amd64 found none)")
    package = match.group(1)
    version = package.removeprefix("linux-image-")
    try:
        unpack(package, CACHE / "kernel" / package,
               after=lambda tree: subprocess.run(["depmod", "-b", tree, version], check=True))
    except (UnpackError, subprocess.CalledProcessError) as exc:
        raise VmError(str(exc)) from exc


def kvm_works() -> bool:
    """/dev/kvm alone is not enough: without the CPU's virtualisation flag (nested
    virtualisation off) QEMU opens it and then hangs."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
        fd = os.open("/dev/kvm", os.O_RDWR)
        os.close(fd)
    except OSError:
        return False
    return bool(re.search(r"^flags\s*:.*\b(vmx|svm)\b", flags, re.M))


def available() -> str | None:
    """None if a VM can be booted here, else why not."""
    if not shutil.which(QEMU):
        return f"'{QEMU}' (package qemu-system-x86) is not installed"
    if not shutil.which("busybox"):
        return "'busybox' (package busybox-static) is not installed"
    if not shutil.which("modprobe"):
        return "'modprobe' (package kmod) is not installed"
    try:
        find_kernel(download=False)
    except VmError:
        if not shutil.which("apt-get"):
            return "no kernel for the VM and no apt-get to fetch one"
    return None


# --- the initramfs: busybox, the modules to reach the root share, and /init ------------

def _module_files(kernel: Kernel, names) -> list[Path]:
    """Module files for `names` with their dependencies, in load order."""
    files: list[Path] = []
    for name in names:
        out = subprocess.run(["modprobe", "-d", kernel.modules, "-S", kernel.version, "--show-depends", name],
                             capture_output=True, text=True)
        for line in out.stdout.splitlines():
            if line.startswith("insmod "):
                path = Path(line.split()[1])
                if path not in files:
                    files.append(path)
    return files


INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /lower /rw /newroot
mount -t proc proc /proc
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do insmod "$m" || echo "vpnlab-initramfs: cannot load $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || exec poweroff -f
mount -t tmpfs -o size=80% rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || exec poweroff -f
umount /proc
exec switch_root /newroot /bin/sh {guest_init}
"""


def build_initramfs(kernel: Kernel, guest_init: Path, target: Path) -> None:
    """busybox, the boot modules and /init, as the gzipped newc cpio archive the kernel unpacks."""
    tree = target.with_suffix(".tree")
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "bin").mkdir(parents=True)
    (tree / "modules").mkdir()
    shutil.copy(shutil.which("busybox"), tree / "bin" / "busybox")
    (tree / "init").write_text(INIT.format(guest_init=guest_init))
    (tree / "init").chmod(0o755)
    for i, path in enumerate(_module_files(kernel, BOOT_MODULES)):
        shutil.copy(path, tree / "modules" / f"{i:02d}-{path.name}")
    with open(target, "wb") as out:
        subprocess.run("find . -print0 | cpio --null --quiet -o -H newc -R 0:0 | gzip -1", shell=True, cwd=tree,
                       stdout=out, check=True)
    shutil.rmtree(tree)


# --- the guest's PID 1 once on the host's root ---------------------------------

GUEST_INIT = """set -u
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup  # the guest's own: each tunnel end's CPU in a cgroup of its own
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run
{hold}
mount -t tmpfs tmp /tmp
mkdir -p /run/lock /run/netns /var/run/wireguard
mount -t tmpfs vartmp /var/tmp
{restore}
mkdir -p {modules_mount} {work}
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 modules {modules_mount}
mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=512000,cache=none work {work}
hostname vpnlab-guest
ip link set lo up
for m in {modules}; do modprobe -q "$m" 2>/dev/null; done
[ -c /dev/ppp ] || mknod /dev/ppp c 108 0
echo "{ready} kernel $(uname -r), $(nproc) cpus"
cd {cwd}
{command} > {work}/guest.log 2>&1
echo $? > {work}/{exit_file}
echo "vpnlab-guest: exit $(cat {work}/{exit_file})"
sync
echo "{done}"
echo o > /proc/sysrq-trigger
sleep 30
"""


def _keep_through_tmpfs() -> dict[str, str]:
    """The guest gets an empty /tmp and /var/tmp, but vpnlab itself (its Python, its package) and the
    folder it runs from may live there (a clone in /tmp): those folders are bind-mounted aside before
    the tmpfs goes on and moved back after, as the host has them."""
    folders = []
    for path in (Path(sys.prefix), PACKAGE, Path.cwd()):
        for tmp in (Path("/tmp"), Path("/var/tmp")):
            if path.is_relative_to(tmp) and path != tmp:
                top = tmp / path.relative_to(tmp).parts[0]
                if top not in folders:
                    folders.append(top)
    hold = [f"mkdir -p /run/vpnlab-held/{i} && mount --bind {_quote(str(d))} /run/vpnlab-held/{i}"
            for i, d in enumerate(folders)]
    restore = [f"mkdir -p {_quote(str(d))} && mount --move /run/vpnlab-held/{i} {_quote(str(d))}"
               for i, d in enumerate(folders)]
    return {"hold": "\n".join(hold), "restore": "\n".join(restore)}


def tcg_cpus() -> int:
    """A guest's vCPUs under software emulation: one for every two of the cores vpnlab may use here.
    Each vCPU is a thread of the emulator; when the machine's other work keeps one waiting for a
    core, the guest's kernel on the other spins on a lock that vCPU holds. Measured on 2 cores
    (boot, then five imports of vpnlab's runner): beside six busy programs, 2 vCPUs took 28 s and
    27.5 s of CPU where 1 took 15 s and 14.2 s; on the idle machine, 15 s and 16.7 s against 14 and 14.4."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


@dataclass
class Guest:
    """One boot of the VM running `command` in the guest, with `work` shared read-write."""

    state: RunState
    work: Path
    console_log: Path
    drivers: tuple[str, ...] = ()  # the VPN drivers the guest will run: their kernel modules are loaded
    cpus: int = 2  # the vCPUs under KVM; under software emulation at most this many (tcg_cpus)
    vcpus: int = 0  # the vCPUs of the boot under way or done; 0 before one
    accel: str = ""  # the accelerator of the boot under way or done ("kvm", "tcg"); '' before one
    # a namespace of the run's own holding a tap named TAP: the emulator runs in it, the guest's eth0
    # is the tap's other end (no network otherwise)
    netns: str = ""

    def run(self, command: list[str], timeout_s: float, env: dict[str, str]) -> str:
        """Boot, run `command` with `env` (plus VPNLAB_BACKEND=vm-kvm or vm-tcg), power off.
        Returns the accelerator used; raises VmError."""
        kernel = find_kernel()
        # vpnlab's bytecode, written here where compiling takes a fraction of a second, not by the guest's
        # Python into its throwaway overlay under emulation, each boot (with PYTHONDONTWRITEBYTECODE
        # the host's imports write none)
        compileall.compile_dir(PACKAGE, quiet=2)
        self.work.mkdir(parents=True, exist_ok=True)
        boot = self.work / "boot"
        boot.mkdir(exist_ok=True)
        accels = ["kvm", "tcg"] if kvm_works() else ["tcg"]
        try:
            for accel in accels:
                self.accel = accel
                script = boot / f"guest-init-{accel}.sh"
                exports = " ".join(f"{k}={_quote(v)}" for k, v in (env | {"VPNLAB_BACKEND": f"vm-{accel}"}).items())
                script.write_text(GUEST_INIT.format(
                    modules_mount=f"/lib/modules/{kernel.version}", work=self.work,
                    modules=" ".join(guest_modules(self.drivers) + (NET_MODULE,) * bool(self.netns)),
                    ready=READY, done=DONE, exit_file=EXIT_FILE, cwd=Path.cwd(), **_keep_through_tmpfs(),
                    command=f"env {exports} " + " ".join(_quote(str(c)) for c in command)))
                initramfs = boot / f"initramfs-{accel}.gz"
                build_initramfs(kernel, script, initramfs)
                if self._boot(kernel, initramfs, accel, timeout_s) != "hung":
                    return accel
        finally:
            shutil.rmtree(boot, ignore_errors=True)
        raise VmError(f"the VM did not boot with {', '.join(accels)}; console log: {self.console_log}")

    def _finished(self, console: str) -> bool:
        """The guest's command has ended: DONE on the console, or (when the kernel's own messages as it
        powers off broke that line, "do[ 465.157077] sysrq: Power Off\\nne") the exit file it wrote first."""
        return DONE in console or (self.work / EXIT_FILE).exists()

    def _boot(self, kernel: Kernel, initramfs: Path, accel: str, timeout_s: float) -> str:
        modules_dir = kernel.modules / "lib" / "modules" / kernel.version
        cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]
        self.vcpus = self.cpus if accel == "kvm" else min(self.cpus, tcg_cpus())
        argv = [QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", *cpu,
                "-M", "q35", "-smp", str(self.vcpus), "-m", str(GUEST_MEMORY_MB),
                "-kernel", kernel.image, "-initrd", initramfs,
                "-append", "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init",
                "-serial", f"file:{self.console_log}",
                "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=root,mount_tag=hostroot",
                "-fsdev", f"local,id=mods,path={modules_dir},security_model=none,readonly=on",
                "-device", "virtio-9p-pci,fsdev=mods,mount_tag=modules",
                "-fsdev", f"local,id=work,path={self.work},security_model=none,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=work,mount_tag=work",
                "-device", "virtio-rng-pci"]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv,  # which execs: the emulator keeps the PID
                    "-netdev", f"tap,id=net0,ifname={TAP},script=no,downscript=no",
                    "-device", "virtio-net-pci,netdev=net0"]
        self.console_log.write_bytes(b"")
        (self.work / EXIT_FILE).unlink(missing_ok=True)
        with held():  # started, then recorded: a signal between the two would leave it unseen
            proc = sessions.start([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.state.add_process(proc.pid, "qemu")
        started = time.monotonic()
        boot_limit = KVM_BOOT_TIMEOUT_S if accel == "kvm" else BOOT_TIMEOUT_S
        try:
            ready_at = None  # the guest's own time limit runs from the moment it is up
            while proc.poll() is None:
                console = self.console_log.read_text(errors="replace")
                now = time.monotonic()
                if ready_at is None and READY in console:
                    ready_at = now
                if ready_at is None and now - started > boot_limit:
                    if accel == "kvm":
                        return "hung"
                    raise VmError(f"the VM did not boot within {boot_limit} s ({accel}); console log: "
                                  f"{self.console_log}:\n{tail(self.console_log, 12)}")
                if PANIC in console and not self._finished(console):
                    raise VmError(f"the VM stopped before the guest finished ({accel}, its kernel panicked); "
                                  f"console log: {self.console_log}:\n{tail(self.console_log, 12)}")
                if ready_at is not None and now - ready_at > timeout_s:
                    raise VmError(f"the guest did not finish within {timeout_s:.0f} s; console log: "
                                  f"{self.console_log}:\n{tail(self.console_log, 12)}")
                time.sleep(0.2)
            if not self._finished(self.console_log.read_text(errors="replace")):
                err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise VmError(f"the VM stopped before the guest finished ({accel}, exit {proc.returncode}"
                              f"{': ' + err[-300:] if err else ''}); console log {self.console_log}:\n{tail(self.console_log, 12)}")
            return "done"
        finally:
            self.state.stop_process(proc.pid, grace=1.0)
            if proc.stderr:
                proc.stderr.close()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def describe() -> dict:
    """For `vpnlab doctor`: can a VM run here, with which kernel and accelerator."""
    problem = available()
    info = {"available": problem is None, "problem": problem, "kvm": kvm_works()}
    if problem is None:
        try:
            kernel = find_kernel(download=False)
            info["kernel"] = f"{kernel.version} ({kernel.source})"
        except VmError:
            info["kernel"] = "fetched with apt-get download on first use"
    return info


__all__ = ["Guest", "Kernel", "VmError", "available", "describe", "find_kernel", "kvm_works"]
