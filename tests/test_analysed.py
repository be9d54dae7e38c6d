"""One results directory read once and analysed once: what was read answers as the store does, and
`report`, `show`, `stats`, `export` and `verdicts` each read the samples one time."""

import json
import re

import pytest
from typer.testing import CliRunner

from test_analysis import planned_store
from vpnlab.report import html as report
from vpnlab.analyse.analysed import RAW_TOOLS, analyse
from vpnlab.cli import app
from vpnlab.store import ReadOnlyStore, Stored

STUDY = """
name: s
repetitions: 3
vpns: [{driver: none}, {driver: wireguard}, {driver: openvpn}, {driver: openvpn, profile: fips}]
workloads: [{kind: tcp, window: [8K, 64K]}, {kind: ping}]
"""


def iperf3(got: int, mbps: float) -> str:
    """An iperf3 client's JSON as far as the analysis reads it: intervals with a send window."""
    return json.dumps({"intervals": [{"sum": {"end": t, "bits_per_second": mbps * 1e6}, "streams": [{"snd_wnd": got}]}
                                     for t in (1.0, 2.0)]})


@pytest.fixture
def results(tmp_path):
    """A store with valid, failed and flagged repetitions, raw iperf3 output, mesh-free; one scenario failed."""
    plan, store, run = planned_store(tmp_path, STUDY)
    for round_no in (1, 2, 3):
        for position, scenario in enumerate(plan.scenarios):
            tcp = scenario.workload.kind == "tcp"
            values = {"throughput_mbps": 50.0 + round_no + position} if tcp else {"rtt_avg_ms": 1.0 + position / 10}
            raw = {"iperf3": iperf3(5792 if scenario.workload.window == 8192 else 64088, 50.0)} if tcp else {}
            failure = "iperf3 died" if round_no == 2 and position == 1 else None
            flags = ["retransmits 2.5% of segments"] if round_no == 3 else []
            store.record_repetition(run, scenario.id, round_no, values, raw, flags, round_no, position, failure=failure)
    for scenario in plan.scenarios:
        store.set_status(scenario.id, "done")
    store.set_status(plan.scenarios[-1].id, "failed", "the daemon did not start")
    store.close()
    return tmp_path


def test_what_was_read_answers_as_the_store_does(results):
    store = ReadOnlyStore(results / "results.sqlite", f"file:{results / 'results.sqlite'}?mode=ro")
    try:
        stored = Stored(store, RAW_TOOLS)
        assert stored.runs() == store.runs() and stored.scenarios() == store.scenarios()
        assert stored.samples() == store.samples() and stored.samples(valid_only=False) == store.samples(False)
        assert len(stored.samples()) < len(stored.samples(valid_only=False))  # the failed ones are left out
        assert stored.raw_outputs("iperf3") and stored.pair_values() == store.pair_values()
        assert [dict(r) for r in stored.raw_outputs("iperf3")] == [dict(r) for r in store.raw_outputs("iperf3")]
        assert all(stored.attempts(s.id) == store.attempts(s.id) for s in store.scenarios())
        assert any(None in stored.attempts(s.id) and len(set(stored.attempts(s.id))) > 1 for s in store.scenarios())
        with pytest.raises(KeyError, match="raw output of curl was not read"):
            stored.raw_outputs("curl")
    finally:
        store.close()


@pytest.fixture
def sample_reads(monkeypatch):
    """The statements that read the samples table, on every read-only store opened meanwhile."""
    statements = []
    opened = ReadOnlyStore.__init__

    def tracing(self, path, uri):
        opened(self, path, uri)
        self.db.set_trace_callback(statements.append)

    monkeypatch.setattr(ReadOnlyStore, "__init__", tracing)
    return lambda: [s for s in statements if re.search(r"\bFROM samples\b", s, re.I)]


def test_a_report_reads_the_samples_once(results, sample_reads):
    built = report.build(results)
    assert len(sample_reads()) == 1
    # and what the kinds show of their scenarios came with it: the tcp kind's series and its note
    assert any(f.title.startswith("throughput by interval") for f in built.figures)
    (windows,) = [w for n, w in built.notes if n.startswith("the TCP send window iperf3 got")]
    assert len(windows) == 4 and windows == sorted(windows)  # each VPN's 8K window; 64088 B is within 10% of 64K
    assert all(w.endswith(" | unshaped | tcp-w8K: 5792 B for 8192 B asked") for w in windows)


@pytest.mark.parametrize("command", [["show"], ["stats", "--secondary"], ["export", "--table", "samples"],
                                     ["export", "--table", "summary"], ["export", "--table", "comparisons"],
                                     ["verdicts"]])
def test_each_command_that_reads_results_reads_the_samples_once(results, sample_reads, command):
    result = CliRunner().invoke(app, [command[0], str(results), *command[1:]])
    assert result.exit_code == 0, result.output
    assert len(sample_reads()) == 1, command


def test_each_part_of_the_analysis_is_made_once(results, monkeypatch):
    """A part asked for twice (the report's table and its recommendations ask for the family) is kept."""
    import vpnlab.analyse.analysed as analysed_module

    made = []
    family = analysed_module.comparison_family
    monkeypatch.setattr(analysed_module, "comparison_family", lambda stored: made.append(1) or family(stored))
    analysed = analyse(results)
    assert analysed.family is analysed.family and len(made) == 1
