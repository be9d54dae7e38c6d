"""What many parts do with files: quote the end of a log, tell a kernel filesystem, write vpnlab's own
files without following a link planted in their place."""

from __future__ import annotations

import codecs
import os
import stat
import tempfile
from pathlib import Path


def tail(path: Path, lines: int = 15, indent: str = "    ") -> str:
    """The last lines of a log, indented to sit under the message that quotes them."""
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return indent + "(no log)"
    return "\n".join(indent + line for line in text[-lines:])


# Kernel filesystems: files there are the kernel's interfaces, never a place for results or reports.
PSEUDO_FILESYSTEMS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                      "configfs", "bpf", "pstore", "efivarfs", "fusectl", "mqueue", "binfmt_misc", "autofs", "nsfs"}


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding `path`, or that would hold it (its nearest existing
    ancestor), from this process's mount table: the last mount on the longest matching mount point."""
    where = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/self/mountinfo") as table:
        for line in table:
            fields = line.split()
            point = codecs.decode(fields[4], "unicode_escape")  # spaces and the like come as \040
            inside = where == point or where.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[fields.index("-") + 1]
    return kind


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message: 'a FIFO', 'a character device' ..."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))
    return next((name for test, name in kinds if test(mode)), "a regular file")


def write_own(path: Path, data: bytes | str) -> None:
    """Write a file of vpnlab's own (a study copy, a reserve, a race's rules): into a new file beside
    it, then renamed over the name, so that a link planted there is replaced, never written through."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            os.fchmod(fh.fileno(), 0o644)
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)


def planted(directory: Path, limit: int = 5) -> list[str]:
    """What in a directory tree vpnlab would write through or into the wrong file: symbolic links,
    regular files with another name elsewhere (hard links), devices, FIFOs, sockets; none followed."""
    found, folders = [], [Path(directory)]
    while folders and len(found) < limit:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    folders.append(Path(entry.path))
                elif stat.S_ISLNK(info.st_mode):
                    found.append(f"{entry.path} (a symbolic link to {os.readlink(entry.path)})")
                elif not stat.S_ISREG(info.st_mode):
                    found.append(f"{entry.path} ({file_kind(info.st_mode)})")
                elif info.st_nlink > 1:
                    found.append(f"{entry.path} (a hard link: {info.st_nlink} names for one file)")
    return found[:limit]
