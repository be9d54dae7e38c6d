"""Each tunnel end's cgroup and core, on fake cgroup trees: which accounting a machine offers, how a
cgroup's CPU is read, which cores the ends get, and that every cgroup is recorded before it is made
and gone after. The real thing, with a real tunnel: test_cpu_cgroups.py."""

import json
import os
from pathlib import Path

import pytest

from declared import programs
from vpnlab.measure.cpu import CpuMeter
from vpnlab.testbed.cgroups import JOIN, Accounting, End, Placement, assign, detect
from vpnlab.testbed.state import RunState
from vpnlab.testbed.topology import Layout


def mountinfo(*mounts: tuple[str, str, str, str]) -> str:
    """mountinfo lines for (type, mount point, root in the file system, super options)."""
    return "\n".join(f"{30 + n} 23 0:{40 + n} {root} {point} rw,relatime - {fstype} {fstype} {options}"
                     for n, (fstype, point, root, options) in enumerate(mounts))


def tree(base: Path, *dirs: str, files: dict[str, str] = {}) -> Path:
    for d in dirs:
        (base / d).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)
    return base


def test_cgroup_v2_with_the_cpu_controller_comes_first(tmp_path):
    tree(tmp_path, files={"v2/cgroup.controllers": "cpuset cpu io memory pids\n", "v2/cgroup.procs": "",
                          "v2/user.slice/s.scope/cgroup.procs": "1\n", "v1/cpuacct.usage": "5\n"})
    info = mountinfo(("cgroup2", f"{tmp_path}/v2", "/", "rw"), ("cgroup", f"{tmp_path}/v1", "/", "rw,cpu,cpuacct"))
    found = detect(info, "1:cpu,cpuacct:/\n0::/user.slice/s.scope\n")
    # inside vpnlab's own cgroup, never beside it
    assert found == Accounting("cgroup2", tmp_path / "v2/user.slice/s.scope")


def test_a_cgroup_v2_without_the_cpu_controller_gives_way_to_v1_cpuacct(tmp_path):
    """This development machine: v1 controllers and an empty cgroup2 at .../unified."""
    tree(tmp_path, files={"unified/cgroup.controllers": "hugetlb\n", "unified/cgroup.procs": "",
                          "cpuacct/cpuacct.usage": "7\n", "cpu/cpu.shares": "1024\n"})
    info = mountinfo(("cgroup", f"{tmp_path}/cpu", "/", "rw,cpu"), ("cgroup", f"{tmp_path}/cpuacct", "/", "rw,cpuacct"),
                     ("cgroup2", f"{tmp_path}/unified", "/", "rw"))
    found = detect(info, "2:cpuacct:/\n1:cpu:/\n0::/\n")
    assert found == Accounting("cgroup1", tmp_path / "cpuacct")


def test_without_cgroup_accounting_it_says_why_and_counts_ticks(tmp_path):
    assert detect("", "").method == "ticks"
    tree(tmp_path, files={"v2/cgroup.controllers": "memory pids\n"})
    found = detect(mountinfo(("cgroup2", f"{tmp_path}/v2", "/", "rw")), "0::/\n")
    assert found.method == "ticks" and "no cpu controller" in found.why_not


def test_a_mount_that_shows_another_part_of_the_hierarchy_is_not_used(tmp_path):
    """A container's bind mount of its own subtree: vpnlab's cgroup must be inside what it shows."""
    tree(tmp_path, "v2/a", files={"v2/cgroup.controllers": "cpu\n", "v2/a/cgroup.procs": "", "v2/cgroup.procs": ""})
    info = mountinfo(("cgroup2", f"{tmp_path}/v2", "/docker/abc", "rw"))
    assert detect(info, "0::/docker/abc/a\n") == Accounting("cgroup2", tmp_path / "v2/a")
    assert detect(info, "0::/elsewhere\n").method == "ticks"


def test_escaped_mount_points_are_read(tmp_path):
    tree(tmp_path, files={"my cg/cgroup.controllers": "cpu\n", "my cg/cgroup.procs": ""})
    info = mountinfo(("cgroup2", f"{tmp_path}/my\\040cg", "/", "rw"))
    assert detect(info, "0::/\n") == Accounting("cgroup2", tmp_path / "my cg")


