"""The store commits each repetition whole and knows what a resumed run must still do."""

import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone

from vpnlab.core.flags import UNDECLARED, Flag
from vpnlab.plan.scenarios import make_plan
from vpnlab.store.results_dir import read_store
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

STUDY = """
name: s
repetitions: 3
vpns: [{driver: none}]
workloads: [{kind: ping}]
"""


def test_repetitions_and_resume(tmp_path):
    plan = make_plan(parse_study(STUDY))
    scenario = plan.scenarios[0]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="s", study_text=STUDY)
    store.add_scenario(scenario)
    store.record_repetition(run, scenario.id, 1, {"rtt_avg_ms": 1.5, "ping_loss_pct": 0},
                            {"ping": "raw text"}, [], units={"rtt_avg_ms": "ms", "ping_loss_pct": "%"})
    store.record_repetition(run, scenario.id, 2, {"rtt_avg_ms": 1.7, "ping_loss_pct": 0}, {}, ["suspect"])
    store.close()

    # a second process (the resumed run) sees exactly what was committed
    again = Store.open_dir(tmp_path)
    again.add_scenario(scenario)  # re-planning keeps the row
    assert again.done_repetitions(scenario.id) == {1, 2}
    assert again.raw_output(scenario.id, 1, "ping") == "raw text"
    samples = again.samples()
    assert len(samples) == 4
    assert {s.flags for s in samples if s.repetition == 2} == {(Flag(UNDECLARED, "suspect"),)}
    assert {(s.metric, s.unit) for s in samples if s.repetition == 1} == {("rtt_avg_ms", "ms"), ("ping_loss_pct", "%")}
    again.close()


def test_notes_are_not_repeated(tmp_path):
    plan = make_plan(parse_study(STUDY))
    store = Store.open_dir(tmp_path)
    store.add_scenario(plan.scenarios[0])
    store.add_note(plan.scenarios[0].id, "a")
    store.add_note(plan.scenarios[0].id, "a")
    store.add_note(plan.scenarios[0].id, "b")
    assert store.scenarios()[0].notes == "a; b"


def test_the_link_and_workload_as_run_are_recorded_and_a_change_between_sittings_is_noted(tmp_path):
    """Emulation runs a 100 Mbit/s link at 10 and a UDP load at a tenth: the export says what ran, not only
    what the study asked; a sitting that runs a scenario otherwise than an earlier one says so."""
    from vpnlab.analyse.analysed import Analysed
    from vpnlab.report.export import rows

    text = "name: s\nvpns: [{driver: none}]\nlinks: [{rate_mbit: 100, delay_ms: 1}]\nworkloads: [{kind: udp, rate_mbit: 50}]\n"
    scenario = make_plan(parse_study(text)).scenarios[0]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="s", study_text=text)
    store.add_scenario(scenario, "vm")
    store.record_as_run(scenario)          # an earlier sitting that did not scale the load
    scenario.scale_for_emulation()
    store.record_as_run(scenario)
    store.record_repetition(run, scenario.id, 1, {"throughput_mbps": 4.9}, {}, [])
    [row] = rows(Analysed.of(store))
    assert (row["link_rate_mbit"], row["run_link_rate_mbit"], row["run_link_delay_ms"]) == (100, 10, 10)
    assert '"rate_mbit": 5.0' in row["run_workload_params"] and '"rate_mbit": 50.0' in row["workload_params"]
    assert "run otherwise than by an earlier sitting" in store.scenarios()[0].notes
    store.record_as_run(scenario)          # the same again: nothing more to say
    assert store.scenarios()[0].notes.count("run otherwise") == 1
    store.close()


def test_schema_version_is_checked(tmp_path):
    Store.open_dir(tmp_path).close()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    db.execute("UPDATE meta SET value='99'")
    db.commit()
    db.close()
    try:
        Store.open_dir(tmp_path)
    except ValueError as exc:
        assert "schema 99" in str(exc)
    else:
        raise AssertionError("a newer schema must not be read silently")


