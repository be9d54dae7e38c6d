"""`vpnlab tune`: the best settings for a link and a traffic, found by a race (vpnlab/tune/)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ..store import results_dir
from .console import EXIT_INTERRUPTED, EXIT_SCENARIOS_FAILED, err, out, user_errors
from ..core.printable import safe
from ..core.errors import StudyError, VpnlabError
from ..core.files import write_own
from ..core.signals import Interrupted
from .common import app, need_root, print_table

RACE_HELP = ("Candidates (each driver's tunables, minus what the constraints, the driver and this machine refuse) "
             "run with no VPN in shuffled rounds, each on a fresh testbed and tunnel. From the minimum rounds on, "
             "after each round, a candidate is dropped when a paired one-sided t test on the log ratio by round "
             "shows it worse than the leader by more than the margin; alpha is spent over the rounds the budget "
             "allows by a Pocock-type Lan-DeMets function, split by Bonferroni over the candidates, so a candidate "
             "within the margin of the best is dropped with probability at most alpha however often the race "
             "looks. The race stops when one candidate is left, when the survivors are equivalent within the "
             "margin (TOST at the same levels), or when the budget is spent, and says which.")


@app.command(help=f"Find the best VPN settings for a link and a traffic by a race. {RACE_HELP}")
@user_errors
def tune(
    spec: Optional[Path] = typer.Argument(None, help="tune spec (YAML: link, traffic, constraints, space, budget), "
                                          "or `example` for the shipped one"),
    budget: Optional[str] = typer.Option(None, "--budget", help="time the race may take, such as 30m or 1h30m "
                                         "(default: the spec's, else 30m)"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", "-i", help="Ansible inventory of the hosts the "
                                             "spec's `hosts:` names: race on the real path between them"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the candidates, what the constraints removed, and "
                                 "the worst-case and expected time; create nothing"),
    out_path: Optional[str] = typer.Option(None, "--out", help="results directory, new or empty (default "
                                           "./vpnlab-results/<timestamp>)"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="finish an interrupted race in this results "
                                          "directory"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress bar"),
):
    from ..machines.capabilities import detect
    from ..tune.design import RaceDesign

    if out_path == "":
        raise VpnlabError("--out: an empty path; name the results directory (or leave --out out for "
                          "./vpnlab-results/<timestamp>)")
    out_dir = resume if resume is not None else Path(out_path) if out_path is not None else None
    if resume is not None:
        if spec is not None or budget is not None or dry_run:
            raise StudyError("--resume: a resumed race takes the spec and budget stored with it (and has no --dry-run)")
        plan, race, hosts = _stored_race(resume), RaceDesign.load(resume), None
        results_dir.admissible(resume, plan.study.source_text, True)
    else:
        if spec is None:
            raise StudyError("SPEC: give a tune spec (see docs/tuning.md), or --resume DIR")
        caps = detect() if os.geteuid() == 0 else None
        plan, race, space, hosts = _designed(spec, budget, inventory, caps)
        if out_dir is not None:  # as the race would check it, dry or not, before anything is built
            results_dir.admissible(out_dir, plan.study.source_text, False)
        if caps is not None and hosts is None:
            _runs_here(plan)  # a link this kernel cannot shape (a delay without netem): said by the dry run too
        if dry_run:
            _print_dry_run(plan, race, space, caps)
            return
    need_root("vpnlab tune")
    _race(plan, race, out_dir, hosts, resume is not None, progress)


def _designed(spec_path: Path, budget: str | None, inventory: Path | None, caps):
    """The spec, its space on this machine and the race's plan and rules; StudyError before anything starts."""
    from ..tune.design import design
    from ..tune.space import build_space
    from ..tune.spec import load_spec

    spec = load_spec(spec_path, budget)
    on_hosts = bool(spec.hosts or inventory)
    space = build_space(spec.space, spec.constraints, None if on_hosts else caps)
    if not space.candidates:
        reasons = "\n  ".join(f"{reason} ({n})" for reason, n in space.removed.most_common())
        raise StudyError(f"{spec_path}: space: no candidate is left after the constraints:\n  {reasons}")
    plan, race = design(spec, space.candidates)
    hosts = None
    if on_hosts:
        from ..hosts.testbed import HostSet

        hosts = HostSet(plan.study, inventory)
    return plan, race, space, hosts


def _stored_race(directory: Path):
    from ..plan.scenarios import make_plan
    from .run import stored_study

    study, _ = stored_study(directory)
    return make_plan(study)


