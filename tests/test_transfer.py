"""File transfers over real servers through real tunnels, and the data sets they move."""

import sqlite3
import subprocess
import zlib
from pathlib import Path

import pytest

from conftest import run_here
from vpnlab.machines.capabilities import detect
from vpnlab.plan.scenarios import make_plan
from vpnlab.run.runner import Runner
from vpnlab.plan.study import parse_study
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


def _transfers(tmp_path, workloads: str) -> tuple[dict, dict]:
    """Each scenario's status and mean goodput (by VPN and workload label), from a run through
    WireGuard and OpenVPN with LZ4 compression on a 20 Mbit/s link."""
    run_here(parse_study(f"""
name: transfers
repetitions: 1
vpns: [{{driver: wireguard}}, {{driver: openvpn, options: {{compression: lz4-v2}}}}]
links: [{{rate_mbit: 20}}]
workloads:
{workloads}"""), tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = dict(db.execute("SELECT vpn_label || ' ' || workload_label, status || ' ' || coalesce(failure, '')"
                             " FROM scenarios"))
    rate = dict(db.execute("SELECT sc.vpn_label || ' ' || sc.workload_label, avg(s.value) FROM samples s"
                           " JOIN scenarios sc ON sc.id = s.scenario_id WHERE s.metric = 'throughput_mbps'"
                           " GROUP BY 1"))
    db.close()
    assert all(v.startswith("done") for v in status.values()), status
    assert not list(Path("/var/tmp").glob("vpnlab-*-data"))  # the generated files went with the run
    return status, rate


@pytest.mark.integration
def test_every_protocol_through_a_tunnel(tmp_path, no_leftovers):
    status, rate = _transfers(tmp_path, "  - {kind: transfer, protocol: [http, https, ftp, ssh], data: random, size: 1M}\n")
    assert len(status) == 8 and all(rate[scenario] > 1 for scenario in status), rate


@pytest.mark.integration
def test_compression_helps_only_text(tmp_path, no_leftovers):
    _, rate = _transfers(tmp_path, "  - {kind: transfer, protocol: http, data: [text, random], size: 4M}\n")
    compressed = "openvpn aes-256-gcm udp lz4-v2"
    # on a 20 Mbit/s link, only compression can carry more than 20 Mbit/s of file data, and only for text
    assert rate[f"{compressed} http-text-4M"] > 21
    assert rate[f"{compressed} http-random-4M"] < 20
    assert rate["wireguard http-text-4M"] < 20


def test_several_files_totalling_a_size_are_split_evenly_and_keep_old_ids():
    one = parse_study("name: t\nvpns: [{driver: none}]\nworkloads: [{kind: transfer, size: 1M}]\n")
    old_key = make_plan(one).scenarios[0].key["workload"]
    assert "files" not in old_key                                  # ids of one-file scenarios unchanged
    many = parse_study("name: t\nvpns: [{driver: none}]\nworkloads: [{kind: transfer, size: 1000, files: 3}]\n")
    spec = many.workloads[0]
    assert spec.sizes == [333, 333, 334] and spec.label == "http-random-1000-in-3"
    from vpnlab.core.errors import StudyError

    with pytest.raises(StudyError, match=r"workloads\[0\].*each file needs a byte"):
        parse_study("name: t\nvpns: [{driver: none}]\nworkloads: [{kind: transfer, size: 2, files: 3}]\n")


def test_the_files_of_one_transfer_differ(tmp_path):
    first, second = datasets.make(tmp_path, "random", 4096, 0), datasets.make(tmp_path, "random", 4096, 1)
    assert first != second and first.read_bytes() != second.read_bytes()


@pytest.mark.integration
def test_several_files_over_each_protocol_in_one_session(tmp_path, no_leftovers):
    study = parse_study("""
name: files
repetitions: 1
vpns: [{driver: wireguard}]
workloads:
  - {kind: transfer, protocol: [http, ftp, ssh], data: text, size: 600K, files: 3}
""")
    plan = make_plan(study)
    Runner(plan, tmp_path, detect(), progress=False).run()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = dict(db.execute("SELECT workload_label, status || ' ' || coalesce(failure, '') FROM scenarios"))
    raw = dict(db.execute("SELECT sc.workload_label, r.output FROM raw_outputs r JOIN scenarios sc ON sc.id = r.scenario_id"
                          " WHERE r.repetition > 0 AND r.tool IN ('curl', 'scp')"))
    db.close()
    assert all(v.startswith("done") for v in status.values()), status
    assert raw["http-text-600K-in-3"].count("204800 ") == 3          # curl: three whole files, one command
    assert raw["ftp-text-600K-in-3"].count("204800 ") == 3
    assert raw["ssh-text-600K-in-3"].count("root@") == 3              # scp: three sources into one folder
    # each server started (sshd after two ssh-keygen) before the measurement's window opened: the CPU,
    # the WAN and the round trip under load are the transfer's, not its set-up's
    for server in ("nginx", "vsftpd", "sshd"):
        [log] = tmp_path.glob(f"logs/*/rep1/{server}.log")
        window = _born(log.with_name("rtt-under-load.log"))
        if not window:
            pytest.skip(f"this filesystem keeps no birth time: {tmp_path}")
        assert 0 < _born(log) <= window, server


def _born(path: Path) -> float:
    return float(subprocess.run(["stat", "-c", "%.9W", path], capture_output=True, text=True, check=True).stdout)