def test_a_store_from_before_the_vm_backend_is_upgraded(tmp_path):
    Store.open_dir(tmp_path).close()
    db = sqlite3.connect(tmp_path / "results.sqlite")  # as schema 1 left it: no measured_in, no rounds
    db.execute("ALTER TABLE scenarios DROP COLUMN measured_in")
    for table in ("scenarios", "runs"):  # nor real hosts
        db.execute(f"ALTER TABLE {table} DROP COLUMN hosts")
    db.execute("ALTER TABLE scenarios DROP COLUMN as_run")  # nor the as-run record
    db.execute("ALTER TABLE scenarios DROP COLUMN baseline")  # nor whether it is the baseline
    for column in ("round", "position", "failure"):
        db.execute(f"ALTER TABLE repetitions DROP COLUMN {column}")
    db.execute("UPDATE meta SET value='1'")
    db.execute("INSERT INTO scenarios (id, idx, label, topology, vpn, vpn_label, vpn_options, implementation,"
               " link_label, link_delay_ms, link_jitter_ms, link_loss_pct, workload, workload_label,"
               " workload_params, repetitions, repetition_rule) VALUES ('s1', 0, 'l', 'remote-access', 'none',"
               " 'none', '{}', 'none', 'unshaped', 0, 0, 0, 'ping', 'ping-56B', '{}', 3, '3')")
    db.commit()
    db.close()
    store = Store.open_dir(tmp_path)
    assert [tuple(r) for r in store.db.execute("SELECT id, measured_in FROM scenarios")] == [("s1", "host")]
    store.close()
    assert Store.open_dir(tmp_path).db.execute("SELECT value FROM meta").fetchone()[0] == "6"
    assert Store.open_dir(tmp_path).scenarios()[0].as_run == ""  # not recorded then: exported blank
    assert Store.open_dir(tmp_path).scenarios()[0].is_baseline  # not recorded then: its vpn is 'none'
    assert Store.open_dir(tmp_path).attempts("s1") == []


def test_a_scenario_is_stored_as_the_baseline_or_not_and_an_older_store_derives_it(tmp_path):
    plan = make_plan(parse_study(STUDY.replace("[{driver: none}]", "[{driver: none}, {driver: wireguard}]")))
    store = Store.open_dir(tmp_path)
    store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={}, study_name="s",
                    study_text=STUDY)
    for scenario in plan.scenarios:
        store.add_scenario(scenario)
    stored = dict(store.db.execute("SELECT vpn, baseline FROM scenarios").fetchall())
    store.close()
    assert stored == {"none": 1, "wireguard": 0}  # as the driver said when the scenario was added
    db = sqlite3.connect(tmp_path / "results.sqlite")  # as schema 5 left it: no baseline column
    db.execute("ALTER TABLE scenarios DROP COLUMN baseline")
    db.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    db.commit()
    db.close()
    older = read_store(tmp_path)  # read as it is, nothing written, no upgrade asked
    try:
        assert {row.vpn: row.is_baseline for row in older.scenarios()} == {"none": True, "wireguard": False}
    finally:
        older.close()
    assert sqlite3.connect(tmp_path / "results.sqlite").execute("SELECT value FROM meta").fetchone() == ("5",)


def test_a_vpn_is_graded_against_no_vpn_measured_in_the_same_place(tmp_path):
    from vpnlab.analyse.analysis import summarise
    from vpnlab.plan.placement import add_vm_twins

    plan = make_plan(parse_study(STUDY.replace("[{driver: none}]", "[{driver: none}, {driver: wireguard}]")))
    base, vpn = plan.scenarios
    add_vm_twins(plan, {vpn.id})
    twin = plan.scenarios[-1]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="s", study_text=STUDY)
    for scenario, where, rtt in ((base, "host", 0.1), (twin, "vm", 1.0), (vpn, "vm", 2.0)):
        store.add_scenario(scenario, where)
        store.record_repetition(run, scenario.id, 1, {"rtt_avg_ms": rtt}, {}, [])
    rtt = {sid: next(s for s in sums if s.metric == "rtt_avg_ms") for sid, sums in summarise(store).items()}
    assert rtt[vpn.id].relative == 2.0  # 2.0 ms against the VM's 1.0, not the host's 0.1


def test_opening_a_store_twice_keeps_what_another_process_sees(tmp_path):
    """Checking a store once read its header with open() and close(), which dropped this process's
    POSIX locks on it: another process then deleted the write-ahead log of the store still open,
    and its later commits went where nobody could see them."""
    a = Store.open_dir(tmp_path)
    a.db.execute("INSERT INTO meta VALUES ('probe-1', 'x')")
    a.db.commit()
    Store.open_dir(tmp_path).close()          # a second open in the same process: the check runs
    reader = [sys.executable, "-c", "import sqlite3, sys; d = sqlite3.connect(sys.argv[1]); "
              "print(d.execute(\"SELECT count(*) FROM meta WHERE key LIKE 'probe-%'\").fetchone()[0]); d.close()",
              str(tmp_path / "results.sqlite")]
    subprocess.run(reader, check=True, capture_output=True)   # another process opens and closes it
    a.db.execute("INSERT INTO meta VALUES ('probe-2', 'x')")
    a.db.commit()
    seen = subprocess.run(reader, check=True, capture_output=True, text=True).stdout.strip()
    a.close()
    assert seen == "2"


