"""Parsers, on real output captured from the tools."""

import json
from types import SimpleNamespace

import pytest

from conftest import DATA
from vpnlab.core.errors import MeasurementError
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
    assert tcp.retransmit_flags(data) == [tcp.RETRANSMITS("17.5% of segments")]
    data["end"]["sum_sent"]["retransmits"] = 0
    assert tcp.retransmit_flags(data) == []


def _stretched_warm_up() -> dict:
    """The real 3.12 TCP run edited into a `-t 10 -O 2` one whose warm-up took 11.2 s (as seen under CPU
    emulation with kernel ESP): its three intervals made the warm-up, the last one ending at 11.22 s, then
    a 0.78 s measured period (bytes and rates scaled to it, a few retransmits)."""
    data = json.loads((DATA / "iperf3-3.12-tcp.json").read_text())
    data["start"]["test_start"].update(duration=10, omit=2)
    warm_up = data["intervals"]
    for interval in warm_up:
        interval["sum"]["omitted"] = True
    warm_up[-1]["sum"].update(end=11.22, seconds=11.22 - warm_up[-1]["sum"]["start"])
    sent, received = data["end"]["sum_sent"], data["end"]["sum_received"]
    sent.update(end=0.78, seconds=0.78, bytes=29360128, bits_per_second=29360128 * 8 / 0.78, retransmits=12)
    received.update(end=0.79, seconds=0.79, bytes=27542736, bits_per_second=27542736 * 8 / 0.79)
    measured = {"start": 0, "end": 0.78, "seconds": 0.78, "bytes": 29360128, "omitted": False, "sender": True}
    data["intervals"].append({"streams": [], "sum": measured | {"bits_per_second": 29360128 * 8 / 0.78}})
    return data


def test_a_warm_up_that_ate_the_test_flags_the_sample_and_counts_one_side(monkeypatch):
    data = _stretched_warm_up()
    asked = []
    monkeypatch.setattr(iperf, "client", lambda ctx, args, duration: asked.extend(args) or (data, json.dumps(data)))
    measurement = tcp.Tcp().run(tcp.TcpOptions(duration_s=10, omit_s=2), None)
    assert "--get-server-output" in asked  # the receiver's own count comes with the client's JSON
    assert measurement.flags == [tcp.SHORT_WINDOW("iperf3 measured 0.8 s of the 10 s asked (its 2 s warm-up took 11.2 s): "
                                                  "throughput is over a short, late window")]
    assert measurement.values["throughput_mbps"] == pytest.approx(27542736 * 8 / 0.79 / 1e6)  # still the receiver's
    warm_up = 39149424 + 35823760 + 38141952
    # the receiver's own count: the server's warm-up (from its JSON) and its measured total
    server = {"intervals": [{"sum": {"omitted": True, "bytes": 1000}}, {"sum": {"omitted": False, "bytes": 7}}]}
    assert tcp.carried_bytes(data | {"server_output_json": server}) == 27542736 + 1000
    assert measurement.carried_bytes == 27542736 + warm_up     # without it: the client's warm-up stands in
    data["start"]["test_start"]["reverse"] = 1
    assert tcp.carried_bytes(data | {"server_output_json": server}) == 27542736 + warm_up  # -R: the client received


def test_a_full_measured_period_is_not_flagged():
    data = json.loads((DATA / "iperf3-3.12-tcp.json").read_text())
    assert tcp.short_window_flags(data) == []
    data["end"]["sum_sent"]["seconds"] = 2.0  # no warm-up asked: nothing to blame, just a short window
    assert tcp.short_window_flags(data) == [tcp.SHORT_WINDOW("iperf3 measured 2.0 s of the 3 s asked: throughput is over a short window")]


def test_udp_loss_counts_the_datagrams_lost_after_the_last_that_arrived():
    """The real 3.12 UDP run edited to what a tunnel that stalled gave: 10963 datagrams sent, 3727 arrived,
    the highest sequence number received 7191 with 3464 gaps below it, so iperf3's lost_percent said 31.6%."""
    data = json.loads((DATA / "iperf3-3.12-udp.json").read_text())
    end = data["end"]
    end["sum_sent"]["packets"] = 10963
    for summary in (end["sum"], end["sum_received"]):
        summary.update(packets=7191, lost_packets=3464, lost_percent=100 * 3464 / 10963, bytes=3727 * 1200)
    end["sum"]["packets"] = 10963  # 3.12's sum takes the sender's count
    assert udp.parse(data)["udp_loss_pct"] == pytest.approx(100 * (10963 - 3727) / 10963)
    end["sum_received"].update(packets=0, lost_packets=0, lost_percent=0)  # nothing arrived: all lost, not none
    assert udp.parse(data)["udp_loss_pct"] == 100


def test_iperf3_interval_series():
    series = iperf.interval_series(json.loads((DATA / "iperf3-3.12-tcp.json").read_text()))
    assert len(series) == 3 and series[0][0] == pytest.approx(1.0, abs=0.01)
    assert all(mbps > 0 for _, mbps in series)


def test_latency_under_load_counts_the_pings_a_full_queue_lost():
    from vpnlab.measure.observers import loaded_rtt_values

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


def test_the_iperf3_server_reports_in_json(tmp_path):
    """--get-server-output hands the client the server's text unless the server runs with -J."""
    class Sink:
        def spawn(self, argv, log, what):
            self.argv = argv
        def wait_listening(self, port, proc, log):
            pass
    sink = Sink()
    ctx = SimpleNamespace(services={}, log_dir=tmp_path, bed=SimpleNamespace(sink=sink), port_offset=0)
    iperf.ensure_server(ctx)
    assert sink.argv[:3] == ["iperf3", "-s", "-J"]
