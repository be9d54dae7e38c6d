"""File transfers over real servers through real tunnels, and the data sets they move."""

import sqlite3
import zlib
from pathlib import Path

import pytest

from vpnlab.capabilities import detect
from vpnlab.plan import check_plan, make_plan
from vpnlab.runner import Runner
from vpnlab.study import parse_study
from vpnlab.workloads import datasets


@pytest.mark.parametrize("kind,compressible", [("text", True), ("random", False), ("archive", False),
                                               ("image", False)])
def test_data_sets_compress_as_their_kind_says(tmp_path, kind, compressible):
    path = datasets.make(tmp_path, kind, 1 << 20)
    data = path.read_bytes()
    assert len(data) == 1 << 20
    ratio = len(data) / len(zlib.compress(data, 1))
    assert (ratio > 2) if compressible else (ratio < 1.05)
    assert datasets.make(tmp_path, kind, 1 << 20).read_bytes() == data  # same bytes again


@pytest.mark.integration
def test_every_protocol_through_a_tunnel_and_compression_helps_only_text(tmp_path, no_leftovers):
    study = parse_study("""
name: transfers
repetitions: 2
vpns: [{driver: wireguard}, {driver: openvpn, options: {compression: lz4-v2}}]
links: [{rate_mbit: 20}]
workloads:
  - {kind: transfer, protocol: [http, https, ftp, ssh], data: random, size: 1M}
  - {kind: transfer, protocol: http, data: text, size: 4M}
  - {kind: transfer, protocol: http, data: random, size: 4M}
""")
    plan = make_plan(study)
    caps = detect()
    assert check_plan(plan, caps) == {}
    Runner(plan, tmp_path, caps, progress=False).run()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = dict(db.execute("SELECT vpn_label || ' ' || workload_label, status || ' ' || coalesce(failure, '')"
                             " FROM scenarios"))
    rate = dict(db.execute("SELECT sc.vpn_label || ' ' || sc.workload_label, avg(s.value) FROM samples s"
                           " JOIN scenarios sc ON sc.id = s.scenario_id WHERE s.metric = 'throughput_mbps'"
                           " GROUP BY 1"))
    db.close()
    assert all(v.startswith("done") for v in status.values()), status
    compressed = "openvpn aes-256-gcm udp lz4-v2"
    # on a 20 Mbit/s link, only compression can carry more than 20 Mbit/s of file data, and only for text
    assert rate[f"{compressed} http-text-4M"] > 21
    assert rate[f"{compressed} http-random-4M"] < 20
    assert rate["wireguard http-text-4M"] < 20
    assert not list(Path("/var/tmp").glob("vpnlab-*-data"))  # the generated files went with the run
