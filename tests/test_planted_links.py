"""No path vpnlab opens in a results directory follows a link it did not make: a directory holding
a symbolic link, a hard link or a FIFO where vpnlab writes is refused (exit 2) with the reason, and
the link's target is left as it was (as root, it could be any file on the machine)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_results_dir import STUDY, make_store
from vpnlab.core.files import planted, write_own

VPNLAB = [sys.executable, "-m", "vpnlab"]
RUN = ("--no-progress", "--backend", "netns")
PLANTED = [".vpnlab-reserve", ".vpnlab-lock", "study.yaml", "results.sqlite-wal", "report.html",
           "logs/s1/rep3/iperf3.log"]


def vpnlab(*args):
    return subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, timeout=120)


def victim(tmp_path: Path) -> tuple[Path, str]:
    target = tmp_path / "victim.txt"
    target.write_text("the user's own file\n")
    return target, digest(target)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def study_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(STUDY)
    return path


@pytest.mark.parametrize("name", PLANTED)
def test_resume_refuses_a_directory_with_a_planted_symlink(tmp_path, name):
    results = tmp_path / "results"
    make_store(results)
    target, before = victim(tmp_path)
    (results / name).parent.mkdir(parents=True, exist_ok=True)
    (results / name).unlink(missing_ok=True)  # study.yaml is there already
    (results / name).symlink_to(target)
    proc = vpnlab("run", "--resume", results, *RUN)
    assert proc.returncode == 2, proc.stderr
    assert f"{results / name} (a symbolic link to {target})" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr and digest(target) == before
    assert (results / name).is_symlink()


@pytest.mark.parametrize("name", [".vpnlab-lock", ".vpnlab-reserve"])
def test_a_new_run_refuses_an_otherwise_empty_directory_holding_a_planted_link(tmp_path, name):
    results = tmp_path / "results"
    results.mkdir()
    target, before = victim(tmp_path)
    (results / name).symlink_to(target)
    for dry in ((), ("--dry-run",)):
        proc = vpnlab("run", study_file(tmp_path), "--out", results, *RUN, *dry)
        assert proc.returncode == 2, proc.stderr
        assert "a symbolic link" in proc.stderr and digest(target) == before


def test_a_hard_link_in_place_of_the_lock_is_refused(tmp_path):
    results = tmp_path / "results"
    make_store(results)
    target, before = victim(tmp_path)
    os.link(target, results / ".vpnlab-lock")
    proc = vpnlab("run", "--resume", results, *RUN)
    assert proc.returncode == 2, proc.stderr
    assert "a hard link" in proc.stderr and digest(target) == before


def test_upgrade_refuses_a_planted_lock(tmp_path):
    results = tmp_path / "results"
    make_store(results)
    target, before = victim(tmp_path)
    (results / ".vpnlab-lock").symlink_to(target)
    proc = vpnlab("upgrade", results)
    assert proc.returncode == 2, proc.stderr
    assert "a symbolic link" in proc.stderr and digest(target) == before


def test_what_is_planted_is_found_and_nothing_else(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "log").write_text("a log of vpnlab's\n")
    (tmp_path / "results.sqlite").write_text("")
    assert planted(tmp_path) == []
    (tmp_path / "a" / "b" / "link").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "a" / "fifo")
    os.link(tmp_path / "results.sqlite", tmp_path / "other-name")
    found = sorted(planted(tmp_path))
    assert len(found) == 4  # the link, the FIFO and both names of the hard-linked file
    assert any("a symbolic link to /etc/passwd" in f for f in found) and any("a FIFO" in f for f in found)
    assert sum("a hard link" in f for f in found) == 2


def test_writing_a_file_of_its_own_replaces_a_link_and_never_writes_through_it(tmp_path):
    target, before = victim(tmp_path)
    (tmp_path / "study.yaml").symlink_to(target)
    write_own(tmp_path / "study.yaml", "name: s\n")
    assert digest(target) == before and not (tmp_path / "study.yaml").is_symlink()
    assert (tmp_path / "study.yaml").read_text() == "name: s\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml", "victim.txt"]  # no temporary file left