def _print_dry_run(plan, race, space, caps) -> None:
    from ..plan.scenarios import duration
    from ..tune.design import expected_s

    candidates = [s for s in plan.scenarios if not s.vpn.is_baseline]
    print_table(f"{len(candidates)} candidates (and no VPN in every round)", ("#", "candidate", "profile"),
                [(str(i), s.vpn_label, s.vpn.profile) for i, s in enumerate(candidates, 1)])
    if space.removed:
        print_table("removed from the space", ("candidates", "why", "for example"),
                    [(str(n), reason, space.examples[reason]) for reason, n in space.removed.most_common()])
    if race.checks:
        print_table(f"{len(race.checks)} field checks, before the first round (a candidate failing one is dropped)",
                    ("where", "requires of every repetition: under", "about"),
                    [(check.where, check.label, duration(check.estimate_s)) for check in race.checks])
    worst, expected = expected_s(plan, race)
    out.print(f"link {plan.study.links[0].label}, workload {plan.study.workloads[0].label}, optimising {race.metric} "
              f"({'higher' if race.higher_is_better else 'lower'} is better)\n"
              f"the budget ({duration(race.budget_s)}) allows {race.max_rounds} rounds; drops from round "
              f"{race.min_rounds} on, margin {100 * race.margin:g}%, alpha {race.alpha:g}\n"
              f"worst case (nobody dropped): {duration(worst)}; expected with a clear winner (the field down to "
              f"the leader and one rival at the first look): {duration(expected)}", highlight=False)
    if caps is None:
        out.print("not checked which candidates this machine can run: run as root to see", highlight=False)
    out.print("Nothing was created.")


def _runs_here(plan, hosts=None):
    from ..plan.placement import place

    placed = place(plan, "netns", hosts)
    if placed.cannot:
        where = "the hosts cannot" if hosts is not None else "this machine cannot"
        raise VpnlabError(f"{where} run the race:\n  " + "\n  ".join(placed.said()))
    return placed


def _race(plan, race, out_dir: Path | None, hosts, resumed: bool, progress: bool) -> None:
    from ..run.runner import default_out_dir
    from ..tune.runner import RaceRunner
    from .run import finish_run

    placed = _runs_here(plan, hosts)  # a race runs where its candidates run: here, or on the hosts
    out_dir = out_dir or default_out_dir()
    held = results_dir.claim(out_dir, plan.study.source_text, resumed)  # locked until exit
    if held.upgraded:
        err.print(safe(f"{out_dir}: its store was written by an older vpnlab (results schema {held.upgraded[0]}) and "
                       f"is upgraded to this one's; the store as it was is kept in {held.upgraded[1]}"), highlight=False)
    if not resumed:
        race.save(out_dir)
    err.print(f"race [bold]{safe(plan.study.name)}[/]: {len(race.candidates)} candidates, at most {race.max_rounds} "
              f"rounds; results in {safe(out_dir)}", highlight=False)
    runner = RaceRunner(plan, out_dir, placed.caps, race, console=err, progress=progress and sys.stderr.isatty(),
                        hosts=hosts, refused=placed.refused)
    try:
        runner.run()
    except (KeyboardInterrupt, Interrupted) as exc:
        err.print(f"[yellow]interrupted[/]: everything it created is removed; "
                  f"finish later with: vpnlab tune --resume {safe(out_dir)}")
        raise typer.Exit(getattr(exc, "exit_code", EXIT_INTERRUPTED))
    found = _answer(plan, race, out_dir)
    finish_run(out_dir)
    if not found:
        raise typer.Exit(EXIT_SCENARIOS_FAILED)


def _answer(plan, race, out_dir: Path) -> bool:
    """Print and write the answer (answer.txt) and the race's figure (race.png); whether there is one."""
    from ..store import Store
    from ..tune.answer import answer, figure, text
    from ..tune.runner import standing_of

    store = Store.open_dir(out_dir)
    try:
        standing = standing_of(store, race)
        result = answer(store, race, standing, plan.scenarios)
    finally:
        store.close()
    labels = {s.id: s.vpn_label for s in plan.scenarios}
    said = text(result, labels)
    write_own(out_dir / "answer.txt", said)
    drawn = figure(standing, labels, race, out_dir / "race.png")
    out.print(safe(said + f"\nthe race: {drawn}\nthe answer: {out_dir / 'answer.txt'}", lines=True), highlight=False)
    return bool(result.finalists)
