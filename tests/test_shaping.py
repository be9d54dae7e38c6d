"""tbf and netem parameters for the WAN."""

from vpnlab.plan.study import Link
from vpnlab.testbed.shaping import netem_limit, shape_commands, tbf_params


def test_rate_only_uses_tbf():
    assert shape_commands("l0", Link(rate_mbit=8)) == [
        f"qdisc add dev l0 root handle 1: tbf rate 8mbit burst {tbf_params(8, 50)[0]} limit {tbf_params(8, 50)[1]}"]


def test_unshaped_link_has_no_qdisc():
    assert shape_commands("l0", Link()) == []


def test_burst_covers_a_timer_tick_and_two_frames():
    burst, limit = tbf_params(2, 50)
    assert burst == 2 * 1514
    burst, limit = tbf_params(1000, 50)
    assert burst == 500_000  # 4 ms at 1 Gbit/s
    assert limit >= 1000e6 / 8 * 0.05


def test_impairment_puts_tbf_under_netem():
    lines = shape_commands("l1", Link(rate_mbit=100, delay_ms=20, jitter_ms=2, loss_pct=1))
    assert lines[0].startswith("qdisc add dev l1 root handle 1: netem limit ")
    assert "delay 20ms 2ms distribution normal" in lines[0]
    assert "loss random 1%" in lines[0]
    assert lines[1].startswith("qdisc add dev l1 parent 1:1 handle 2: tbf rate 100mbit")


def test_uniform_jitter_has_no_distribution_table():
    line = shape_commands("l0", Link(delay_ms=10, jitter_ms=1, jitter_distribution="uniform"))[0]
    assert "delay 10ms 1ms" in line and "distribution" not in line


def test_netem_limit_never_drops_at_rate_times_delay():
    # 1 Gbit/s x 100 ms is about 8257 full frames in flight
    assert netem_limit(1000, 100, 0) >= 1.5 * 8257
    assert netem_limit(2, 10, 0) == 1000
