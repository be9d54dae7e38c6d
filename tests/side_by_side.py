"""What the current-build tests share: the builds made as bootstrap.sh makes them, and what they read of a
run with Debian's build and the current one side by side (and of both in a mesh):
each implementation's scenario row (checked finished with no note), its samples, and the run's
recorded tool versions."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from vpnlab import catalog
from vpnlab.tools import gobuild


def stored_side_by_side(out: Path, implementations: set[str]) -> tuple[dict, dict[str, dict[str, list]], dict]:
    """(implementation -> scenario row, implementation -> metric -> values, tool versions), each
    scenario asserted done and without a note ('not encrypted', an overhead off its model would be one)."""
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    scenarios = {r["implementation"]: r for r in db.execute("SELECT * FROM scenarios")}
    samples = db.execute("SELECT scenario_id, metric, value FROM samples").fetchall()
    (versions,) = [json.loads(r["tool_versions"]) for r in db.execute("SELECT tool_versions FROM runs")]
    db.close()
    assert set(scenarios) == implementations
    values: dict[str, dict[str, list]] = {}
    for name, sc in scenarios.items():
        assert sc["status"] == "done", (name, sc["failure"])
        notes = [n for n in sc["notes"].split("; ") if n and not n.startswith("tunnel ends not pinned")]
        assert notes == [], (name, notes)
        values[name] = {}
        for s in samples:
            if s["scenario_id"] == sc["id"]:
                values[name].setdefault(s["metric"], []).append(s["value"])
    return scenarios, values, versions


def build_as_bootstrap_does() -> None:
    """Every declared Go build, as bootstrap.sh makes them (kept in vpnlab's cache: built once, reused);
    the first test to ask may have to build them all."""
    builds = sum(1 for tool in catalog.declared().values() if tool.go)
    made = subprocess.run([sys.executable, "-m", "vpnlab.catalog", "gobuilds"], capture_output=True, text=True,
                          timeout=builds * gobuild.BUILD_TIMEOUT_S + 60)
    assert made.returncode == 0, made.stderr


def mesh_study(driver: str, implementations: tuple[str, str]) -> str:
    """Both builds of a driver as a full mesh of three peers on 50 Mbit/s links, every pair's TCP."""
    vpns = "".join(f"  - {{driver: {driver}, options: {{implementation: {name}}}}}\n" for name in implementations)
    return (f"name: {driver}-current-mesh\ntopology: mesh\npeers: 3\nidle_window_s: 1\nrepetitions: 1\n"
            f"vpns:\n{vpns}links: [{{rate_mbit: 50}}]\n"
            "workloads: [{kind: tcp, duration_s: 2, omit_s: 0, pairs: all}]\n")


def check_mesh_of_both(out: Path, implementations: set[str]) -> None:
    """A mesh run of both builds (mesh_study): each finished its repetition, joined, carried all six
    pairs, and its measured pair's overhead is on its model."""
    db = sqlite3.connect(out / "results.sqlite")
    scenarios = dict(db.execute("SELECT implementation, id FROM scenarios"))
    failures = db.execute("SELECT failure FROM repetitions").fetchall()
    values = {name: dict(db.execute("SELECT metric, value FROM samples WHERE scenario_id = ?", (sid,)))
              for name, sid in scenarios.items()}
    pairs = {name: json.loads(db.execute("SELECT output FROM raw_outputs WHERE scenario_id = ? AND tool = 'pairs'",
                                         (sid,)).fetchone()[0]) for name, sid in scenarios.items()}
    db.close()
    assert set(scenarios) == implementations and failures == [(None,), (None,)]
    for name, mine in values.items():
        assert mine["overhead_bytes"] == mine["overhead_model_bytes"], (name, mine)
        assert mine["join_s"] > 0 and len(pairs[name]) == 6, name
        assert min(p["throughput_mbps"] for p in pairs[name].values()) > 1, (name, pairs[name])


def said_side_by_side(older: str, current: str, versions: dict, goodput: dict, seconds: int) -> float:
    """The line the side-by-side tests print (the release Debian 12 ships and the current one, each
    repetition's TCP goodput and their versions); the ratio of their means, current over the older."""
    ratio = sum(goodput[current]) / len(goodput[current]) / (sum(goodput[older]) / len(goodput[older]))
    print(f"\nTCP goodput, unshaped link, {len(goodput[current])} interleaved repetitions of {seconds} s: {older} "
          f"({versions[older]}) {[round(v) for v in goodput[older]]} Mbit/s, "
          f"{current} ({versions[current]}) {[round(v) for v in goodput[current]]} Mbit/s: ratio {ratio:.2f}")
    return ratio
