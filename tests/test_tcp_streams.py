"""TCP with N streams as N iperf3 processes (process_per_stream), each on a port of its own, their
figures summed: iperf3 3.12 runs all streams of one process on one thread."""

import json
import sqlite3

import pytest

from conftest import run_here
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import parse_study
from vpnlab.workloads import iperf
from vpnlab.workloads.tcp import carried_bytes, parse


def stream(mbps: float, retransmits: int, intervals: list[float]) -> dict:
    return {"start": {"test_start": {"duration": 3, "omit": 0}},
            "end": {"sum_sent": {"bytes": 1000, "bits_per_second": mbps * 1e6, "retransmits": retransmits, "seconds": 3.0},
                    "sum_received": {"bytes": 900, "bits_per_second": mbps * 1e6, "seconds": 2.9}},
            "intervals": [{"sum": {"bytes": 10, "bits_per_second": v * 1e6, "end": n + 1.0, "omitted": False}}
                          for n, v in enumerate(intervals)]}


def test_streams_run_apart_are_summed_by_total_and_by_interval():
    data = iperf.merged([stream(100, 2, [90, 110, 100]), stream(50, 1, [40, 60])])
    assert parse(data) == {"throughput_mbps": pytest.approx(150), "retransmits": 3.0}
    assert iperf.interval_series(data) == [(1.0, pytest.approx(130)), (2.0, pytest.approx(170))]  # the common ones
    assert data["end"]["sum_received"]["seconds"] == 2.9 and carried_bytes(data) == 1800
    assert data["streams_as_processes"] == [100e6, 50e6]


def test_a_new_option_at_its_default_keeps_the_ids_of_stored_scenarios():
    base = "name: s\nvpns: [{driver: none}]\nworkloads: [{kind: tcp, streams: 4WHAT}]\n"
    before = make_plan(parse_study(base.replace("WHAT", ""))).scenarios[0].id
    assert make_plan(parse_study(base.replace("WHAT", ", process_per_stream: false"))).scenarios[0].id == before
    apart = make_plan(parse_study(base.replace("WHAT", ", process_per_stream: true"))).scenarios[0]
    assert apart.id != before and apart.workload.label == "tcp-P4x"


@pytest.mark.integration
def test_four_streams_as_four_processes_through_a_tunnel(tmp_path, no_leftovers):
    study = parse_study("name: streams\nrepetitions: 1\nvpns: [{driver: wireguard}]\nlinks: [{rate_mbit: 100}]\n"
                        "workloads: [{kind: tcp, duration_s: 2, omit_s: 0, streams: 4, process_per_stream: true}]\n")
    plan = run_here(study, tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    (raw,), = db.execute("SELECT output FROM raw_outputs WHERE tool = 'iperf3'").fetchall()
    values = dict(db.execute("SELECT metric, value FROM samples"))
    db.close()
    each = json.loads(raw)["streams_as_processes"]
    assert len(each) == 4 and all(v > 1e6 for v in each)  # every stream carried, each its own process
    assert values["throughput_mbps"] == pytest.approx(sum(each) / 1e6)
    assert 60 < values["throughput_mbps"] < 100  # together they fill the link, no more
    logs = sorted(p.name for p in (tmp_path / "logs" / plan.scenarios[0].id).rglob("iperf3-client-*.log"))
    assert logs == [f"iperf3-client-{n}.log" for n in range(4)]
