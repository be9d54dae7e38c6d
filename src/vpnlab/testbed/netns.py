"""A network namespace's processes and kernel tables, read without starting a process in it.

`ip netns exec NS cat /proc/net/...`, `ss` and `ip netns pids` each start one or two programs;
under the VM's software emulation a program start costs 0.1-0.2 s and a repetition started
dozens. Here a short-lived thread joins the namespace (setns affects only the calling thread)
and reads its /proc/thread-self/net files or asks with a socket made there; the processes in it
are found as `ip netns pids` finds them, by the inode of /proc/PID/ns/net.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
LISTEN_TCP = "0A"   # /proc/net/tcp's state column for LISTEN
UNCONNECTED_UDP = "07"  # a bound, unconnected UDP socket (what a UDP server has)
SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
IFF_UP = 0x1


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def join(namespace: str) -> None:
    """Move the calling thread into the namespace, for good: call it in a thread of its own."""
    with open(NETNS_DIR / namespace) as handle:
        _setns(handle.fileno())


def _inside(namespace: str, work):
    """`work()`'s result, called in a thread that has joined the namespace."""
    result: dict = {}

    def thread_body() -> None:
        try:
            join(namespace)
            result["value"] = work()
        except Exception as exc:  # raised again in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=thread_body, name=f"netns-{namespace}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def read_net(namespace: str, name: str) -> str:
    """The namespace's /proc/net/<name> (snmp, dev, tcp, ...)."""
    return _inside(namespace, lambda: Path(f"/proc/thread-self/net/{name}").read_text())


def sysctl(namespace: str, settings: dict[str, object]) -> None:
    """Set net.* sysctls in the namespace (/proc/sys/net is the opener's namespace's). A key this
    kernel does not make per-namespace is absent or read-only there: left alone, as before with
    `sysctl -e` (the default namespace's value is never touched)."""
    def write() -> None:
        for key, value in settings.items():
            try:
                Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")
            except (FileNotFoundError, PermissionError):
                continue
    _inside(namespace, write)


def sockets(table: str) -> list[tuple[int, str]]:
    """The sockets of a /proc/net/{tcp,udp}[6] table (its heading line first): (local port, state)."""
    rows = (line.split() for line in table.splitlines()[1:])
    return [(int(fields[1].rsplit(":", 1)[1], 16), fields[3]) for fields in rows if len(fields) > 3]


def listening(namespace: str, port: int, udp: bool = False) -> bool:
    """Does a socket in the namespace listen on `port` (TCP) or is one bound to it (UDP)?"""
    protocol, state = ("udp", UNCONNECTED_UDP) if udp else ("tcp", LISTEN_TCP)
    return any((port, state) in sockets(read_net(namespace, table)) for table in (protocol, protocol + "6"))


def ipv4_address_once_up(namespace: str, device: str) -> str | None:
    """The device's IPv4 address in the namespace once the device is up; None while it has no
    address, is down (pppd sets the address before it brings the link up) or does not exist."""
    def ask() -> str | None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # made inside: the namespace's
            request = struct.pack("256s", device.encode()[:15])
            try:
                flags = struct.unpack_from("H", fcntl.ioctl(probe.fileno(), SIOCGIFFLAGS, request), 16)[0]
                reply = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError as exc:
                if exc.errno in (errno.EADDRNOTAVAIL, errno.ENODEV):
                    return None
                raise
        return socket.inet_ntoa(reply[20:24]) if flags & IFF_UP else None
    return _inside(namespace, ask)


def accepts(path: str | Path) -> bool:
    """Does a server accept connections on this Unix socket? (A path names the same socket in
    every network namespace.)"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def pids(namespace: str) -> list[int]:
    """The processes in the namespace (what `ip netns pids` prints); none if it is gone."""
    try:
        target = (NETNS_DIR / namespace).stat()
    except OSError:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue  # ended meanwhile, or a kernel thread
        if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
            found.append(int(entry.name))
    return found


def read_sysctl(namespace: str, key: str) -> str | None:
    """A net.* sysctl's value in the namespace; None where this kernel has no such key there."""
    def read() -> str | None:
        try:
            return Path("/proc/sys", *key.split(".")).read_text().strip()
        except FileNotFoundError:
            return None
    return _inside(namespace, read)


NETLINK_NETFILTER = 12
CTNETLINK_DELETE = (1 << 8) | 2  # NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE: without attributes, all
NLM_F_REQUEST_ACK = 0x1 | 0x4


def flush_conntrack(namespace: str) -> None:
    """Forget every connection the namespace's conntrack tracks, NAT mappings among them (what
    `conntrack -F` does, over ctnetlink, so without conntrack-tools)."""
    def flush() -> None:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as nl:
            nl.bind((0, 0))
            nl.send(struct.pack("=IHHII", 20, CTNETLINK_DELETE, NLM_F_REQUEST_ACK, 1, 0)
                    + struct.pack("=BBH", socket.AF_INET, 0, 0))
            reply = nl.recv(4096)
        code = struct.unpack_from("=i", reply, 16)[0]  # the ack's nlmsgerr: 0, or minus an errno
        if code not in (0, -errno.ENOENT):  # ENOENT: nothing was tracked
            raise OSError(-code, f"conntrack flush in {namespace}: {os.strerror(-code)}")
    _inside(namespace, flush)
