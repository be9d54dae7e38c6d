"""A race with a field check, through the real CLI, on real namespaces: WireGuard (wireguard-go) without a
keepalive and with one of 2 s, the client behind a real nftables NAT that forgets an idle UDP mapping
after 4 s, and the check that the far side reaches the client after 6 s idle. Its truth is known by
construction: without a keepalive the mapping has expired when the far side pings (WireGuard's own
passive keepalive comes 10 s after the last packet the client received, after the far side stopped
pinging at 8 s), so that candidate must be dropped before the race, as unreachable; the 2 s keepalive
renews the mapping every 2 s, inside the 4 s timeout, so that one passes and races, alone, to the first
look."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from test_tune_live import vpnlab
from vpnlab.tune.race import ONE_LEFT

pytestmark = pytest.mark.integration

SPEC = """\
name: tune-field-live
link: {rate_mbit: 50}
traffic: {workload: {kind: udp, rate_mbit: 2, size: 1200, duration_s: 1}, metric: wan_bytes_per_byte}
constraints:
  field:
    - {link: {nat: masquerade, nat_udp_timeout_s: 4}, workload: {kind: reach, idle_s: 6, wait_s: 2}, require: reachable}
race: {min_rounds: 2}
space: [{driver: wireguard, mtu: null, implementation: wireguard-go, persistent_keepalive_s: [0, 2]}]
budget: 100s
"""
WITHOUT, KEEPALIVE = "wireguard wireguard-go", "wireguard keepalive-2s wireguard-go"
CHECK = "field check constraints.field[0] (reachable: reach-after-6s on 50mbit-nat4s)"
VALID = ("JOIN repetitions r ON r.scenario_id = s.scenario_id AND r.repetition = s.repetition"
         " AND COALESCE(r.failure, '') = ''")


def test_a_candidate_unreachable_behind_the_nat_is_dropped_before_the_race_and_the_keepalive_wins(tmp_path,
                                                                                                   no_leftovers):
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "out"
    started = time.monotonic()
    done = vpnlab("tune", str(tmp_path / "spec.yaml"), "--out", str(out), "--no-progress")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    (check,) = json.loads((out / "race.json").read_text())["checks"]
    db = sqlite3.connect(out / "results.sqlite")
    reached = dict(db.execute(f"SELECT c.vpn_label, s.value FROM samples s JOIN scenarios c ON c.id = s.scenario_id"
                              f" {VALID} WHERE s.metric = 'far_reachable'").fetchall())
    assert reached == {WITHOUT: 0, KEEPALIVE: 1}  # each candidate's check, measured once, stored
    rounds = dict(db.execute("SELECT scenario_id, group_concat(round) FROM repetitions GROUP BY scenario_id").fetchall())
    checked = [int(r) for s in check["scenarios"] for r in rounds[s].split(",")]
    raced = [int(r) for s, r in rounds.items() if s not in check["scenarios"] for r in r.split(",")]
    assert max(checked) < min(raced)  # the check's rounds came first
    notes = dict(db.execute("SELECT vpn_label, notes FROM scenarios WHERE workload = 'udp'").fetchall())
    per_label = dict(db.execute("SELECT c.vpn_label, count(r.repetition) FROM scenarios c LEFT JOIN repetitions r"
                                " ON r.scenario_id = c.id AND COALESCE(r.failure, '') = '' WHERE c.workload = 'udp'"
                                " GROUP BY c.id").fetchall())
    assert per_label == {"none": 2, KEEPALIVE: 2, WITHOUT: 0}  # the dropped one never raced; the other to its look
    assert f"dropped by the race before the first round: {CHECK} failed: reachable: far_reachable 0" in notes[WITHOUT]
    assert f"the race ended after round 2: {ONE_LEFT}" in notes["none"]
    said = (out / "answer.txt").read_text()
    assert f"Use {KEEPALIVE}: every other candidate failed a field check." in said
    assert f"1. {KEEPALIVE}:" in said and "passed 1 of 1 field checks" in said and "PersistentKeepalive = 2" in said
    assert f"before the first round: {WITHOUT}: {CHECK} failed" in said and "(passed 0 of 1 field checks)" in said
    shown = vpnlab("show", str(out))
    assert shown.returncode == 0 and "reach-after-6s" in shown.stdout, shown.stderr
    print(f"tune with a field check: {took:.0f} s\n{said}")
