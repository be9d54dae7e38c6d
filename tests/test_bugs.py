"""A bug in vpnlab (not bad input, not a signal, not a full disk) ends a command with one message
naming the bug and where it happened, exit 70, and its traceback kept in a file for the report."""

import re
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from vpnlab.cli import run as run_cli
from vpnlab.cli.console import EXIT_BUG, user_errors

STORE = Path(__file__).parent.parent / "runs" / "taneja-2019"
# The report's writer replaced by one that fails as a bug would, in a real `vpnlab report` process.
BROKEN_REPORT = """
import sys
import vpnlab.report.html as html

def write(*args, **kwargs):
    raise KeyError("a scenario the report did not expect")

html.write = write
from vpnlab.cli import app
sys.argv = ["vpnlab", "report", sys.argv[1]]
app()
"""


def traceback_file(stderr: str) -> Path:
    found = re.search(r"its traceback is in (\S+)", stderr)
    assert found, stderr
    return Path(found.group(1))


def test_a_bug_is_one_message_with_its_place_and_the_traceback_in_a_file(capsys):
    @user_errors
    def command():
        return {}["missing"]

    with pytest.raises(typer.Exit) as ended:
        command()
    stderr = capsys.readouterr().err
    assert ended.value.exit_code == EXIT_BUG == 70
    assert "vpnlab failed on a bug" in stderr and "KeyError" in stderr and "'missing'" in stderr, stderr
    assert "at console.py:" in stderr, stderr  # where: the deepest frame in vpnlab (the wrapper, here)
    assert "Traceback" not in stderr, stderr
    kept = traceback_file(stderr)
    try:
        assert "Traceback" in kept.read_text() and "return {}[\"missing\"]" in kept.read_text()
    finally:
        kept.unlink()


def test_typer_exits_pass_through_unchanged():
    @user_errors
    def command():
        raise typer.Exit(1)

    with pytest.raises(typer.Exit) as ended:
        command()
    assert ended.value.exit_code == 1


def test_a_report_command_that_fails_on_a_bug_exits_70_without_a_traceback(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(STORE, results)
    proc = subprocess.run([sys.executable, "-c", BROKEN_REPORT, str(results)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == EXIT_BUG, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "KeyError" in proc.stderr, proc.stderr
    assert "results.py:" in proc.stderr, proc.stderr  # where: the deepest frame in vpnlab (the report command)
    kept = traceback_file(proc.stderr)
    try:
        assert "a scenario the report did not expect" in kept.read_text()
    finally:
        kept.unlink()


def test_a_run_whose_report_fails_on_a_bug_says_the_samples_are_kept(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    shutil.copytree(STORE, results)
    with lzma.open(results / "results.sqlite.xz") as packed:  # a run's store as it leaves it: not compressed
        (results / "results.sqlite").write_bytes(packed.read())
    (results / "results.sqlite.xz").unlink()
    before = (results / "results.sqlite").read_bytes()

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("vpnlab.report.html.write", broken)
    with pytest.raises(typer.Exit) as ended:
        run_cli.finish_run(results)
    stderr = capsys.readouterr().err
    assert ended.value.exit_code == EXIT_BUG
    assert "every sample is stored" in stderr and f"vpnlab report {results}" in stderr.replace("\n", ""), stderr
    assert (results / "results.sqlite").read_bytes() == before  # the run's record is left as it was
    traceback_file(stderr).unlink()
