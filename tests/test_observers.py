"""What is watched beside a workload, measured for real: latency under load, frames on the wire."""

import sqlite3
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

STUDY = """
name: observers
repetitions: 1
vpns: [{driver: none}, {driver: wireguard}]
links: [{rate_mbit: 20}]
workloads:
  - {kind: tcp, duration_s: 2, omit_s: 0}
  - {kind: ping, count: 10, interval_s: 0.05}
"""


def test_latency_under_load_and_bytes_on_the_wire(tmp_path, no_leftovers):
    (tmp_path / "s.yaml").write_text(STUDY)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "vpnlab", "run", tmp_path / "s.yaml", "--out", out, "--no-progress",
                    "--backend", "netns"], check=True, capture_output=True, timeout=300)
    db = sqlite3.connect(out / "results.sqlite")
    values = {(vpn, kind, metric): value for vpn, kind, metric, value in db.execute(
        "SELECT sc.vpn, sc.workload, s.metric, s.value FROM samples s JOIN scenarios sc ON sc.id = s.scenario_id")}
    db.close()
    for vpn in ("none", "wireguard"):
        # a TCP flow queues in the 20 Mbit/s bottleneck's buffer: the round trip grows several-fold
        assert values[(vpn, "tcp", "rtt_under_load_ms")] > 3 * values[(vpn, "ping", "rtt_avg_ms")] + 1
        assert 0 <= values[(vpn, "tcp", "rtt_under_load_unanswered_pct")] < 50  # what the queue dropped
        assert values[(vpn, "tcp", "wan_fragments")] == 0
        assert values[(vpn, "tcp", "wan_avg_packet_bytes")] <= 1514  # frames, not offload super-packets
    # every payload byte costs more on the wire through the tunnel: at least its 60-byte header per
    # full-sized packet (the acknowledgements come on top)
    plain, tunnelled = values[("none", "tcp", "wan_bytes_per_byte")], values[("wireguard", "tcp", "wan_bytes_per_byte")]
    assert 1.0 < plain < tunnelled
    assert tunnelled - plain > 60 / 1500 * 0.8
