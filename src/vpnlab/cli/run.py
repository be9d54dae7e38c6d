"""`vpnlab run`: a study (a file, a built-in, or a stored one to resume) from plan to report."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..store import results_dir
from ..core.errors import StudyError, VpnlabError
from ..core.signals import Interrupted
from .console import EXIT_BUG, EXIT_INTERRUPTED, EXIT_SCENARIOS_FAILED, err, out, report_bug, user_errors
from ..core.printable import safe
from .common import app, need_root, print_table


def load_study_arg(study: str | None):
    from ..plan.study import builtin_studies, load_builtin, load_study

    if study is None:
        return load_builtin("default", here=True), True
    if not Path(study).exists():
        name = study.removeprefix("builtin:")
        if name in builtin_studies():
            return load_builtin(name, here=True), name == "default"
        raise StudyError(f"{study}: no such study file (built-in studies: {', '.join(sorted(builtin_studies()))})")
    return load_study(study), False


def stored_study(directory: Path):
    from ..store import DB_NAME
    from ..plan.study import parse_study

    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: no {DB_NAME} here, nothing to resume")
    results_dir.refuse_planted(directory)  # before even reading: the store's journal may be one
    runs = results_dir.check_store(directory / DB_NAME)  # read-only: a foreign or damaged file stays untouched
    if not runs:
        raise VpnlabError(f"{directory}: the results store has no run to resume")
    text = runs[0]["study_text"]
    return parse_study(text, f"{directory}/study (stored)", here=True), text


@app.command()
@user_errors
def run(
    study: Optional[str] = typer.Argument(None, help="study YAML file, or the name of a built-in study (default: 'default')"),
    out_path: Optional[str] = typer.Option(None, "--out", help="results directory, new or empty (default "
                                           "./vpnlab-results/<timestamp>)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan and its estimated duration; create nothing"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="finish an interrupted run in this results directory"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress bar"),
    report: bool = typer.Option(True, "--report/--no-report", help="end with the summary and report.html (without: "
                                "the samples only, as for a sitting of a long study; `vpnlab report DIR` writes them)"),
    backend: str = typer.Option("auto", "--backend",
                                help="auto: a VM only for what this kernel cannot run; netns: all here; vm: all in the VM"),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="PATH=VALUE: change a study field for this run, "
                                             "such as workloads[0].size=715M (repeatable)"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", "-i", help="Ansible inventory of the hosts the "
                                             "study's `hosts:` names: run it on them, over SSH. An executable file "
                                             "is a dynamic inventory: Ansible runs it as a program, as you (root)"),
):
    """Run a study: build the testbeds, bring the tunnels up, measure, store, summarise."""
    from ..plan.placement import place
    from ..plan.scenarios import make_plan
    from ..run.runner import Runner, default_out_dir

    if out_path == "":
        raise VpnlabError("--out: an empty path; name the results directory (or leave --out out for "
                          "./vpnlab-results/<timestamp>)")
    if resume is not None and out_path is not None:
        raise VpnlabError(f"--out {out_path}: a resumed run writes into its own directory ({resume}); "
                          "leave --out out, or copy the directory first and resume the copy")
    check_backend(backend)
    loaded, is_default = _the_study(study, resume, sets)
    out_dir = resume if resume is not None else Path(out_path) if out_path is not None else None
    if out_dir is not None:  # as the run would check it, dry or not, before anything is built
        results_dir.admissible(out_dir, loaded.source_text, resume is not None)
    plan = make_plan(loaded)
    hosts = None
    if loaded.hosts or inventory is not None:  # checked before anything is created or connected
        from ..hosts.testbed import HostSet

        if backend != "auto":
            raise VpnlabError(f"--backend {backend}: a study on real hosts runs on them")
        hosts = HostSet(loaded, inventory)
    if dry_run and (os.geteuid() != 0 or hosts):
        _print_plan(plan, None if not hosts else set())
        if hosts:
            out.print(f"on real hosts: {safe(hosts.text)} (not contacted)", highlight=False)
        return
    need_root("vpnlab run")
    placed = place(plan, backend, hosts)
    for why in placed.enforce(plan, drop=is_default):
        err.print(f"[yellow]skipped:[/] {safe(why)}", highlight=False)
    caps, in_vm = placed.caps, placed.in_vm
    if dry_run:  # exactly what the run would do: the same placement, twins and estimate
        _print_plan(plan, in_vm)
        if resume is not None:
            _print_left(Runner(plan, resume, caps, in_vm=in_vm), resume)
        return
    out_dir = out_dir or default_out_dir()
    held = results_dir.claim(out_dir, loaded.source_text, resume is not None)  # locked until exit
    if held.upgraded:
        err.print(safe(f"{out_dir}: its store was written by an older vpnlab (results schema {held.upgraded[0]}) and "
                       f"is upgraded to this one's; the store as it was is kept in {held.upgraded[1]}"), highlight=False)
    err.print(f"study [bold]{safe(loaded.name)}[/]: {len(plan.scenarios)} scenarios, {_estimate(plan, in_vm)}; "
              f"results in {safe(out_dir)}", highlight=False)
    if in_vm:
        err.print(f"{len(in_vm)} of them run in a VM (`vpnlab doctor STUDY` says why)", highlight=False)
    if hosts:
        err.print(f"on real hosts: {safe(hosts.text)}", highlight=False)
    runner = Runner(plan, out_dir, caps, console=err, progress=progress and sys.stderr.isatty(), in_vm=in_vm,
                    hosts=hosts, refused=placed.refused)
    try:
        runner.run()
    except (KeyboardInterrupt, Interrupted) as exc:
        err.print(f"[yellow]interrupted[/]: everything it created is removed; "
                  f"finish later with: vpnlab run --resume {safe(out_dir)}")
        raise typer.Exit(getattr(exc, "exit_code", EXIT_INTERRUPTED))
    if report:
        finish_run(out_dir)
    else:
        out.print(safe(f"results: {out_dir} (no report: --no-report; write it with: vpnlab report {out_dir})"))
    if runner.unfinished:
        err.print(f"[yellow]{len(runner.unfinished)} scenario(s) short of their repetitions[/]: their report shows "
                  f"what they have; measure the rest with: vpnlab run --resume {safe(out_dir)}")
    if runner.failures or runner.unfinished:
        raise typer.Exit(EXIT_SCENARIOS_FAILED)


def check_backend(backend: str) -> None:
    from ..plan.placement import BACKENDS

    if backend not in BACKENDS:
        raise VpnlabError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")


def _the_study(study: str | None, resume: Path | None, sets: list[str] | None):
    """The study to run (the one stored with a resumed run) with its --set overrides, and whether
    it is the default study."""
    from ..plan import overrides
    from ..plan.study import parse_study

    if resume is not None:
        from ..tune.design import RULES_FILE

        if (resume / RULES_FILE).is_file():
            raise StudyError(f"{resume}: a race's results (vpnlab tune): resume it with vpnlab tune --resume {resume}")
        loaded, text = stored_study(resume)
        if study is not None:
            given, _ = load_study_arg(study)
            if given.source_text != text:
                raise StudyError(f"{study}: differs from the study stored in {resume}; resume takes the stored one")
        is_default = loaded.name == "default"
    else:
        loaded, is_default = load_study_arg(study)
    if sets:  # the overridden study is a study of its own: shown, stored, compared on --resume
        if resume is not None:
            raise StudyError("--set: a resumed run takes the study stored with it, overrides included")
        loaded = parse_study(overrides.apply(loaded.source_text, sets), f"{loaded.source_path} with --set", here=True)
    return loaded, is_default


def finish_run(out_dir: Path) -> None:
    """Summary and report; a signal meanwhile leaves the run marked interrupted, with the way to
    write the report later, never a 'completed' run without its report. A bug in them leaves the
    measured run as it is and says how to write the report once it is fixed."""
    from ..analyse.analysed import analyse
    from ..report.html import write as write_report
    from ..store import Store

    try:
        analysed = analyse(out_dir)  # read and analysed once, for the summary and the report
        _compact(analysed)
        report = write_report(out_dir, analysed=analysed)
        out.print(safe(f"details: vpnlab show {out_dir}\nresults: {out_dir}\nreport:  {report}", lines=True))
    except Interrupted as exc:
        store = Store.open_dir(out_dir)
        try:
            store.finish_run(store.runs()[-1]["id"], "interrupted")
        finally:
            store.close()
        err.print(f"[yellow]interrupted[/] while writing the report: every sample is stored; "
                  f"write the report with: vpnlab report {safe(out_dir)}")
        raise typer.Exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001  (a bug in the analysis or the report, after every sample is stored)
        report_bug(exc)
        err.print(f"every sample is stored; once it is fixed, write the report with: vpnlab report {safe(out_dir)}")
        raise typer.Exit(EXIT_BUG) from None


def _compact(analysed) -> None:
    """The end of a run at a glance: a row per VPN, a column per link and workload with the
    workload's primary metric against no VPN (interval, grade where the data give one), failures."""
    from ..analyse.analysis import fmt, relative_text
    from ..catalog import KINDS
    from ..analyse.labels import for_scenarios
    from ..analyse.recommend import at_capacity

    summaries, scenarios = analysed.summaries, analysed.scenarios
    columns = list(dict.fromkeys((s.link_label, s.workload_label) for s in scenarios))
    rows: dict[str, dict] = {}
    labels = for_scenarios(scenarios)  # as the report and `vpnlab show` name them
    for sc in scenarios:
        row = rows.setdefault(labels.of(sc), {"failed": 0})
        if sc.status == "failed":
            row["failed"] += 1
            row[(sc.link_label, sc.workload_label)] = "[red]failed[/]"
            continue
        primary = KINDS[sc.workload].primary if sc.workload in KINDS else None
        s = next((x for x in summaries.get(sc.id, []) if x.metric == primary), None)
        if s is not None:
            compared = relative_text(s)  # '-' without a baseline to compare with: the value itself
            text = compared if compared != "-" else f"{fmt(s.mean)} {s.unit}"
            row[(sc.link_label, sc.workload_label)] = safe(text + (f" {s.grade}" if s.grade else ""))
    print_table("against no VPN (primary metric of each workload; `vpnlab show` has every metric)",
           ("vpn", *(safe(f"{link} {workload}") for link, workload in columns), "failed"),
           [(safe(vpn), *(row.get(c, "-") for c in columns), str(row["failed"])) for vpn, row in rows.items()])
    for sentence in at_capacity(analysed):
        out.print(safe(sentence), highlight=False)