def test_a_vm_guests_repetitions_are_flagged_where_another_run_or_a_busy_program_shared_the_machine(tmp_path):
    """The guest cannot see other runs or programs on the host; the host's watch of the boot flags what
    the guest measured while one went on, by each repetition's span (from the one before it)."""
    from vpnlab.store.legacy_flags import read_flags
    from vpnlab.run.runner import HostWatch

    plan = make_plan(parse_study(STUDY))
    scenario = plan.scenarios[0]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="s", study_text=STUDY)
    store.add_scenario(scenario, "vm")
    base = time.time()
    for repetition in (1, 2, 3):  # completed 10, 20 and 30 s after the boot began
        store.record_repetition(run, scenario.id, repetition, {"rtt_avg_ms": 1.5}, {}, [])
        store.db.execute("UPDATE repetitions SET completed_at=? WHERE repetition=?",
                         (datetime.fromtimestamp(base + 10 * repetition, timezone.utc).isoformat(), repetition))
    watch = HostWatch("abc123")
    watch.started, watch.seen = base, [(base + 15, ["def456 (pid 7)"])]  # seen once, during the second
    # a build in the third (4 s of CPU in its 10 s: 40% of a core), a little noise in the first (10%)
    watch.load.samples = [(base + 5, {"cron": 1.0}), (base + 24, {"cc1": 3.0}), (base + 28, {"make": 1.0})]
    watch.flag(store, run, [scenario.id])
    flags = {r[1]: r[3] for r in store.db.execute("SELECT scenario_id, repetition, completed_at, flags"
                                                   " FROM repetitions")}
    store.close()
    kinds = {n: [flag.kind for flag in read_flags(flags[n])] for n in (1, 2, 3)}
    assert kinds == {1: [], 2: ["shared-machine"], 3: ["busy-machine"]}, flags
    assert "def456 (pid 7)" in flags[2]
    assert "programs outside this run took 40% of a core (cc1 30%, make 10%)" in flags[3]


def test_an_empty_guest_store_merges_as_nothing_measured(tmp_path):
    """A guest store a killed sitting left empty (0 bytes: stopped before its tables were made) is
    taken in by the next --resume as nothing measured, the host's store unchanged."""
    plan = make_plan(parse_study(STUDY))
    host = Store.open_dir(tmp_path)
    run = host.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                         study_name="s", study_text=STUDY)
    host.add_scenario(plan.scenarios[0], "vm")
    (tmp_path / "guest.sqlite").write_bytes(b"")
    assert host.merge(tmp_path / "guest.sqlite", run, "") == []
    assert [row.status for row in host.scenarios()] == ["pending"]
    host.close()


def test_a_guest_store_from_before_the_as_run_record_merges_and_keeps_what_is_known(tmp_path):
    """A killed sitting's guest store of schema 4 (no as_run) is merged by the next --resume."""
    plan = make_plan(parse_study(STUDY))
    scenario = plan.scenarios[0]
    for name in ("host", "guest"):
        (tmp_path / name).mkdir()
    host, guest = Store.open_dir(tmp_path / "host"), Store.open_dir(tmp_path / "guest")
    for store in (host, guest):
        run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                              study_name="s", study_text=STUDY)
        store.add_scenario(scenario, "vm")
    host.record_as_run(scenario)
    guest.record_repetition(run, scenario.id, 1, {"rtt_avg_ms": 1.5}, {}, [])
    guest.set_status(scenario.id, "done")
    guest.close()
    db = sqlite3.connect(tmp_path / "guest" / "results.sqlite")  # as schema 4 left it: no as_run
    columns = ", ".join(r[1] for r in db.execute("PRAGMA table_info(scenarios)") if r[1] != "as_run")
    db.executescript(f"CREATE TABLE old AS SELECT {columns} FROM scenarios; DROP TABLE scenarios;"
                     " ALTER TABLE old RENAME TO scenarios;")
    db.close()
    host.merge(tmp_path / "guest" / "results.sqlite", run, "")
    [row] = host.scenarios()
    assert row.status == "done" and row.as_run and host.done_repetitions(scenario.id) == {1}
    host.close()
