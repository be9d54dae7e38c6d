import os
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration tests build namespaces and need root")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def our_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("vl")}


def default_namespace_snapshot() -> dict[str, str]:
    """What a run must leave exactly as it found it in the default namespace."""
    commands = {
        "addresses": ["ip", "-d", "addr"],
        "routes": ["ip", "route", "show", "table", "all"],
        "rules": ["ip", "rule"],
        "qdiscs": ["tc", "qdisc"],
        "links": ["ip", "-o", "link"],
        "nft": ["nft", "list", "ruleset"],
    }
    snap = {}
    for name, argv in commands.items():
        proc = subprocess.run(argv, capture_output=True, text=True)
        snap[name] = proc.stdout if proc.returncode == 0 else f"({argv[0]} unavailable)"
    return snap


@pytest.fixture
def no_leftovers():
    """Fails the test if it leaves a namespace of ours or changes the default namespace."""
    before_ns = our_namespaces()
    before = default_namespace_snapshot()
    yield
    assert our_namespaces() - before_ns == set(), "namespaces left behind"
    assert default_namespace_snapshot() == before, "the default namespace changed"
