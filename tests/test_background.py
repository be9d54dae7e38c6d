"""Background office traffic: the study syntax, the client output parsing, and real servers
sharing a real tunnel with the measured workload."""

import asyncio
import random
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace

import dpkt
import pytest

from conftest import run_here
from vpnlab.catalog import TRAFFIC_TOOLS
from vpnlab.core.errors import MeasurementError, StudyError
from vpnlab.measure.window import share_with_background
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.study import parse_study
from vpnlab.testbed.node import Node
from vpnlab.testbed.state import RunState
from vpnlab.workloads import office
from vpnlab.workloads.background import PRESETS, BackgroundTraffic, arrivals_seed, summary
from vpnlab.workloads.office import DRAIN_S, ProtocolError, _expect, mail_data

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


def test_a_background_shares_the_per_byte_costs():
    """Worked numbers: 1 MB carried in a 4 s meter window beside a background of 400 kbit/s (50 kB/s)."""
    values = {"background_kbps": 400.0, "wan_bytes_per_byte": 1.5, "cpu_s_per_gb": 12.0, "throughput_mbps": 4.0}
    share_with_background(values, 1e6, 4.0)
    assert values["wan_bytes_per_byte"] == pytest.approx(1.5 * 1e6 / 1.2e6)   # + 200 kB of background
    assert values["cpu_s_per_gb"] == pytest.approx(10.0) and values["throughput_mbps"] == 4.0
    untouched = {"wan_bytes_per_byte": 1.5}
    share_with_background(untouched, 1e6, 4.0)  # no background on this link
    assert untouched == {"wan_bytes_per_byte": 1.5}


def test_configurations_in_a_round_meet_the_same_arrivals_and_each_round_draws_anew():
    """Within a round, VPN and no VPN on one link and workload differ in the VPN only; across rounds
    the arrivals differ, so the repetitions sample the background (with a seed per scenario each
    configuration met its one draw in every repetition: a bias repetitions could not show)."""
    plan = make_plan(parse_study(STUDY.replace("[{driver: none}]", "[{driver: none}, {driver: wireguard}]")
                                 % "office"))
    none, wireguard = plan.scenarios
    assert arrivals_seed(0, 1, none) == arrivals_seed(0, 1, wireguard)
    assert len({arrivals_seed(0, r, none) for r in range(1, 6)} | {arrivals_seed(1, 1, none)}) == 6
    first = [BackgroundTraffic(None, PRESETS["office"], arrivals_seed(0, 1, s)).rng.random() for s in plan.scenarios]
    again = BackgroundTraffic(None, PRESETS["office"], arrivals_seed(0, 2, none)).rng.random()
    assert first[0] == first[1] != again


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


def _reply(data: bytes, code: bytes) -> bytes:
    async def read():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await _expect(reader, code), await reader.read()
    return asyncio.run(read())


def test_replies_single_and_multi_line_and_the_wrong_code():
    assert _reply(b"220 ready\r\nrest", b"220") == (b"220 ready\r\n", b"rest")
    # a multi-line reply ends at "250 ", whatever its middle lines look like
    ehlo = b"250-office.test\r\n250-SIZE 33554432\r\nsome text-\r\n250 HELP\r\nnext"
    assert _reply(ehlo, b"250") == (b"250-office.test\r\n", b"next")
    assert _reply(b"+OK 2 messages\r\n", b"+OK")[0] == b"+OK 2 messages\r\n"
    for data, code in ((b"550 no such user\r\n", b"250"), (b"-ERR locked\r\n", b"+OK"), (b"", b"220"),
                       (b"250-cut off\r\n250-in the middle\r\n", b"250")):
        with pytest.raises(ProtocolError):
            _reply(data, code)


def test_a_mail_body_has_crlf_lines_dots_doubled_and_the_closing_dot():
    assert mail_data(b"Hello.\n.hidden\nend") == b"Subject: office mail\r\n\r\nHello.\r\n..hidden\r\nend\r\n.\r\n"
    assert mail_data(b"one\r\n").endswith(b"\r\none\r\n.\r\n")


def test_dns_queries_are_what_a_resolver_sends_and_error_answers_fail():
    query = dpkt.dns.DNS(office.dns_query(7, "host1.office.test"))
    assert (query.id, query.op, [(q.name, q.type) for q in query.qd]) == (7, dpkt.dns.DNS_RD, [("host1.office.test", 1)])
    answer = dpkt.dns.DNS(id=7, op=dpkt.dns.DNS_RA, qd=query.qd, an=[dpkt.dns.DNS.RR(name="host1.office.test", ip=b"\x01\x02\x03\x04")])
    assert office.dns_answers(bytes(answer)) == 1
    for bad in (bytes(dpkt.dns.DNS(id=7, rcode=dpkt.dns.DNS_RCODE_NXDOMAIN)), bytes(dpkt.dns.DNS(id=7)), b"\0" * 5):
        with pytest.raises(ProtocolError):
            office.dns_answers(bad)


