"""Every command keeps its word (issue 37): reads never write, outputs never clobber, names cannot
forge output. Each case sets up the real condition (a 0-byte file, a symbolic link, a device node
made with mknod in a private tmpfs, a FIFO, a read-only bind mount) and checks the exit code, the
message, that no traceback was printed, and that the user's files kept their bytes and mtimes."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from test_results_dir import invoke, make_store, tree
from vpnlab.core.errors import StudyError
from vpnlab.hosts.inventory import load_inventory, select
from vpnlab.plan.scenarios import make_plan
from vpnlab.store.results_dir import LOCK_NAME
from vpnlab.store import SCHEMA_VERSION, Store
from vpnlab.plan.study import parse_study

VPNLAB = [sys.executable, "-m", "vpnlab"]
TWO = """
name: two
repetitions: 3
vpns: [{driver: none}, {driver: wireguard, label: wg}, {driver: wireguard, label: wg-1400, options: {mtu: 1400}}]
links: [{rate_mbit: 100}]
workloads: [{kind: tcp, duration_s: 1, omit_s: 0}]
"""
PLAIN = "name: t\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n"


def vpnlab(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


def refused(result, *says) -> None:
    """Exit 2 with each of `says` in the message (whatever the console's width), no traceback."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.exit_code == 2 if hasattr(result, "exit_code") else result.returncode == 2, output
    message = " ".join(result.stderr.split())
    for text in says:
        assert " ".join(str(text).split()) in message, f"{text!r} not in\n{result.stderr}"


def store_of(directory: Path, study: str = TWO, reps: int = 3) -> Path:
    """A results directory with every scenario of `study` measured `reps` times (through the store)."""
    directory.mkdir(parents=True)
    store = Store.open_dir(directory)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name=parse_study(study).name, study_text=study)
    for i, scenario in enumerate(make_plan(parse_study(study)).scenarios):
        store.add_scenario(scenario)
        for rep in range(1, reps + 1):
            store.record_repetition(run, scenario.id, rep, {"throughput_mbps": 90.0 - 5 * i + rep % 2}, {}, [])
        store.set_status(scenario.id, "completed")
    store.finish_run(run, "completed")
    store.close()
    return directory


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return store_of(tmp_path_factory.mktemp("safety") / "results")


