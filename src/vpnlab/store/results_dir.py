"""The results directory is the user's data: vpnlab writes only into a new or empty directory, or
into its own run of the same study with `--resume`, one run at a time, and reads a store only
after checking, read-only, that it is an undamaged vpnlab store.

- `claim` takes a directory for a run: it refuses (exit 2, nothing touched) an existing
  directory that holds anything else, a run of another study, or a run of the same study without
  `--resume`; then it holds an flock on `.vpnlab-lock` inside the directory until the process
  ends, so a second run on the same directory is refused while the first lives (the kernel
  drops the lock of a dead process, so a crash never blocks a later `--resume`).
- `check_store` (store/database.py) opens a store read-only and says what is wrong with it, if anything;
  `read_store` opens it for a command that only reads (never creating nor migrating it), and
  `upgrade` migrates an older store in place after keeping a copy.
- `explain` turns a full disk or an unreadable store met anywhere into one clear message and
  the exit code (1 for a full disk: the run is marked interrupted and resumable; 2 otherwise).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import itertools
import lzma
import os
import shutil
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import VpnlabError
from ..core.files import PSEUDO_FILESYSTEMS, filesystem_type, planted
from . import (DB_NAME, LOW_SPACE_BYTES, READABLE_SINCE, RESERVE_NAME, SCHEMA_VERSION, DiskFull, ReadOnlyStore,
                    Store, StoreError, check_store, free_bytes, inspect_store, read_only_uri)

LOCK_NAME = ".vpnlab-lock"
PACKED_NAME = DB_NAME + ".xz"   # a store compressed with xz: read as it is, never written
OURS = {LOCK_NAME, RESERVE_NAME}   # what an otherwise empty directory may hold: a claim that wrote nothing
EXIT_DISK_FULL = 1
EXIT_BAD_STORE = 2


@dataclass
class Claim:
    """A results directory held by this process: its lock lasts until `release` or the process ends."""

    directory: Path
    fd: int
    upgraded: tuple[int, Path] | None = None  # a resumed older store: the schema it had, and its copy

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor of the lock file drops the flock
            self.fd = -1


def read_store(directory: Path) -> ReadOnlyStore:
    """The store of a results directory, for a command that only reads it (show, export, stats,
    report, compare, `run --resume --dry-run`): checked first, then opened read-only; never
    created, never migrated. An older store is refused with the command that upgrades it."""
    path = Path(directory) / DB_NAME
    if not path.is_file() and (Path(directory) / PACKED_NAME).is_file():
        path = unpacked(Path(directory) / PACKED_NAME)
    if not path.is_file():
        raise StoreError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    version, runs = inspect_store(path)
    if not runs:
        raise StoreError(f"{path}: a vpnlab results store with no run in it; nothing to read")
    if version < READABLE_SINCE:  # (one since then is read as it is: what was added since is derived)
        raise StoreError(f"{path}: an older store (results schema {version}; this vpnlab reads {SCHEMA_VERSION}); "
                         f"left untouched: run `vpnlab upgrade {directory}` to upgrade it (it keeps a copy first)")
    return ReadOnlyStore(path, read_only_uri(path))


def unpacked(packed: Path) -> Path:
    """A store compressed with xz (results.sqlite.xz: how runs/ keeps the seeds' stores), decompressed
    into a private folder removed at exit; the file itself is only read."""
    folder = Path(tempfile.mkdtemp(prefix="vpnlab-unpacked-"))
    atexit.register(shutil.rmtree, folder, True)
    try:
        with lzma.open(packed) as source, open(folder / DB_NAME, "wb") as copy:
            shutil.copyfileobj(source, copy, 1 << 20)
    except (lzma.LZMAError, EOFError) as exc:
        raise StoreError(f"{packed}: not a store compressed with xz ({exc}); left untouched") from None
    return folder / DB_NAME


def upgrade(directory: Path) -> tuple[int, Path | None]:
    """Bring an older store to this vpnlab's schema in place, after copying it beside itself
    (`results.sqlite.v3.bak`; `.bak.1` and so on when that name is taken: no copy is overwritten),
    with the directory locked against a run (`run --resume` does the same under its claim), its
    lock file removed after. The version it had, and the copy (None: it was current)."""
    path = Path(directory) / DB_NAME
    if not path.is_file():
        raise StoreError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    fd = _lock(Path(directory))
    try:
        upgraded = _migrate(path)
    finally:
        (Path(directory) / LOCK_NAME).unlink()  # held, so no run has it: no lock left once the upgrade ends
        os.close(fd)
    return upgraded or (SCHEMA_VERSION, None)


def _migrate(path: Path) -> tuple[int, Path] | None:
    """Under the directory's lock: an older store copied, then brought to this schema in place;
    the schema it had and the copy (None: it was current). A store that cannot be upgraded is
    refused before the copy; one whose upgrade fails is left as it was, and so is no copy."""
    version, _ = inspect_store(path)
    if version == SCHEMA_VERSION:
        return None
    backup = _backup(path, version)
    try:
        Store(path).close()  # its opening migrates
    except BaseException:
        backup.unlink()
        raise
    return version, backup


def _backup(path: Path, version: int) -> Path:
    """A consistent copy of the store (its write-ahead log included) under a name nothing has."""
    for number in itertools.count():
        backup = path.with_name(f"{path.name}.v{version}.bak" + (f".{number}" if number else ""))
        try:
            os.close(os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(path.stat().st_mode)))
            break
        except FileExistsError:
            continue
    source, copy = sqlite3.connect(read_only_uri(path), uri=True), sqlite3.connect(backup)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return backup


def claim(out_dir: Path, study_text: str, resume: bool) -> Claim:
    """Take `out_dir` for a run of the study `study_text` (a new run, or `--resume`), or refuse
    with a VpnlabError and nothing there touched; the returned claim holds the directory's lock."""
    out_dir = Path(out_dir)
    admissible(out_dir, study_text, resume)
    free = free_bytes(out_dir)
    if free < LOW_SPACE_BYTES:
        raise DiskFull(out_dir, f"only {free >> 10} KiB free on its disk (a run needs at least "
                                f"{LOW_SPACE_BYTES >> 20} MiB); nothing was started", stopped=False)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFull(out_dir, stopped=False) from exc
        raise VpnlabError(f"{out_dir}: cannot write there ({exc.strerror})") from exc
    fd = _lock(out_dir)
    try:
        admissible(out_dir, study_text, resume)  # again, under the lock: a run may have come and gone
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        upgraded = _migrate(out_dir / DB_NAME) if resume else None
    except BaseException:
        os.close(fd)
        raise
    return Claim(out_dir, fd, upgraded)


def _lock(directory: Path) -> int:
    """The directory's lock, held (the descriptor), or a VpnlabError naming the run that holds it."""
    refuse_planted(directory)
    while True:
        fd = _open_lock(directory)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise VpnlabError(f"{directory}: another vpnlab run (pid {holder}) is writing into this directory; "
                              "wait for it to end (or stop it) before running here") from None
        if _is_there(fd, directory / LOCK_NAME):
            return fd
        os.close(fd)  # an upgrade removed the file between our open and our lock: lock the one there now


def _open_lock(directory: Path) -> int:
    try:  # never through a link, nor into a file that has another name
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFull(directory, stopped=False) from exc
        raise VpnlabError(f"{directory}: cannot write there ({exc.strerror})") from exc
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)
        raise VpnlabError(f"{directory}/{LOCK_NAME}: not a file of vpnlab's own (it has another name); left untouched")
    return fd