def test_usage_in_microseconds_and_nanoseconds(tmp_path):
    tree(tmp_path, files={"a/cpu.stat": "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
                          "b/cpuacct.usage": "2500000001\n"})
    assert Accounting("cgroup2", tmp_path).usage_s(tmp_path / "a") == 1.5
    assert Accounting("cgroup1", tmp_path).usage_s(tmp_path / "b") == pytest.approx(2.500000001)


def test_a_core_of_its_own_for_each_end_or_none():
    assert assign(2, [0, 1]) == [0, 1]
    assert assign(2, [0, 1, 2, 3]) == [2, 3]          # the first core stays with the rest
    assert assign(2, [4, 6, 9]) == [6, 9]             # the cores this process may use
    assert assign(4, [0, 1]) is None and assign(0, [0, 1]) is None


class FakeNode:
    def __init__(self, role, namespace):
        self.role, self.namespace, self.launcher = role, namespace, []


@pytest.fixture
def run_state(tmp_path):
    (tmp_path / "state").mkdir()
    return RunState("abc123", tmp_path / "state", os.getpid(), None)


def nodes_for(layout: Layout) -> list[FakeNode]:
    return [FakeNode(role, f"vlabc123-0{role}") for role in layout.roles]


def test_each_end_gets_a_cgroup_recorded_before_it_is_made_and_removed_after(tmp_path, run_state):
    parent = tmp_path / "cg"
    parent.mkdir()
    layout = Layout.for_topology("site-to-site", 1)
    made = []
    original = run_state.add_cgroup

    def add(path):  # when it is recorded, it does not exist yet
        made.append((path, Path(path).exists()))
        original(path)
    run_state.add_cgroup = add
    placement = Placement.create(run_state, layout, nodes_for(layout), Accounting("cgroup2", parent), [0, 1])
    assert [exists for _, exists in made] == [False, False]
    assert sorted(p.name for p in parent.iterdir()) == ["vlabc123-0gw-a0", "vlabc123-0gw-b0"]
    assert json.loads((run_state.directory / "state.json").read_text())["cgroups"] == [str(p) for p, _ in made]
    assert [(e.side, e.node.role, e.core) for e in placement.ends] == [("client", "gw-a0", 0), ("gateway", "gw-b0", 1)]
    assert placement.pinned and placement.text == "pinned by sched_setaffinity (taskset): gw-a0 on core 0, gw-b0 on core 1"
    placement.remove()
    assert list(parent.iterdir()) == [] and run_state.cgroups == []


def test_nested_tunnels_on_two_cores_are_not_pinned_and_say_so(tmp_path, run_state):
    layout = Layout.for_topology("site-to-site", 2)
    placement = Placement.create(run_state, layout, nodes_for(layout), Accounting("ticks"), [0, 1])
    assert len(placement.ends) == 4 and not placement.pinned
    assert placement.text == "not pinned: 2 cores for 4 tunnel ends"
    assert [e.side for e in placement.ends] == ["client", "client", "gateway", "gateway"]
    assert all(e.launcher() == [] for e in placement.ends)  # no cgroup, no core: started as before
    assert placement.usage() is None and run_state.cgroups == []
    baseline = Placement.create(run_state, Layout.for_topology("remote-access", 0), [], Accounting("ticks"), [0, 1])
    assert baseline.ends == [] and baseline.text == "no tunnel ends"


def test_a_study_can_turn_pinning_off_where_there_are_cores_enough(tmp_path, run_state):
    layout = Layout.for_topology("remote-access", 1)
    placement = Placement.create(run_state, layout, nodes_for(layout), Accounting("ticks"), [0, 1], pin=False)
    assert len(placement.ends) == 2 and not placement.pinned
    assert placement.text == "not pinned: the study turns pinning off (pin_tunnel_ends: false)"
    assert all(e.launcher() == [] for e in placement.ends)


def test_a_cgroup_that_exists_already_is_not_ours(tmp_path, run_state):
    parent = tmp_path / "cg"
    (parent / "vlabc123-0gw").mkdir(parents=True)
    layout = Layout.for_topology("remote-access", 1)
    with pytest.raises(Exception, match="already exists"):
        Placement.create(run_state, layout, nodes_for(layout), Accounting("cgroup1", parent), [0, 1])
    # the client's (made first) is removed again, the one it did not make is left alone
    assert [p.name for p in parent.iterdir()] == ["vlabc123-0gw"] and run_state.cgroups == []


