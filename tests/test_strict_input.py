"""Input read strictly and answered truly: no other script's digits, no duplicate key in a --set
value, no number too long for Python, paths that cannot be a results directory refused before the
dry run says yes, files at a safe mode whatever the caller's umask, names that print as written."""

import os
import stat
import subprocess
import sys

import pytest

from vpnlab.core.errors import StudyError
from vpnlab.plan import overrides
from vpnlab.tune.spec import parse_duration

VPNLAB = [sys.executable, "-m", "vpnlab"]
TINY = "name: tiny\nrepetitions: 1\nvpns: [{driver: none}]\nworkloads: [{kind: ping, count: 3, interval_s: 0.05}]\n"


def vpnlab(*args, **kwargs):
    return subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, timeout=300, **kwargs)


def refused(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "failed on a bug" not in proc.stderr
    for word in words:
        assert word in " ".join(proc.stderr.split()), proc.stderr


@pytest.mark.parametrize("budget", ["٣m", "３m", "1h٣0m"])
def test_a_budget_takes_only_ascii_digits(budget):
    with pytest.raises(ValueError):
        parse_duration(budget)
    assert parse_duration("1h30m") == 5400


def test_a_set_value_with_a_key_given_twice_is_refused():
    with pytest.raises(StudyError, match="twice|duplicate"):
        overrides.apply(TINY, ["workloads[0]={kind: ping, kind: tcp}"])
    with pytest.raises(StudyError, match="cannot read the path"):
        overrides.apply(TINY, ["workloads[٠].count=5"])


def test_a_number_too_long_for_python_is_refused_naming_the_file(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(TINY.replace("repetitions: 1", "repetitions: " + "9" * 5000))
    refused(vpnlab("run", study, "--dry-run"), f"{study}: a number of more than")


def test_out_paths_that_cannot_be_a_directory_are_refused_by_the_dry_run_too(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(TINY)
    (tmp_path / "a-file").write_text("")
    for dry in (("--dry-run",), ()):
        refused(vpnlab("run", study, "--out", tmp_path / "a-file" / "results", *dry), "is a file, not a directory")
        refused(vpnlab("run", study, "--out", tmp_path / ("x" * 300), *dry), "File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "s.yaml"]


def test_resume_with_another_out_is_refused(tmp_path):
    (tmp_path / "old").mkdir()
    refused(vpnlab("run", "--resume", tmp_path / "old", "--out", tmp_path / "new"),
            "a resumed run writes into its own directory")
    assert not (tmp_path / "new").exists()


def test_results_keep_a_safe_mode_under_umask_000(tmp_path, no_leftovers):
    study = tmp_path / "s.yaml"
    study.write_text(TINY)
    proc = vpnlab("run", study, "--out", tmp_path / "out", "--no-progress", "--backend", "netns",
                  preexec_fn=lambda: os.umask(0))
    assert proc.returncode == 0, proc.stderr
    loose = []
    for path in [tmp_path / "out", *(tmp_path / "out").rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o022:
            loose.append(f"{path.relative_to(tmp_path)} {mode:o}")
    assert not loose, loose
    assert stat.S_IMODE((tmp_path / "out" / "report.html").stat().st_mode) == 0o644


def test_emoji_codes_in_a_name_print_as_written(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(TINY.replace("name: tiny", "name: ':x: tiny :thumbs_up:'"))
    proc = vpnlab("run", study, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert ":x: tiny :thumbs_up:" in proc.stdout and "\u274c" not in proc.stdout
