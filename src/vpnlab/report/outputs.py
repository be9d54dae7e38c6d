"""A file the user names for vpnlab to write: `export -o`, `report --out`, `compare --html`.

vpnlab never clobbers. The path is checked before anything is computed:
- `-` is standard output;
- a new name is created, whole or not at all (written to a temporary file beside it, then
  linked into place, so a file that appeared meanwhile is not replaced);
- an existing regular file is refused unless the command has `--force`; with it, the file is
  replaced atomically (temporary file, then rename: a reader sees the old or the new one) and
  keeps its permissions;
- a character device or FIFO (/dev/null, a pipe someone reads, /dev/stdout) is written to,
  never replaced;
- any other symbolic link is refused, `--force` or not: its target is not overwritten, nor the
  link replaced by a file;
- a directory, a block device, a socket, a missing or read-only directory, a name too long, a
  kernel filesystem such as /proc: exit 2 with the reason, and no temporary file left behind.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from ..core.errors import VpnlabError
from ..core.files import PSEUDO_FILESYSTEMS, filesystem_type

STDOUT = "-"


class Output:
    """A checked output path (VpnlabError at construction if vpnlab may not write it)."""

    def __init__(self, path: str | Path, option: str, force: bool = False, protect: tuple[Path, ...] = ()):
        self.option = option
        self.force = force
        self.path = None if str(path) == STDOUT else Path(path)
        self.stream = False   # a character device or FIFO: written to in place
        self.mode: int | None = None  # the permissions of the regular file --force replaces
        if str(path) == "":
            raise VpnlabError(f"{option}: an empty path; name a file, or - for standard output")
        if self.path is not None:
            self._check(protect)

    def __str__(self) -> str:
        return "standard output" if self.path is None else str(self.path)

    def _refuse(self, reason: str) -> VpnlabError:
        return VpnlabError(f"{self.option} {self.path}: {reason}")

    def _check(self, protect: tuple[Path, ...]) -> None:
        try:
            found = os.lstat(self.path)
        except FileNotFoundError:
            found = None
        except OSError as exc:  # a name too long, a parent that is a file, a directory we cannot search
            raise self._refuse(exc.strerror) from None
        if found is not None and _is_stream(self.path):  # also through a link, as /dev/stdout is
            self.stream = True
            return
        kind = filesystem_type(self.path)
        if kind in PSEUDO_FILESYSTEMS:
            raise self._refuse(f"on the kernel's {kind} filesystem: not a place for files")
        if found is None:
            self._check_parent()
        elif stat.S_ISLNK(found.st_mode):
            raise self._refuse(f"a symbolic link (to {os.readlink(self.path)}): vpnlab neither writes through "
                               "a link nor replaces one; name the file itself")
        elif stat.S_ISDIR(found.st_mode):
            raise self._refuse("a directory; name a file in it")
        elif not stat.S_ISREG(found.st_mode):
            raise self._refuse("neither a regular file nor a character device or FIFO; vpnlab writes only those")
        elif any(p.exists() and os.path.samefile(self.path, p) for p in protect):
            raise self._refuse("the results store this command reads; name another file")
        elif not self.force:
            raise self._refuse("exists; vpnlab does not overwrite files: choose another name, or add --force "
                               "to replace it")
        else:
            self.mode = stat.S_IMODE(found.st_mode)
            self._check_parent()

    def _check_parent(self) -> None:
        parent = self.path.parent
        if not parent.is_dir():
            raise self._refuse(f"no such directory {parent}")
        if not os.access(parent, os.W_OK | os.X_OK):
            reason = "a read-only filesystem" if _read_only(parent) else "permission denied"
            raise self._refuse(f"cannot write in {parent} ({reason})")

    @contextmanager
    def open(self) -> Iterator[IO[str]]:
        """A text file to write the output into; in place once the block ends without an error."""
        if self.path is None:
            yield sys.stdout
            sys.stdout.flush()
            return
        try:
            if self.stream:
                with self._stream() as fh:
                    yield fh
            else:
                with self._replacement() as fh:
                    yield fh
        except OSError as exc:
            reason = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror
            raise self._refuse(f"cannot write it ({reason})") from None

    def write_text(self, text: str) -> None:
        with self.open() as fh:
            fh.write(text)

    @contextmanager
    def _stream(self) -> Iterator[IO[str]]:
        fd = os.open(self.path, os.O_WRONLY | os.O_NOCTTY)  # never O_CREAT nor O_TRUNC
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # replaced since the check
            os.close(fd)
            raise self._refuse("changed since vpnlab checked it; nothing was written")
        with os.fdopen(fd, "w", newline="") as fh:
            yield fh

    @contextmanager
    def _replacement(self) -> Iterator[IO[str]]:
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name[:200]}.", suffix=".partial")
        try:
            with os.fdopen(fd, "w", newline="") as fh:
                yield fh
                os.fchmod(fh.fileno(), self.mode if self.mode is not None else 0o666 & ~_umask())
            if self.mode is None:
                _link_new(temp, self.path, self._refuse("appeared while vpnlab wrote it; left as it is"))
            elif stat.S_ISREG(os.lstat(self.path).st_mode):
                os.replace(temp, self.path)
            else:
                raise self._refuse("changed since vpnlab checked it; nothing was written")
        finally:
            Path(temp).unlink(missing_ok=True)


def _link_new(temp: str, path: Path, exists: VpnlabError) -> None:
    """Put `temp` at `path`, which must not exist: a hard link fails rather than replace a file."""
    try:
        os.link(temp, path)
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP):  # a filesystem without hard links (FAT, some FUSE)
            raise
        if os.path.lexists(path):
            raise exists from None
        os.rename(temp, path)


def _is_stream(path: Path) -> bool:
    """A character device or FIFO, or a link to one: written to in place, nothing replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _read_only(directory: Path) -> bool:
    return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