def test_the_launcher_joins_the_cgroup_then_pins_then_enters_the_namespace(tmp_path):
    end = End("client", FakeNode("client", "ns"), group=tmp_path / "g", core=1)
    argv = [*end.launcher(), "ip", "netns", "exec", "ns", "wireguard-go", "wg0"]
    assert argv[:5] == ["sh", "-c", JOIN, "vpnlab-join", str(tmp_path / "g" / "cgroup.procs")]
    assert argv[5:8] == ["taskset", "-c", "1"]
    assert programs(argv) == {"sh", "taskset", "ip", "wireguard-go"}  # the suite's audit sees through it


def test_starting_sets_the_launchers_only_while_the_tunnel_comes_up(tmp_path, run_state):
    layout = Layout.for_topology("remote-access", 1)
    nodes = nodes_for(layout)
    placement = Placement.create(run_state, layout, nodes, Accounting("ticks"), [0, 1])
    with placement.starting():
        assert [n.launcher for n in nodes] == [["taskset", "-c", "0"], ["taskset", "-c", "1"], []]
    assert [n.launcher for n in nodes] == [[], [], []]  # the traffic tools later started there are not the VPN's


def test_a_crashed_runs_cgroups_are_removed_from_its_record(tmp_path, run_state):
    group = tmp_path / "cg" / "vlabc123-0gw"
    group.mkdir(parents=True)
    run_state.add_cgroup(group)
    loaded = RunState.load(run_state.directory)
    assert loaded.cgroups == [str(group)]
    loaded.teardown()
    assert not group.exists()


class FakePlacement:
    """A placement whose cgroups used 0.25 s on the client side and 0.5 s on the gateway side."""

    def __init__(self):
        self.calls = 0

    def record(self):
        return {"method": "cgroup2", "ends": [{}], "pinned": True, "placement": "pinned"}

    def usage(self):
        self.calls += 1
        return {"client": 10.0 + 0.25 * (self.calls - 1), "gateway": 20.0 + 0.5 * (self.calls - 1)}


def test_the_meter_takes_the_cgroups_figures_and_keeps_the_ticks_beside_them():
    meter = CpuMeter.here([], [], FakePlacement())
    values, _ = meter.finish(None)
    wall = meter.record["wall_s"]
    assert values["cpu_vpn_client_pct"] == pytest.approx(100 * 0.25 / wall)
    assert values["cpu_vpn_gateway_pct"] == pytest.approx(100 * 0.5 / wall)
    assert meter.record["cgroup_s"] == {"client": 0.25, "gateway": 0.5}
    assert meter.record["ticks_s"] == {"client": 0, "gateway": 0}


def test_the_methods_paragraph_says_how_cpu_was_counted_and_where_the_ends_ran(tmp_path):
    from vpnlab.analyse import methods
    from vpnlab.plan.stored import StoredStudy
    from vpnlab.plan.scenarios import make_plan
    from vpnlab.store import Store
    from vpnlab.plan.study import parse_study

    plan = make_plan(parse_study("name: m\nrepetitions: 2\nvpns: [{driver: wireguard}]\nworkloads: [{kind: ping}]\n"))
    scenario = plan.scenarios[0]
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="m", study_text="")
    store.add_scenario(scenario)
    pinned = {"method": "cgroup1", "ends": [{}, {}], "pinned": True, "placement": "pinned by ...", "cgroup_s": {}}
    shared = {"method": "ticks", "ends": [{}] * 4, "pinned": False, "placement": "not pinned: 2 cores for 4 tunnel ends"}
    for rep, record in ((1, pinned), (2, shared)):
        store.record_repetition(run, scenario.id, rep, {"cpu_vpn_client_pct": 1.0}, {"cpu": json.dumps(record)}, [])
    text = methods.cpu_text(store)
    store.close()
    assert "cgroup v1 cpuacct.usage" in text and "(nanoseconds), in 1 repetitions" in text
    assert "clock ticks" in text and "not pinned: 2 cores for 4 tunnel ends, in 1 repetitions" in text
    assert "on this host, each end on a core of its own, in 1 repetitions" in text
    assert text in methods.paragraph(StoredStudy.read(""), [], cpu=text)