def _mix(transaction) -> office.Mix:
    """The office mix's arrivals, each transaction `transaction` (no servers, no program)."""
    return office.Mix([(flow.per_s, transaction, random.Random(1)) for flow in PRESETS["office"].flows])


def test_a_window_ended_without_drain_cancels_at_once_and_one_ended_with_drain_counts_what_finished():
    cancelled = []

    async def slow():  # would finish inside a drain: only a cancellation at once leaves it unfinished
        try:
            await asyncio.sleep(DRAIN_S / 2)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return 1

    async def quick():
        await asyncio.sleep(0.2)
        return 1000

    async def abandoned():
        mix = _mix(slow)
        running = asyncio.create_task(mix.run())
        await asyncio.sleep(1)  # DNS arrives 5 times a second: transactions are in flight
        assert sum(c.started for c in mix.counters) > 0
        mix.end(drain=False)
        await running
        return mix

    mix = asyncio.run(abandoned())
    assert cancelled and sum(c.completed + c.failed for c in mix.counters) == 0  # cancelled, not drained

    async def drained():
        mix = _mix(quick)
        running = asyncio.create_task(mix.run())
        await asyncio.sleep(1.5)
        mix.end()
        await running
        return mix.account()

    account = asyncio.run(drained())
    values, text, flags = summary(PRESETS["office"], account["window_s"], account["counters"])
    assert values["background_failures"] == 0 and not flags
    assert values["background_dns_kbps"] > 0  # ~5 queries a second of 1000 B
    assert "dns:" in text


def _traffic(namespace: str, tmp_path) -> BackgroundTraffic:
    """A background whose clients run in `namespace` as a Node runs them (no servers)."""
    node = Node("source", namespace, RunState.create())
    return BackgroundTraffic(SimpleNamespace(bed=SimpleNamespace(source=node), log_dir=tmp_path),
                             PRESETS["office"], seed="1")


def silent_listener(node: Node, port: int, tmp_path) -> None:
    """A TCP port in the node's namespace that accepts connections and never answers."""
    log = tmp_path / "silent.log"
    script = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(64); "
              "time.sleep(120)")
    node.wait_listening(port, node.spawn([node.python, "-c", script], log, what="python3"), log)


def _account_written(traffic: BackgroundTraffic) -> bool:
    """Did the clients' program print its account (it does once its window has drained)?"""
    return any(line.startswith("{") for line in traffic._log.read_text(errors="replace").splitlines())


def test_the_clients_program_counts_refusals_and_ends_at_once_when_abandoned(namespace, tmp_path):
    """office.py run in a namespace by the node: nobody listens there, so every transaction fails."""
    flows = [{"protocol": "dns", "per_s": 20, "seed": 1, "port": 5300},
             {"protocol": "http", "per_s": 20, "seed": 2, "port": 8080, "target": "x"}]
    traffic = _traffic(namespace, tmp_path)
    try:
        traffic._launch("127.0.0.1", flows)
        # named for the CPU meters, which count it with the workloads' programs, not as the VPN's
        assert Path(f"/proc/{traffic._proc.pid}/comm").read_text().strip() == office.NAME in TRAFFIC_TOOLS
        time.sleep(1)
        values, text, flags = traffic.stop()
    finally:
        traffic.ctx.bed.source.state.teardown()
    assert values["background_failures"] > 10 and "ConnectionRefusedError" in text, text
    assert any(f.kind == "background" and "transactions failed" in f.text for f in flags)

    traffic = _traffic(namespace, tmp_path)
    try:
        silent_listener(traffic.ctx.bed.source, 8080, tmp_path)
        traffic._launch("127.0.0.1", [flows[1]])
        time.sleep(1)  # HTTP transactions in flight, waiting for replies that never come
        program = traffic._proc
        traffic.abandon()  # the measurement's error is the one raised, not this
        assert program.poll() is not None, "the clients' program outlived abandon()"
        assert not _account_written(traffic), "it drained and counted instead of ending at once"
        with pytest.raises(MeasurementError, match="did not start"):
            traffic._launch("127.0.0.1", [{"protocol": "gopher"}])  # the program fails before its window
    finally:
        traffic.ctx.bed.source.state.teardown()


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
workloads: [{kind: tcp, duration_s: 5}]
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
    # the WAN's bytes and the CPU were the background's too: per byte of all carried, the tunnel's
    # overhead stays what it is without one (counted per workload byte, it read about 1.5 x here)
    assert loaded["wan_bytes_per_byte"] < 1.15 * values["8mbit"]["wan_bytes_per_byte"], (loaded, values["8mbit"])
    # the link's busier direction, on the wire: full, and never beyond its rate (goodput of the upload
    # plus the background's downloads read 126% here)
    assert 80 < loaded["link_utilisation_total_pct"] <= 102, loaded
    assert len(accounts) == 1 and all("http:" in a for a in accounts)  # one account per loaded repetition
