"""Parsers, on real output captured from the tools."""

import json

import pytest

from conftest import DATA
from vpnlab.errors import MeasurementError
from vpnlab.workloads import iperf, ping, tcp, udp


def test_iperf3_tcp():
    values = tcp.parse(json.loads((DATA / "iperf3-3.12-tcp.json").read_text()))
    assert values["throughput_mbps"] == pytest.approx(295.416359, rel=1e-6)
    assert values["retransmits"] == 13641


def test_iperf3_udp_takes_receiver_figures():
    values = udp.parse(json.loads((DATA / "iperf3-3.12-udp.json").read_text()))
    assert values["throughput_mbps"] == pytest.approx(49.96246137, rel=1e-6)
    assert values["udp_sent_mbps"] == pytest.approx(49.97532612, rel=1e-6)
    assert values["udp_jitter_ms"] == pytest.approx(0.0442549, rel=1e-4)
    assert values["udp_loss_pct"] == 0


def test_iperf3_udp_without_sum_received():
    data = json.loads((DATA / "iperf3-3.12-udp.json").read_text())
    del data["end"]["sum_received"], data["end"]["sum_sent"]
    values = udp.parse(data)
    assert values["throughput_mbps"] == pytest.approx(49.975326, rel=1e-6)


def test_ping():
    values = ping.parse((DATA / "ping-ok.txt").read_text())
    assert values == {"ping_loss_pct": 0.0, "rtt_min_ms": 0.040, "rtt_avg_ms": 0.042,
                      "rtt_max_ms": 0.045, "rtt_mdev_ms": 0.002}


def test_ping_all_lost_has_loss_but_no_rtt():
    assert ping.parse((DATA / "ping-all-lost.txt").read_text()) == {"ping_loss_pct": 100.0}


def test_ping_error_is_a_measurement_error():
    with pytest.raises(MeasurementError):
        ping.parse("ping: connect: Network is unreachable")


def test_heavy_retransmission_is_flagged():
    data = json.loads((DATA / "iperf3-3.12-tcp.json").read_text())
    assert tcp.retransmit_flags(data) == ["retransmits 17.5% of segments"]
    data["end"]["sum_sent"]["retransmits"] = 0
    assert tcp.retransmit_flags(data) == []


def test_iperf3_interval_series():
    series = iperf.interval_series(json.loads((DATA / "iperf3-3.12-tcp.json").read_text()))
    assert len(series) == 3 and series[0][0] == pytest.approx(1.0, abs=0.01)
    assert all(mbps > 0 for _, mbps in series)


def test_latency_under_load_counts_the_pings_a_full_queue_lost():
    from vpnlab.observers import loaded_rtt_values

    log = """PING 198.18.1.2 (198.18.1.2) 56(84) bytes of data.
64 bytes from 198.18.1.2: icmp_seq=1 ttl=62 time=10.0 ms
64 bytes from 198.18.1.2: icmp_seq=2 ttl=62 time=40.0 ms
64 bytes from 198.18.1.2: icmp_seq=4 ttl=62 time=70.0 ms
64 bytes from 198.18.1.2: icmp_seq=4 ttl=62 time=71.0 ms (DUP!)
64 bytes from 198.18.1.2: icmp_seq=5 ttl=62 time=120.0 ms
"""
    # seq 3 lost: 1 of 5 up to the last answered; the duplicate is not another ping; seq 6, if sent, may be on its way
    values = loaded_rtt_values(log, 5.0)
    assert values["rtt_under_load_unanswered_pct"] == pytest.approx(20.0)
    assert values["rtt_under_load_ms"] == pytest.approx((10 + 40 + 70 + 120) / 4)
    header = "PING 198.18.1.2 (198.18.1.2) 56(84) bytes of data.\n"
    assert loaded_rtt_values(header, 5.0) == {"rtt_under_load_unanswered_pct": 100.0}  # a queue that dropped all
    assert loaded_rtt_values(header, 0.5) == {}  # too short to tell lost from late
    busybox = "64 bytes from 198.18.1.2: seq=0 ttl=62 time=5.0 ms\n64 bytes from 198.18.1.2: seq=2 ttl=62 time=7.0 ms\n"
    assert loaded_rtt_values(busybox, 5.0) == pytest.approx({"rtt_under_load_ms": 6.0,
                                                              "rtt_under_load_unanswered_pct": 100 / 3})