@pytest.fixture
def mounts():
    """Private mounts under /tmp: `tmpfs()` (devices allowed) and `read_only(directory)` (a
    read-only bind mount of it); unmounted and removed afterwards whatever happens."""
    made = []

    def place() -> Path:
        where = Path(tempfile.mkdtemp(prefix="vpnlab-safety-", dir="/tmp"))
        made.append(where)
        return where

    def tmpfs() -> Path:
        where = place()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,dev", "vpnlab-safety", str(where)], check=True)
        return where

    def read_only(directory: Path) -> Path:
        where = place()
        subprocess.run(["mount", "--bind", str(directory), str(where)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True)
        return where

    yield type("Mounts", (), {"tmpfs": staticmethod(tmpfs), "read_only": staticmethod(read_only)})
    for where in reversed(made):
        if str(where) in Path("/proc/mounts").read_text():
            subprocess.run(["umount", str(where)], check=True)
        where.rmdir()


# -- reads never write -----------------------------------------------------------------------

READERS = {
    "show": lambda d: ["show", d],
    "export": lambda d: ["export", d, "--format", "json"],
    "stats": lambda d: ["stats", d],
    "report": lambda d: ["report", d],
    "compare": lambda d: ["compare", d, d],
    "resume dry run": lambda d: ["run", "--resume", d, "--dry-run"],
}


def test_reads_refuse_an_empty_file_and_write_nothing(tmp_path):
    directory = tmp_path / "results"
    directory.mkdir()
    (directory / "results.sqlite").touch()  # a real 0-byte file
    os.utime(directory / "results.sqlite", ns=(1_000_000_000, 1_000_000_000))
    before = tree(directory)
    for name, command in READERS.items():
        refused(invoke(*command(directory)), "not a vpnlab results store", directory / "results.sqlite")
        assert tree(directory) == before, name  # still 0 bytes, same mtime, no -wal, -shm nor report
    proc = vpnlab("show", directory)  # the real program, in a process of its own
    refused(proc, "results.sqlite: an empty file, not a vpnlab results store; left untouched")


def _older(directory: Path) -> None:
    """The store as vpnlab wrote it at results schema 3 (before real hosts and the as-run record)."""
    db = sqlite3.connect(directory / "results.sqlite")
    for table in ("scenarios", "runs"):
        db.execute(f"ALTER TABLE {table} DROP COLUMN hosts")
    db.execute("ALTER TABLE scenarios DROP COLUMN as_run")
    db.execute("ALTER TABLE scenarios DROP COLUMN baseline")  # (schema 6)
    db.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()


def test_an_older_store_is_refused_untouched_until_upgraded_with_a_copy_kept(tmp_path):
    directory = tmp_path / "results"
    make_store(directory)
    _older(directory)
    before = tree(directory)
    for name, command in READERS.items():
        refused(invoke(*command(directory)), "an older store (results schema 3", f"vpnlab upgrade {directory}")
        assert tree(directory) == before, name
    taken = directory / "results.sqlite.v3.bak"
    taken.write_text("a copy the user made earlier\n")  # a backup name in use is never overwritten
    result = invoke("upgrade", directory)
    assert result.exit_code == 0, result.output
    assert f"upgraded from results schema 3 to {SCHEMA_VERSION}" in " ".join(result.stdout.split())
    assert taken.read_text() == "a copy the user made earlier\n"
    backup = directory / "results.sqlite.v3.bak.1"
    with sqlite3.connect(f"file:{backup}?mode=ro", uri=True) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("3",)
        assert db.execute("SELECT count(*) FROM samples").fetchone() == (2,)
    assert invoke("show", directory).exit_code == 0
    again = invoke("upgrade", directory)
    assert again.exit_code == 0 and "nothing changed" in again.stdout
    assert not (directory / f"results.sqlite.v{SCHEMA_VERSION}.bak").exists()


def test_upgrade_waits_for_no_run(tmp_path):
    directory = tmp_path / "results"
    make_store(directory)
    _older(directory)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # held as a live run holds it
    before = tree(directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused(invoke("upgrade", directory), "another vpnlab run", "is writing into this directory")
    finally:
        os.close(fd)
    assert tree(directory) == before


@pytest.mark.integration
def test_resuming_an_older_store_keeps_a_copy_first(tmp_path, no_leftovers):
    directory = tmp_path / "results"
    make_store(directory)  # its two repetitions are all the study asks: the resumed run measures nothing
    _older(directory)
    result = invoke("run", "--resume", directory, "--no-progress", "--backend", "netns")
    assert result.exit_code == 0, result.output
    assert "the store as it was is kept in" in " ".join(result.stderr.split())
    with sqlite3.connect(f"file:{directory / 'results.sqlite.v3.bak'}?mode=ro", uri=True) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("3",)
        assert db.execute("SELECT count(*) FROM samples").fetchone() == (2,)
    assert invoke("show", directory).exit_code == 0


def test_a_store_in_a_read_only_directory_is_readable(results, tmp_path, mounts):
    view = mounts.read_only(results)
    before = tree(results)
    for command in (["show", view], ["export", view, "--table", "summary"], ["stats", view],
                    ["compare", view, view], ["report", view, "--out", tmp_path / "report.html"]):
        result = invoke(*command)
        assert result.exit_code == 0, (command, result.output)
    assert (tmp_path / "report.html").stat().st_size > 10_000
    # its default report.html cannot be written there: said, not a traceback
    refused(invoke("report", view), f"{view}/report.html", "cannot write", "read-only")
    assert tree(results) == before


# -- outputs never clobber -------------------------------------------------------------------

WRITERS = {  # the command, and the option that names its output
    "export -o": (lambda d: ["export", d, "--table", "summary"], "--output"),
    "report --out": (lambda d: ["report", d], "--out"),
    "compare --html": (lambda d: ["compare", d, d], "--html"),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_an_existing_file_is_replaced_only_with_force_and_atomically(writer, results, tmp_path):
    command, option = WRITERS[writer]
    mine = tmp_path / "mine.txt"
    mine.write_text("my own notes\n")
    mine.chmod(0o640)
    before = tree(tmp_path)
    refused(invoke(*command(results), option, mine), f"{option} {mine}: exists", "--force")
    assert tree(tmp_path) == before
    inode = mine.stat().st_ino
    result = invoke(*command(results), option, mine, "--force")
    assert result.exit_code == 0, result.output
    assert mine.read_text() != "my own notes\n" and mine.stat().st_size > 100
    assert mine.stat().st_ino != inode, "not replaced by a rename"
    assert stat.S_IMODE(mine.stat().st_mode) == 0o640, "its permissions were not kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"], "something left beside it"


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symbolic_link_is_neither_followed_nor_replaced(writer, results, tmp_path):
    command, option = WRITERS[writer]
    target = tmp_path / "precious.txt"
    target.write_text("not to be overwritten\n")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    before = tree(tmp_path)
    for force in ((), ("--force",)):
        refused(invoke(*command(results), option, link, *force), f"{option} {link}: a symbolic link")
        assert tree(tmp_path) == before and link.is_symlink()


def test_the_default_report_is_not_written_through_a_link(tmp_path):
    directory = tmp_path / "results"
    make_store(directory)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("mine\n")
    (directory / "report.html").symlink_to(elsewhere)
    refused(invoke("report", directory), "report.html: a symbolic link")
    assert elsewhere.read_text() == "mine\n" and (directory / "report.html").is_symlink()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_device_node_is_written_to_never_replaced(writer, results, mounts):
    command, option = WRITERS[writer]
    disk = mounts.tmpfs()
    null = disk / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a real character device: /dev/null's numbers
    for force in ((), ("--force",)):
        result = invoke(*command(results), option, null, *force)
        assert result.exit_code == 0, result.output
        assert stat.S_ISCHR(null.lstat().st_mode) and null.lstat().st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in disk.iterdir()) == ["null"]


def test_a_fifo_is_written_to_never_replaced(results, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    proc = vpnlab("export", results, "--table", "summary", "-o", fifo)
    reader.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert received and received[0].startswith("scenario_id,"), received
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_dash_is_standard_output(results, tmp_path):
    proc = vpnlab("export", results, "--table", "summary", "-o", "-", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("scenario_id,"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_output_paths_say_why_and_leave_nothing(results, tmp_path, mounts):
    (tmp_path / "a-file").write_text("x\n")
    read_only = mounts.read_only(mounts.tmpfs())
    cases = {
        tmp_path / "missing" / "out.html": "no such directory",
        tmp_path / "a-file" / "out.html": "Not a directory",
        tmp_path: "a directory; name a file in it",
        read_only / "out.html": "(a read-only filesystem)",
        tmp_path / ("x" * 300): "File name too long",
        Path("/proc/x"): "on the kernel's proc filesystem",
        results / "results.sqlite": "the results store this command reads",
    }
    before = tree(tmp_path)
    for path, says in cases.items():
        for command, option in WRITERS.values():
            refused(invoke(*command(results), option, path, "--force"), f"{option} {path}", says)
    assert tree(tmp_path) == before  # no .partial file anywhere
    assert not list(results.glob(".*partial")) and not list(Path("/tmp").glob(f".{'x' * 200}*"))


# -- run --out -------------------------------------------------------------------------------

def test_run_refuses_an_empty_out_and_kernel_filesystems_dry_or_not(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(PLAIN)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for dry in ((), ("--dry-run",)):
        refused(vpnlab("run", study, "--out", "", *dry, cwd=cwd), "--out: an empty path")
        refused(vpnlab("run", study, "--out", "/proc/vpnlab-results", *dry, cwd=cwd),
                "--out /proc/vpnlab-results: on the kernel's proc filesystem: not a place for results")
    assert list(cwd.iterdir()) == []


def test_a_dry_run_checks_out_as_the_run_does(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(PLAIN)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "thesis.tex").write_text("mine\n")
    before = tree(taken)
    real, dry = (invoke("run", study, "--out", taken, *extra) for extra in ((), ("--dry-run",)))
    for result in (real, dry):
        refused(result, f"--out {taken}: the directory exists and holds files that are not a vpnlab run")
    assert tree(taken) == before


# -- names cannot forge output ---------------------------------------------------------------

def _forged(directory: Path) -> None:
    """A store (an older vpnlab's, or one edited by hand) whose labels carry markup and escapes."""
    db = sqlite3.connect(directory / "results.sqlite")
    with db:
        db.execute("UPDATE scenarios SET vpn_label = '[red]x\x1b[31m' || vpn_label, link_label = 'l\nforged row'")
        db.execute("UPDATE runs SET study_name = 'two\x1b]0;title\x07'")
    db.close()


def test_text_from_a_store_is_printed_as_it_is(tmp_path):
    directory = store_of(tmp_path / "results")
    _forged(directory)
    before = tree(directory)
    for command in (["show", directory], ["stats", directory], ["compare", directory, directory]):
        proc = vpnlab(*command)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, command
        assert "[red]x\\x1b[31m" in proc.stdout and "l\\nforged row" in proc.stdout, (command, proc.stdout)
    assert "two\\x1b]0;title\\x07" in vpnlab("show", directory).stdout
    assert tree(directory) == before


def test_a_failure_a_run_prints_is_printed_as_it_is(tmp_path):
    """A daemon's log in a failure reason carries brackets (tailscaled's once held '[/Oqgq]', which
    rich read as a closing tag: the run ended on the bug handler) and escapes; the run prints them."""
    import io
    from rich.console import Console
    from vpnlab.machines.capabilities import detect
    from vpnlab.run.runner import Runner

    plan = make_plan(parse_study(PLAIN))
    reason = "its log: [/Oqgq] [bold]x\x1b[31m\nnext line"
    printed = io.StringIO()
    runner = Runner(plan, tmp_path / "out", detect(), console=Console(file=printed, width=300), progress=False,
                    refused={s.id: reason for s in plan.scenarios})  # each fails before anything is made
    assert runner.run() == "completed-with-failures"
    assert "its log: [/Oqgq] [bold]x\\x1b[31m\nnext line" in printed.getvalue(), printed.getvalue()
    assert "\x1b" not in printed.getvalue()


def test_stats_pair_names_an_unknown_label_and_the_known_ones(results):
    refused(invoke("stats", results, "--pair", "wg|wireguard"),
            "--pair: no configuration is labelled 'wireguard'; the study's labels: ", "'wg'", "'wg-1400'")
    assert invoke("stats", results, "--pair", "wg|wg-1400").exit_code == 0


BAD_HOSTS = """\
all:
  hosts:
    good: {ansible_host: 198.18.0.2}
    "b;touch x": {ansible_host: 198.18.0.3}
    proxy: {ansible_host: "-oProxyCommand=touch /tmp/vpnlab-safety-pwned"}
    coloured: {ansible_host: "198.18.0.4\\e[31m"}
"""


def test_inventory_hosts_ssh_would_misread_are_refused_before_connecting(tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(BAD_HOSTS)
    for host, says in (("b;touch x", "host name 'b;touch x'"), ("proxy", "'-oProxyCommand=touch"),
                       ("coloured", "address (ansible_host) '198.18.0.4\\x1b[31m'")):
        refused(invoke("hosts", "doctor", "-i", inventory, "--limit", host), says, "vpnlab does not connect to it")
        with pytest.raises(StudyError, match="vpnlab does not connect to it"):  # as `run --inventory` picks them
            select(load_inventory(inventory), ["good", host], inventory)
    listed = vpnlab("hosts", "list", "-i", inventory)  # listing connects to nothing: shown, escaped
    assert listed.returncode == 0 and "\x1b" not in listed.stdout, listed.stderr
    assert "refused: SSH would misread it" in listed.stdout and "198.18.0.4\\x1b[31m" in listed.stdout
    assert not Path("/tmp/vpnlab-safety-pwned").exists() and sorted(os.listdir(tmp_path)) == ["inventory.yml"]


def test_executable_inventories_are_said_to_run_as_programs():
    for command in (["hosts", "list", "--help"], ["run", "--help"], ["doctor", "--help"]):
        text = " ".join(vpnlab(*command).stdout.replace("│", " ").split())
        assert "Ansible runs it as a program, as you (root)" in text, command
    page = (Path(__file__).parent.parent / "docs" / "results-and-safety.md").read_text()
    assert "dynamic inventory" in page and "as root" in page


# -- inputs read as a careful parser would -------------------------------------------------------

def test_a_fifo_study_or_inventory_is_refused_at_once(tmp_path):
    fifo = tmp_path / "study.yaml"
    os.mkfifo(fifo)
    hosts_study = tmp_path / "hosts.yaml"
    hosts_study.write_text(PLAIN + "hosts: {client: a, gateway: b}\n")
    # a read of the FIFO would block for ever (no writer): each call's timeout fails the test then
    for command in (["run", fifo, "--dry-run"], ["run", fifo], ["doctor", fifo]):
        refused(vpnlab(*command, timeout=60), f"{fifo}: not a regular file (a FIFO)")
    refused(vpnlab("run", hosts_study, "--inventory", fifo, "--dry-run", timeout=60),
            f"inventory {fifo}: not a regular file or directory (a FIFO)")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_doctor_checks_backend_as_run_does(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(PLAIN)
    for command in (["doctor", "--backend", "qemu"], ["doctor", study, "--backend", "qemu"],
                    ["run", study, "--backend", "qemu", "--dry-run"]):
        refused(invoke(*command), "--backend: expected one of auto, netns, vm, got 'qemu'")
