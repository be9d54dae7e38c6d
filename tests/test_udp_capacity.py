"""udp_capacity's search against known truth: a simulated path of known capacity, lossless below it
and losing what exceeds it above (with noise), and a real tbf-shaped link whose rate is known."""

import sqlite3

import numpy as np
import pytest

from conftest import run_here
from vpnlab.core.errors import StudyError
from vpnlab.plan.study import parse_study
from vpnlab.workloads.udp_capacity import UdpCapacityOptions, search


def path_of(capacity: float, rng, noise_pct: float = 0.3):
    """A path that carries up to `capacity` Mbit/s: above it the excess is lost; a little loss always."""
    def probe(rate: float) -> tuple[float, float]:
        carried = min(rate, capacity * rng.normal(1, 0.005))
        loss = 100 * (1 - carried / rate) + abs(rng.normal(0, noise_pct))
        return carried * (1 - loss / 100 if loss > 100 * (1 - carried / rate) else 1), loss, rate
    return probe


@pytest.mark.parametrize("capacity", [3.0, 47.0, 180.0, 950.0, 6_400.0])
def test_the_search_finds_a_known_capacity_within_its_precision(capacity):
    """Known truth: capacity C. The highest rate found to pass lies within precision_pct (plus the
    allowed 1% loss and the model's 0.5% jitter) below C, never above C by more than the allowed loss."""
    options = UdpCapacityOptions(start_mbit=10 if capacity > 10 else 1)
    for seed in range(20):
        found = search(path_of(capacity, np.random.default_rng(seed)), options)
        assert found.rate is not None and len(found.probes) <= options.max_probes
        assert capacity * (1 - 0.05 - 0.02) <= found.rate <= capacity * 1.02, (seed, found)
        assert found.loss <= options.max_loss_pct
        assert found.failed_at is None or found.failed_at / found.rate - 1 <= 0.05 or len(found.probes) == 14


@pytest.mark.parametrize("capacity", [0.4, 6.0, 31.0])
def test_a_capacity_below_the_start_is_found_by_halving_down_to_it(capacity):
    """Known truth: capacity C below start_mbit 50 (tinc's on one core, here). Rates halve from 50 until
    one passes, then the bracket is halved: the same bounds as a search from below."""
    options = UdpCapacityOptions(start_mbit=50)
    for seed in range(20):
        found = search(path_of(capacity, np.random.default_rng(seed)), options)
        assert found.rate is not None and len(found.probes) <= options.max_probes, (seed, found)
        assert capacity * (1 - 0.05 - 0.02) <= found.rate <= capacity * 1.02, (seed, found)
        assert [rate for rate, *_ in found.probes[:2]] == [50, 25]


def test_a_path_faster_than_max_mbit_is_reported_at_max_and_one_lossy_down_to_min_mbit_has_none():
    rng = np.random.default_rng(1)
    capped = search(path_of(10_000, rng), UdpCapacityOptions(start_mbit=100, max_mbit=800))
    assert capped.rate == 800 and capped.failed_at is None
    lossy = search(lambda rate: (rate * 0.5, 50.0, rate), UdpCapacityOptions(start_mbit=8, min_mbit=1))
    assert lossy.rate is None and [rate for rate, *_ in lossy.probes] == [8, 4, 2, 1]


def test_a_sender_that_cannot_send_faster_ends_the_search_flagged():
    """Known truth: a sender that tops out at 250 Mbit/s on a path of 10 Gbit/s. The search stops at the
    first probe the sender could not send, with what it carried, and says the tool set the limit."""
    found = search(lambda rate: (min(rate, 250.0), 0.0, min(rate, 250.0)), UdpCapacityOptions(start_mbit=50))
    assert found.sender_bound and found.goodput == 250.0 and [p[0] for p in found.probes] == [50, 100, 200, 400]


def test_its_options_are_checked_by_field():
    base = "name: c\nvpns: [{driver: none}]\nworkloads: [{kind: udp_capacity, FIELD}]\n"
    for field, word in (("max_loss_pct: 100", "max_loss_pct"), ("size: 70000", "size"), ("probe_s: 0", "probe_s"),
                        ("max_probes: 1", "max_probes"), ("start_mbit: 5, min_mbit: 10", "min_mbit"),
                        ("start_mbit: 500, max_mbit: 100", "max_mbit")):
        with pytest.raises(StudyError, match=word):
            parse_study(base.replace("FIELD", field))


@pytest.mark.integration
def test_on_a_tbf_shaped_link_the_capacity_is_the_links_rate(tmp_path, no_leftovers):
    """No VPN over a 40 Mbit/s tbf link: the capacity found, as UDP goodput of 1200-byte datagrams, is the
    link's rate less the headers (1200 of 1242 bytes on the wire: 38.6 Mbit/s), within the search's 5%."""
    study = parse_study("name: cap\nrepetitions: 1\nvpns: [{driver: none}]\nlinks: [{rate_mbit: 40}]\n"
                        "workloads: [{kind: udp_capacity, start_mbit: 5, probe_s: 2}]\n")
    run_here(study, tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    values = dict(db.execute("SELECT metric, value FROM samples"))
    db.close()
    expected = 40 * 1200 / (1200 + 28 + 14)
    # the tbf sits on the sender's own interface: it holds the socket back rather than dropping, so the
    # search ends at the first probe the sender could not send (sender-bound), whose goodput is what tbf
    # let through in it: 35.8-38.9 of the 38.6 here in four runs, alone on the machine
    assert expected * 0.9 <= values["udp_capacity_mbps"] <= expected * 1.02, values
    assert values["udp_capacity_loss_pct"] <= 1 and 4 <= values["udp_capacity_probes"] <= 14
