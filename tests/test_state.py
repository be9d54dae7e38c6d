"""The run record: what a stale run left is torn down by exactly one vpnlab command."""

import subprocess

from vpnlab.testbed import state
from vpnlab.testbed.state import RunState, clean_stale_runs


def _runs_cleaned() -> list[str]:
    return [line for line in clean_stale_runs() if line.startswith("run ")]


def test_a_record_another_vpnlab_is_cleaning_is_left_to_it_until_that_one_dies(tmp_path, monkeypatch):
    root = tmp_path / "state"
    root.mkdir()
    monkeypatch.setattr(state, "STATE_ROOT", root)
    owner = subprocess.Popen(["true"])
    owner.wait()                                   # the crashed run: its owner is gone
    cleaner = subprocess.Popen(["sleep", "60"])    # the vpnlab that claimed its record
    leftover = tmp_path / "key"
    leftover.write_text("secret")
    record = RunState("abc123", root / f"abc123.cleaning-{cleaner.pid}", owner.pid, None, files=[str(leftover)])
    record.directory.mkdir()
    record.save()
    try:
        assert _runs_cleaned() == []
        assert leftover.exists() and record.directory.is_dir()
    finally:
        cleaner.kill()
        cleaner.wait()
    assert _runs_cleaned() == ["run abc123: 0 namespaces, 0 processes, 0 cgroups, 1 files"]
    assert not leftover.exists()
    assert list(root.iterdir()) == []