def test_doctor_says_how_tunnel_ends_are_counted_and_which_get_cores():
    from vpnlab.cli.machine import _tunnel_ends
    from vpnlab.testbed.cgroups import cores, this_machine

    ends = _tunnel_ends()
    assert ends["cpu_accounting"] == this_machine().method and ends["cores"] == cores()
    assert ends["pinned"]["2 ends"] == assign(2, cores()) and ends["pinned"]["4 ends"] == assign(4, cores())


def test_a_vpn_entrys_cores_pin_each_end_to_that_many(tmp_path, run_state):
    from vpnlab.testbed.cgroups import assign_sets

    assert assign_sets(2, [0, 1, 2, 3], 2) == ([(0, 1), (2, 3)], False)   # a set of its own each
    assert assign_sets(2, [0, 1], 2) == ([(0, 1), (0, 1)], True)          # too few: one set, shared
    assert assign_sets(2, [0, 1], 3) is None
    layout = Layout.for_topology("remote-access", 1)
    one = Placement.create(run_state, layout, nodes_for(layout), Accounting("ticks"), [0, 1], per_end=1)
    assert one.text == "pinned by sched_setaffinity (taskset): client on cores 0, gw on cores 1"
    two = Placement.create(run_state, layout, nodes_for(layout), Accounting("ticks"), [0, 1], per_end=2)
    assert [e.launcher() for e in two.ends] == [["taskset", "-c", "0,1"]] * 2
    assert two.text.endswith("(one set for all: 2 cores for 2 ends)")
    with pytest.raises(Exception, match="cores: 3 asked for each tunnel end, this machine gives 2"):
        Placement.create(run_state, layout, nodes_for(layout), Accounting("ticks"), [0, 1], per_end=3)


def test_cores_is_a_sweepable_factor_compared_as_one_difference():
    from vpnlab.analyse.compare import differs_in_one_thing
    from vpnlab.core.errors import StudyError
    from vpnlab.plan.scenarios import make_plan
    from vpnlab.plan.study import parse_study

    text = "name: c\nvpns: [{driver: none}, {driver: wireguard, CORES}]\nworkloads: [{kind: tcp}]\n"
    plan = make_plan(parse_study(text.replace("CORES", "cores: [1, 2]")))
    assert [(s.vpn.label, s.vpn.cores) for s in plan.scenarios] == [
        ("none", None), ("wireguard on 1 core", 1), ("wireguard on 2 cores", 2)]
    assert differs_in_one_thing(plan.scenarios[1].vpn.as_dict(), plan.scenarios[2].vpn.as_dict())
    plain = make_plan(parse_study(text.replace(", CORES", ""))).scenarios[1]
    assert "cores" not in plain.vpn.as_dict()  # stored scenarios keep their ids
    with pytest.raises(StudyError, match=r"vpns\[1\]\.cores"):
        parse_study(text.replace("CORES", "cores: 0"))
    with pytest.raises(StudyError, match=r"vpns\[1\]\.cores: pins the tunnel ends of this machine"):
        parse_study(text.replace("CORES", "cores: 1") + "hosts: {client: a, gateway: b}\n")


@pytest.mark.integration
def test_an_ends_daemons_run_on_the_cores_asked(tmp_path, no_leftovers):
    """A real testbed with cores: 2: a daemon started in a tunnel end's namespace may run on exactly the
    last two cores (read from the kernel: /proc/PID/status)."""
    from vpnlab.plan.study import Link
    from vpnlab.testbed.cgroups import cores
    from vpnlab.testbed.state import RunState
    from vpnlab.testbed.topology import Testbed

    state = RunState.create()
    try:
        bed = Testbed.build(state, Layout.for_topology("remote-access", 1), Link(), "c", cores=2)
        end = bed.placement.ends[0]
        with bed.placement.starting():
            proc = end.node.spawn(["sleep", "30"], tmp_path / "sleep.log", what="sleep")
        allowed = next(line.split()[1] for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                       if line.startswith("Cpus_allowed_list"))
        want = cores()[-2:]
        assert allowed in (f"{want[0]}-{want[1]}", f"{want[0]},{want[1]}"), allowed
    finally:
        state.teardown()