def _reps(rule) -> str:
    return f"{rule.min}..{rule.max} (CI {rule.ci_target_pct:g}%)" if rule.adaptive else str(rule.max)


def _print_plan(plan, in_vm: set[str] | None) -> None:
    """The plan as the run will carry it out, each scenario where it runs (here, the VM, its pair of
    real hosts); `in_vm` None: placement unknown (not root)."""
    from ..plan.scenarios import duration

    table = Table(title=f"plan of study '{safe(plan.study.name)}' ({plan.study.topology})")
    for col in ("#", "id", "vpn", "link", "workload", "reps", "runs", "est."):
        table.add_column(col)
    placed = in_vm or set()
    for s in plan.scenarios:
        where = ("?" if in_vm is None else "VM" if s.id in placed else "here") if not s.hosts else "+".join(s.hosts.values())
        table.add_row(str(s.index), s.id, safe(s.vpn_label), safe(s.link.label), safe(s.workload.full_label),
                      _reps(s.repetitions), where, duration(s.estimate_s(s.id in placed)))
    out.print(table)
    vm = f", {len(placed)} of them in a VM (its boot included)" if placed else ""
    unknown = "; run as root to see which scenarios go to the VM" if in_vm is None else ""
    out.print(f"{len(plan.scenarios)} scenarios{vm}, {_estimate(plan, placed)}{unknown}. Nothing was created.")


def _print_left(runner, directory: Path) -> None:
    """What `--resume` would measure in `directory`, read without writing to it."""
    from ..plan.scenarios import duration

    store = results_dir.read_store(directory)
    try:
        todo, total, said = runner.what_is_left(store)
    finally:
        store.close()
    if not todo:
        out.print("--resume would measure nothing: every scenario has its repetitions (or failed)", highlight=False)
    else:
        out.print(f"--resume would measure what is left: {said or f'about {duration(total)}'}", highlight=False)


def _estimate(plan, in_vm: set[str]) -> str:
    """The whole study's estimated time; with adaptive repetitions, from every scenario stopping at
    its minimum to every one needing its maximum (a noisy configuration raises its comparison group)."""
    from ..plan.scenarios import duration

    least = duration(plan.estimate_s(in_vm))
    rule = plan.study.repetitions
    if not rule.adaptive:
        return f"about {least}"
    return (f"about {least} at {rule.min} repetitions each, up to {duration(plan.estimate_s(in_vm, most=True))} "
            f"if the interval target asks for all {rule.max}")
