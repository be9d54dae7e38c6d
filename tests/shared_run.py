"""One run shared by several tests (a module-scoped fixture), held to what conftest holds each test
to: it runs no program that no declaration names, leaves no namespace of ours behind and leaves the
default namespace as it found it. A module-scoped fixture runs before the function-scoped autouse
check of its first test has opened that test's log, so it checks itself."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

import execlog
from conftest import LIBRARY_PROBES, _declared, default_namespace_snapshot, our_namespaces, settled
from declared import programs


@contextlib.contextmanager
def held_like_a_test(folder: Path):
    """Run the body as conftest runs a test with `no_leftovers`, with its own exec log in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "exec.log"
    before_ns = our_namespaces()
    before = default_namespace_snapshot()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VPNLAB_EXEC_LOG", str(log))
        patch.setattr(execlog, "log_path", str(log))
        yield
    ran = set()
    if log.exists():
        for line in log.read_text().splitlines():
            ran |= programs(json.loads(line))
    undeclared = sorted(ran - _declared() - LIBRARY_PROBES)
    assert not undeclared, f"programs run but declared nowhere (add them where they are used, or to tests/needs.py): {undeclared}"
    left = settled(lambda: our_namespaces() - before_ns)  # as no_leftovers: another test's killed run
    assert not left, f"namespaces left behind: {sorted(left)}"
    assert default_namespace_snapshot() == before, "the default namespace changed"
