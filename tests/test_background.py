"""Background office traffic: the study syntax, the client output parsing, and real servers
sharing a real tunnel with the measured workload."""

import sqlite3

import pytest

from conftest import run_here
from vpnlab.errors import StudyError
from vpnlab.plan import make_plan
from vpnlab.study import parse_study
from vpnlab.workloads.background import _bytes_moved

STUDY = """
name: bg
vpns: [{driver: none}]
links: [{rate_mbit: 2, background: %s}]
workloads: [{kind: ping}]
"""


def test_office_preset_and_a_sweep_with_none():
    study = parse_study(STUDY % "[none, office]")
    assert [l.label for l in study.links] == ["2mbit", "2mbit+office"]
    office = study.links[1].background
    assert {f.protocol for f in office.flows} == {"http", "ftp", "pop3", "smtp", "dns"}
    http = next(f for f in office.flows if f.protocol == "http")
    assert http.per_s == pytest.approx(400_000 / 8 / 65536)


def test_scenario_ids_without_background_are_unchanged():
    plain = make_plan(parse_study(STUDY.replace(", background: %s", "")))
    swept = make_plan(parse_study(STUDY % "[none, office]"))
    assert plain.scenarios[0].id == swept.scenarios[0].id != swept.scenarios[1].id


@pytest.mark.parametrize("mix,field", [
    ("lan-party", "links[0].background"),
    ("{name: m, flows: [{protocol: dns, rate_kbit: 10}]}", "links[0].background.flows[0]"),
    ("{name: m, flows: [{protocol: http}]}", "links[0].background.flows[0]"),
    ("{name: m, flows: [{protocol: gopher, rate_kbit: 10}]}", "links[0].background.flows[0].protocol"),
    ("{name: m, flows: []}", "links[0].background.flows"),
])
def test_bad_mixes_name_the_field(mix, field):
    with pytest.raises(StudyError) as error:
        parse_study(STUDY % mix)
    assert f"{field}:" in str(error.value)


def test_transaction_outputs():
    assert _bytes_moved("http", "65536") == 65536
    assert _bytes_moved("pop3", "  33450\n") == 33450
    assert _bytes_moved("http", "") is None
    dig = (";; QUERY SIZE: 57\n;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1\n"
           "host1.office.test.\t0\tIN\tA\t198.18.128.2\n;; MSG SIZE  rcvd: 61\n")
    assert _bytes_moved("dns", dig) == 118
    assert _bytes_moved("dns", dig.replace("NOERROR", "SERVFAIL")) is None


@pytest.mark.integration
def test_every_protocol_crosses_the_tunnel_and_takes_its_share_of_the_link(tmp_path, no_leftovers):
    study = parse_study("""
name: background
repetitions: 1
vpns: [{driver: wireguard}]
links:
  - rate_mbit: 8
    background:
      - none
      - name: heavy
        flows:
          - {protocol: http, rate_kbit: 2500}
          - {protocol: ftp, rate_kbit: 800, size: 64K}
          - {protocol: pop3, rate_kbit: 400}
          - {protocol: smtp, rate_kbit: 400}
          - {protocol: dns, queries_per_s: 10}
workloads: [{kind: tcp, duration_s: 8}]
""")
    plan = run_here(study, tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    status = [row for row in db.execute("SELECT status, failure FROM scenarios")]
    values = {}
    for label, metric, value in db.execute(
            "SELECT sc.link_label, s.metric, avg(s.value) FROM samples s JOIN scenarios sc ON sc.id = s.scenario_id"
            " WHERE s.repetition > 0 GROUP BY 1, 2"):
        values.setdefault(label, {})[metric] = value
    accounts = [row[0] for row in db.execute("SELECT output FROM raw_outputs WHERE tool = 'background'")]
    db.close()
    assert all(s == "done" for s, _ in status), status
    loaded = values["8mbit+heavy"]
    for protocol in ("http", "ftp", "pop3", "smtp", "dns"):
        assert loaded[f"background_{protocol}_kbps"] > 0, accounts
    assert loaded["background_failures"] <= 1, accounts  # a resolver can lose a query twice in a full queue
    # the background shares the bottleneck: the measured TCP flow gets visibly less of it
    assert loaded["throughput_mbps"] < 0.9 * values["8mbit"]["throughput_mbps"]
    assert loaded["background_kbps"] > 1000
    assert len(accounts) == 1 and all("http:" in a for a in accounts)  # one account per loaded repetition
