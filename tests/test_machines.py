"""Where results came from, said in the report and by `vpnlab show` (machines.py)."""
import json
from types import SimpleNamespace

from vpnlab.machines.provenance import current_wording, machine_lines, measured_where

HOW = "software emulation (TCG): slow, its CPU-bound rates are lower bounds and delays upper bounds, kernel 6.1.0-56-amd64"
TCG = f"measured in a VM ({HOW})"
OLD_TCG = "measured in a VM (software emulation (TCG): slow, CPU-bound figures are lower bounds, kernel 6.1.0-56-amd64)"
FACTS = {"cpus": 2, "cpu_model": "AMD EPYC", "kernel": "6.18.44", "nic": {"interface": "veth pairs", "driver": "veth"}}


def _scenario(measured_in: str, notes: str = "", status: str = "done") -> SimpleNamespace:
    return SimpleNamespace(measured_in=measured_in, notes=notes, host_roles={}, status=status)


def test_the_vms_results_are_told_apart_from_the_machine_it_ran_on():
    run = {"hostname": "vm", "kernel": "6.18.44", "hosts": json.dumps({"vm": FACTS})}
    # a sitting interrupted before it could say how the guest measured leaves no note
    scenarios = [_scenario("vm", f"{TCG}; link scaled for software emulation"), _scenario("vm"), _scenario("host")]
    assert machine_lines([run], scenarios) == [
        "host vm: 2 CPUs (AMD EPYC), kernel 6.18.44, NIC veth pairs (veth)",
        "2 of 3 scenarios in vpnlab's VM on that machine, its vCPUs on the same cores",
        f"1 of them {TCG}", "1 of them how not recorded (a sitting was interrupted before the guest said)"]
    unmeasured = [*scenarios, _scenario("vm", status="pending")]
    assert machine_lines([run], unmeasured)[-1] == "1 of them not measured yet"
    assert measured_where(run, scenarios) == f"on host vm (kernel 6.18.44), 2 of 3 scenarios in vpnlab's VM ({HOW})"
    assert measured_where(run, scenarios[:2]).startswith("in vpnlab's VM (software emulation (TCG)")
    assert measured_where(run, scenarios[2:]) == "on host vm (kernel 6.18.44)"


def test_sittings_that_worded_the_emulation_differently_say_it_once():
    run = {"hostname": "vm", "kernel": "6.18.44", "hosts": json.dumps({"vm": FACTS})}
    scenarios = [_scenario("vm", OLD_TCG), _scenario("vm", f"{OLD_TCG}; {TCG}; link scaled")]
    assert machine_lines([run], scenarios)[1:] == [
        "2 of 2 scenarios in vpnlab's VM on that machine, its vCPUs on the same cores", f"all of them {TCG}"]
    assert current_wording(scenarios[1].notes) == f"{TCG}; link scaled"  # the report lists each scenario once
    assert measured_where(run, scenarios) == f"in vpnlab's VM ({HOW}) on host vm (kernel 6.18.44)"


def test_each_sitting_says_the_code_it_ran(tmp_path):
    """A study resumed over sittings may run different commits: the report names each with its sittings."""
    from vpnlab import _checkout_commit
    from vpnlab.machines.provenance import sitting_versions

    runs = [{"vpnlab_version": v} for v in ("0.1.0+ga", "0.1.0+ga", "0.1.0+gb", "0.1.0+gc", "0.1.0+gc")]
    assert sitting_versions(runs) == "0.1.0+ga (sittings 1-2), 0.1.0+gb (sitting 3), 0.1.0+gc (sittings 4-5)"
    assert sitting_versions(runs[:2]) == "0.1.0+ga"
    # a checkout's commit from .git's files: a branch (loose or packed), a worktree, a detached HEAD
    main = tmp_path / "main" / ".git"
    (main / "refs" / "heads").mkdir(parents=True)
    (main / "HEAD").write_text("ref: refs/heads/main\n")
    (main / "packed-refs").write_text("# pack-refs with: peeled\n" + "a" * 40 + " refs/heads/main\n")
    assert _checkout_commit(main.parent) == "a" * 40
    (main / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    assert _checkout_commit(main.parent) == "b" * 40
    linked = main / "worktrees" / "run"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("c" * 40 + "\n")
    (linked / "commondir").write_text("../..\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".git").write_text(f"gitdir: {linked}\n")
    assert _checkout_commit(tmp_path / "run") == "c" * 40
    (tmp_path / "run" / ".git").write_text("gitdir: ../main/.git/worktrees/run\n")  # git worktree --relative-paths
    assert _checkout_commit(tmp_path / "run") == "c" * 40
    assert _checkout_commit(tmp_path / "nowhere") == ""