def _is_there(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the one at `path`."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    return os.path.samestat(os.fstat(fd), there)


def refuse_planted(directory: Path) -> None:
    """Refuse a results directory holding a link vpnlab did not make: a file it writes there (a lock,
    the reserve, the study copy, a log, a capture, the store's journal) would write its target."""
    if found := planted(directory) if directory.is_dir() else []:
        raise VpnlabError(f"{directory}: holds what vpnlab never makes and would write through: "
                          + "; ".join(found) + ". Nothing was touched; remove it, or choose another directory")


def live_status(directory: Path, status: str) -> str:
    """A run's status as it is now: one stored as running whose directory no process holds (the kernel
    drops a dead process's lock) was killed; said so, and how to finish it. Reads only."""
    if status != "running" or _held(Path(directory)):
        return status
    return f"killed (no vpnlab holds it now; finish it with: vpnlab run --resume {directory})"


def _held(directory: Path) -> bool:
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock: nothing ever held it, or a copy of the directory
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def admissible(out_dir: Path, study_text: str, resume: bool) -> None:
    """Refuse (VpnlabError) a directory this run must not write into; reads, never writes (a dry
    run checks its --out with it, as the run would)."""
    try:
        os.lstat(out_dir)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a parent that is a file
        why = "a part of the path is a file, not a directory" if exc.errno == errno.ENOTDIR else exc.strerror
        raise VpnlabError(f"--out {out_dir}: {why}; choose another directory") from None
    if (kind := filesystem_type(out_dir)) in PSEUDO_FILESYSTEMS:
        raise VpnlabError(f"--out {out_dir}: on the kernel's {kind} filesystem: not a place for results; "
                          "choose a directory on a disk")
    if out_dir.is_dir():
        refuse_planted(out_dir)
    store = out_dir / DB_NAME
    if resume:
        if not store.is_file():
            raise VpnlabError(f"{out_dir}: no {DB_NAME} here, nothing to resume")
        runs = check_store(store)
        if not runs:
            raise VpnlabError(f"{out_dir}: the results store has no run to resume")
        if runs[0]["study_text"] != study_text:
            raise VpnlabError(f"{out_dir}: holds a run of study '{runs[0]['study_name']}', not of the study "
                              "given; left untouched")
        return
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise VpnlabError(f"--out {out_dir}: exists and is not a directory; choose a new or empty directory")
    entries = sorted(set(os.listdir(out_dir)) - OURS)
    if not entries:
        return
    if not store.is_file():
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise VpnlabError(f"--out {out_dir}: the directory exists and holds files that are not a vpnlab run "
                          f"({shown}); vpnlab writes only into a new or empty directory and left it "
                          "untouched: choose another --out")
    try:
        runs = check_store(store)
    except StoreError as exc:
        raise VpnlabError(f"--out {out_dir}: holds a {DB_NAME} that vpnlab cannot use ({exc}): "
                          "choose another --out") from None
    if runs and runs[0]["study_text"] == study_text:
        if runs[-1]["status"].startswith("completed"):
            raise VpnlabError(f"--out {out_dir}: already holds a completed run of this study (`vpnlab show "
                              f"{out_dir}`); to measure again, choose another --out. Nothing was changed")
        raise VpnlabError(f"--out {out_dir}: already holds an unfinished run of this study (status "
                          f"{runs[-1]['status']}); finish it with `vpnlab run --resume {out_dir}`, or choose "
                          "another --out. Nothing was changed")
    what = f"a run of another study ('{runs[0]['study_name']}')" if runs else "a results store with no run"
    raise VpnlabError(f"--out {out_dir}: holds {what}; its results are left untouched: choose another --out")


def explain(exc: BaseException) -> tuple[str, int] | None:
    """The message and exit code for a full disk or an unreadable store; None for other errors."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        if isinstance(exc, DiskFull) and not exc.stopped:
            return f"{exc.filename}: the disk is full: {exc.strerror}", EXIT_DISK_FULL
        if isinstance(exc, DiskFull):
            directory = Path(exc.filename).parent  # the store's: the results directory
            return (f"{exc.filename}: the disk is full: {exc.strerror}. The run stopped and is marked "
                    "interrupted; everything stored before is intact. Free some space (or copy "
                    f"{directory} to a bigger disk) and finish with: vpnlab run --resume {directory}",
                    EXIT_DISK_FULL)
        return (f"{exc.filename or 'a file'}: the disk is full (no space left on device). What was stored "
                "before is intact; free some space, then finish the run with `vpnlab run --resume` on "
                "its results directory, or write its report with `vpnlab report`", EXIT_DISK_FULL)
    if isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorcode", 0) & 0xFF in DAMAGED:
        return f"the results store is damaged: {exc}", EXIT_BAD_STORE
    return None  # anything else is a bug to see whole


DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}  # damage met after the check (a store changed meanwhile)


# What `explain` may explain: what the CLI catches to ask it.
STORAGE_ERRORS = (OSError, sqlite3.DatabaseError)
