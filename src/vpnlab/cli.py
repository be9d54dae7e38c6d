"""The `vpnlab` command line."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich import box
from rich.markup import escape
from rich.table import Table

from . import __version__, results_dir, signals
from .analysis import fmt
from .errors import StudyError, VpnlabError
from .signals import Interrupted

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure what a VPN costs, on real VPN software.")
# Piped or logged output keeps whole tables rather than squeezing them to 80 columns.
out = Console(width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)

EXIT_BAD_INPUT = 2
EXIT_SCENARIOS_FAILED = 1
EXIT_INTERRUPTED = 130


def user_errors(func):
    """Print a VpnlabError as one clear message and exit non-zero, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except VpnlabError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT)
        except Interrupted as exc:
            err.print(f"[yellow]interrupted[/] ({exc}): everything it created is removed")
            raise typer.Exit(exc.exit_code)
        except results_dir.STORAGE_ERRORS as exc:  # a full disk, an unreadable store
            known = results_dir.explain(exc)
            if known is None:
                raise
            err.print(f"[bold red]error:[/] {known[0]}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(known[1])

    return wrapper


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise VpnlabError(f"{what} builds network namespaces and needs root: run it with sudo")


def _load(study: str | None):
    from .study import builtin_studies, load_builtin, load_study

    if study is None:
        return load_builtin("default"), True
    if not Path(study).exists():
        name = study.removeprefix("builtin:")
        if name in builtin_studies():
            return load_builtin(name), name == "default"
        raise StudyError(f"{study}: no such study file (built-in studies: {', '.join(sorted(builtin_studies()))})")
    return load_study(study), False


def _stored_study(directory: Path):
    from .store import DB_NAME
    from .study import parse_study

    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: no {DB_NAME} here, nothing to resume")
    runs = results_dir.check_store(directory / DB_NAME)  # read-only: a foreign or damaged file stays untouched
    if not runs:
        raise VpnlabError(f"{directory}: the results store has no run to resume")
    text = runs[0]["study_text"]
    return parse_study(text, f"{directory}/study (stored)"), text


@app.command()
@user_errors
def run(
    study: Optional[str] = typer.Argument(None, help="study YAML file, or the name of a built-in study (default: 'default')"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="results directory (default ./vpnlab-results/<timestamp>)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan and its estimated duration; create nothing"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="finish an interrupted run in this results directory"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress bar"),
    backend: str = typer.Option("auto", "--backend",
                                help="auto: a VM only for what this kernel cannot run; netns: all here; vm: all in the VM"),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="PATH=VALUE: change a study field for this run, "
                                             "such as workloads[0].size=715M (repeatable)"),
):
    """Run a study: build the testbeds, bring the tunnels up, measure, store, summarise."""
    from . import overrides
    from .plan import BACKENDS, make_plan, place
    from .study import parse_study
    from .runner import Runner, default_out_dir

    if resume is not None:
        loaded, text = _stored_study(resume)
        if study is not None:
            given, _ = _load(study)
            if given.source_text != text:
                raise StudyError(f"{study}: differs from the study stored in {resume}; resume takes the stored one")
        out_dir, is_default = resume, loaded.name == "default"
    else:
        loaded, is_default = _load(study)
    if sets:  # the overridden study is a study of its own: shown, stored, compared on --resume
        if resume is not None:
            raise StudyError("--set: a resumed run takes the study stored with it, overrides included")
        loaded = parse_study(overrides.apply(loaded.source_text, sets), f"{loaded.source_path} with --set")
    plan = make_plan(loaded)
    if backend not in BACKENDS:
        raise VpnlabError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if dry_run and os.geteuid() != 0:
        _print_plan(plan, None)
        return
    _need_root("vpnlab run")
    caps, problems, in_vm = place(plan, backend)
    if problems and is_default:
        # The default study means "every VPN this machine can run": drop the others, say so.
        for p in problems.values():
            err.print(f"[yellow]skipped:[/] {p}", highlight=False)
        plan.drop(problems)
    elif problems:
        raise VpnlabError("this machine cannot run the study as written:\n  " + "\n  ".join(problems.values())
                          + "\n(`vpnlab doctor` lists what is missing and which packages provide it)")
    if dry_run:  # exactly what the run would do: the same placement, twins and estimate
        _print_plan(plan, in_vm)
        return
    out_dir = out_dir or default_out_dir()
    held = results_dir.claim(out_dir, loaded.source_text, resume is not None)  # noqa: F841 (locked until exit)
    err.print(f"study [bold]{loaded.name}[/]: {len(plan.scenarios)} scenarios, about "
              f"{_duration(plan.estimate_s(in_vm))}; results in {out_dir}", highlight=False)
    if in_vm:
        err.print(f"{len(in_vm)} of them run in a VM (`vpnlab doctor STUDY` says why)", highlight=False)
    runner = Runner(plan, out_dir, caps, console=err, progress=progress and sys.stderr.isatty(), in_vm=in_vm)
    try:
        runner.run()
    except (KeyboardInterrupt, Interrupted) as exc:
        err.print(f"[yellow]interrupted[/]: everything it created is removed; "
                  f"finish later with: vpnlab run --resume {out_dir}")
        raise typer.Exit(getattr(exc, "exit_code", EXIT_INTERRUPTED))
    _finish(out_dir)
    if runner.failures:
        raise typer.Exit(EXIT_SCENARIOS_FAILED)


def _finish(out_dir: Path) -> None:
    """Summary and report; a signal meanwhile leaves the run marked interrupted, with the way to
    write the report later, never a 'completed' run without its report."""
    from .report import write as write_report
    from .store import Store

    try:
        _compact(out_dir)
        out.print(f"details: vpnlab show {out_dir}\nresults: {out_dir}\nreport:  {write_report(out_dir)}")
    except Interrupted as exc:
        store = Store.open_dir(out_dir)
        try:
            store.finish_run(store.runs()[-1]["id"], "interrupted")
        finally:
            store.close()
        err.print(f"[yellow]interrupted[/] while writing the report: every sample is stored; "
                  f"write the report with: vpnlab report {out_dir}")
        raise typer.Exit(exc.exit_code)


def _compact(directory: Path) -> None:
    """The end of a run at a glance: a row per VPN, a column per link and workload with the
    workload's primary metric against no VPN (interval, grade where the data give one), failures."""
    from .analysis import relative_text, summarise
    from .store import Store
    from .workloads import KINDS

    store = Store.open_dir(directory)
    try:
        summaries, scenarios = summarise(store), store.scenarios()
    finally:
        store.close()
    columns = list(dict.fromkeys((s.link_label, s.workload_label) for s in scenarios))
    rows: dict[str, dict] = {}
    for sc in scenarios:
        row = rows.setdefault(sc.shown, {"failed": 0})
        if sc.status == "failed":
            row["failed"] += 1
            row[(sc.link_label, sc.workload_label)] = "[red]failed[/]"
            continue
        primary = KINDS[sc.workload].primary if sc.workload in KINDS else None
        s = next((x for x in summaries.get(sc.id, []) if x.metric == primary), None)
        if s is not None:
            compared = relative_text(s)  # '-' without a baseline to compare with: the value itself
            text = compared if compared != "-" else f"{fmt(s.mean)} {s.unit}"
            row[(sc.link_label, sc.workload_label)] = text + (f" {s.grade}" if s.grade else "")
    _table("against no VPN (primary metric of each workload; `vpnlab show` has every metric)",
           ("vpn", *(f"{link} {workload}" for link, workload in columns), "failed"),
           [(vpn, *(row.get(c, "-") for c in columns), str(row["failed"])) for vpn, row in rows.items()])


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _reps(rule) -> str:
    return f"{rule.min}..{rule.max} (CI {rule.ci_target_pct:g}%)" if rule.adaptive else str(rule.max)


def _print_plan(plan, in_vm: set[str] | None) -> None:
    """The plan as the run will carry it out; `in_vm` None: placement unknown (not root)."""
    table = Table(title=f"plan of study '{plan.study.name}' ({plan.study.topology})")
    for col in ("#", "id", "vpn", "link", "workload", "reps", "runs", "est."):
        table.add_column(col)
    placed = in_vm or set()
    for s in plan.scenarios:
        where = "?" if in_vm is None else ("VM" if s.id in placed else "here")
        table.add_row(str(s.index), s.id, s.vpn_label, s.link.label, s.workload.label,
                      _reps(s.repetitions), where, _duration(s.estimate_s(s.id in placed)))
    out.print(table)
    adaptive = " (adaptive repetitions: at least)" if plan.study.repetitions.adaptive else ""
    vm = f", {len(placed)} of them in a VM (its boot included)" if placed else ""
    unknown = "; run as root to see which scenarios go to the VM" if in_vm is None else ""
    out.print(f"{len(plan.scenarios)} scenarios{vm}, estimated{adaptive} {_duration(plan.estimate_s(placed))}"
              f"{unknown}. Nothing was created.")


def _show(directory: Path) -> None:
    from . import metrics
    from .analysis import relative_text, summarise
    from .store import Store

    store = Store.open_dir(directory)
    try:
        summaries = summarise(store)
        scenarios = store.scenarios()
        runs = store.runs()
    finally:
        store.close()
    last = runs[-1]
    out.print(f"[bold]{last['study_name']}[/] - kernel {last['kernel']}, vpnlab {last['vpnlab_version']}, "
              f"status {last['status']}")
    for sc in scenarios:
        title = f"[bold]{sc.vpn_label}[/] | {sc.link_label} | {sc.workload_label}"
        if sc.status == "failed":
            out.print(f"\n{title}: [red]failed[/] - {sc.failure}", highlight=False)
            continue
        by_metric = {s.metric: s for s in summaries.get(sc.id, [])}
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("metric", "unit", "n", "mean", "sd", "95% CI", "vs no-VPN", "grade"):
            table.add_column(col, justify="left" if col in ("metric", "unit", "grade") else "right", no_wrap=True)
        for s in by_metric.values():
            if metrics.get(s.metric).level == "tunnel":
                continue
            ci = "-" if math.isnan(s.ci_low) else f"{fmt(s.ci_low)} .. {fmt(s.ci_high)}"
            flag = f" ({s.flagged} flagged)" if s.flagged else ""
            flag += f" ({s.outliers} outlier{'s' if s.outliers > 1 else ''}, counted)" if s.outliers else ""
            table.add_row(s.metric, s.unit, str(s.n), fmt(s.mean), fmt(s.sd), ci, relative_text(s),
                          (s.grade or ("-" if s.grade_reason else "")) + flag)
        out.print(table)
        for s in by_metric.values():
            if s.grade_reason:
                out.print(f"  no grade for {s.metric}: {s.grade_reason}", highlight=False)
        tunnel = [f"implementation {sc.implementation}"]
        if "setup_s" in by_metric:
            tunnel.append(f"set-up {by_metric['setup_s'].mean:.2f} s")
        if "overhead_bytes" in by_metric:
            model = by_metric.get("overhead_model_bytes")
            tunnel.append(f"overhead {by_metric['overhead_bytes'].mean:.0f} B per 1028-byte packet"
                          + (f" (model {model.mean:.0f} B)" if model else ""))
        if "tunnel_mtu" in by_metric:
            tunnel.append(f"MTU {by_metric['tunnel_mtu'].mean:.0f}")
        out.print("  " + ", ".join(tunnel), highlight=False)
        if sc.notes:
            out.print(f"  [yellow]note:[/] {sc.notes}", highlight=False)
    _print_methods(last["study_text"], scenarios)


def _print_methods(study_text: str, scenarios) -> None:
    """How the numbers were obtained, as the report's methods paragraph says it."""
    from . import methods

    rules = sorted({sc.repetition_rule for sc in scenarios})
    out.print("\n[bold]Methods.[/] " + methods.paragraph(methods.study_order(study_text or ""), rules),
              highlight=False)


@app.command()
@user_errors
def show(directory: Path = typer.Argument(..., help="a results directory")):
    """Summarise a results directory: n, mean, sd, 95% CI and the value relative to no VPN."""
    from .store import DB_NAME

    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    _show(directory)


@app.command()
@user_errors
def export(
    directory: Path = typer.Argument(..., help="a results directory"),
    fmt: str = typer.Option("csv", "--format", help="csv or json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="file to write (default: standard output)"),
    table: str = typer.Option("samples", "--table",
                              help="samples (one row per sample per metric), summary, or comparisons"),
):
    """Every sample (long format), the per-scenario summary, or the comparisons."""
    from . import export as exporter
    from .store import DB_NAME, Store

    if fmt not in ("csv", "json"):
        raise VpnlabError(f"--format: expected csv or json, got {fmt!r}")
    if table not in exporter.TABLES:
        raise VpnlabError(f"--table: expected one of {', '.join(exporter.TABLES)}, got {table!r}")
    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    store = Store.open_dir(directory)
    try:
        if output:
            with open(output, "w", newline="") as fh:
                count = exporter.write(store, fmt, fh, table)
            err.print(f"{count} rows written to {output}")
        else:
            exporter.write(store, fmt, sys.stdout, table)
    finally:
        store.close()


@app.command()
@user_errors
def report(
    directory: Path = typer.Argument(..., help="a results directory"),
    output: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default DIR/report.html)"),
):
    """Write one self-contained HTML report: graded table, plots with 95% CIs, overhead, comparisons,
    recommendation."""
    from .report import write as write_report
    from .store import DB_NAME

    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    out.print(f"report: {write_report(directory, output)}")


@app.command("compare")
@user_errors
def compare_command(
    dir_a: Path = typer.Argument(..., help="results directory A"),
    dir_b: Path = typer.Argument(..., help="results directory B"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the comparison as an HTML file"),
):
    """Two runs side by side: the scenarios both have (measured in the same place), B against A as a
    ratio of geometric means with Welch's t test on logs, Holm-corrected; Mann-Whitney U secondary."""
    from .compare import RUN_FOOTNOTES, RUN_HEADINGS, compare_runs, run_rows
    from .store import DB_NAME, Store

    for d in (dir_a, dir_b):
        if not (d / DB_NAME).is_file():
            raise VpnlabError(f"{d}: not a vpnlab results directory (no {DB_NAME})")
    store_a, store_b = Store.open_dir(dir_a), Store.open_dir(dir_b)
    try:
        diffs = compare_runs(store_a, store_b)
    finally:
        store_a.close()
        store_b.close()
    if not diffs:
        raise VpnlabError("the two runs have no scenario in common (same VPN, link and workload labels)")
    table = Table(title=f"B = {dir_b} against A = {dir_a}", box=box.SIMPLE_HEAD)
    for col in RUN_HEADINGS:
        table.add_column(col, justify="left" if col in ("vpn", "link", "workload", "metric") else "right")
    rows = run_rows(diffs)
    for row in rows:
        table.add_row(*row)
    out.print(table)
    for line in RUN_FOOTNOTES:
        out.print(line, highlight=False)
    if html:
        from .report import render_table

        html.write_text(render_table(f"vpnlab: {dir_b} against {dir_a}", RUN_HEADINGS, rows))
        out.print(f"written {html}")


@app.command()
@user_errors
def stats(
    directory: Path = typer.Argument(..., help="a results directory"),
    pair: Optional[list[str]] = typer.Option(None, "--pair", help="'LABEL A|LABEL B' to compare (repeatable); "
                                             "default: configurations of one driver that differ in one thing"),
):
    """Compare configurations: the paired t test on log(B/A) per round (Welch on logs when unpaired),
    Holm-corrected over every comparison the study defines whatever is printed, with a verdict
    (ahead / equivalent / undecided); one-sided t and rank tests as secondary, uncorrected."""
    from .compare import STUDY_HEADINGS, study_comparisons, study_footnotes, study_rows
    from .store import DB_NAME, Store

    if not (directory / DB_NAME).is_file():
        raise VpnlabError(f"{directory}: not a vpnlab results directory (no {DB_NAME})")
    pairs = None
    if pair:
        pairs = []
        for text in pair:
            if "|" not in text:
                raise VpnlabError(f"--pair: expected 'LABEL A|LABEL B', got {text!r}")
            a, b = (part.strip() for part in text.split("|", 1))
            pairs.append((a, b))
    store = Store.open_dir(directory)
    try:
        comparisons = study_comparisons(store, pairs)
    finally:
        store.close()
    if not comparisons:
        out.print("no comparisons: they need two configurations of one driver that differ in one thing "
                  "(or --pair), each with at least two repetitions")
        return
    table = Table(title="comparisons (B against A; 'Holm p' corrected over the study's family)",
                  box=box.SIMPLE_HEAD)
    for col in STUDY_HEADINGS:
        table.add_column(col, justify="left" if col in ("link", "workload", "metric", "A", "B", "verdict") else "right")
    for row in study_rows(comparisons):
        table.add_row(*row)
    out.print(table)
    for line in study_footnotes(comparisons):
        out.print(line, highlight=False)


@app.command()
@user_errors
def doctor(
    study: Optional[str] = typer.Argument(None, help="also say where each scenario of this study would run"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    backend: str = typer.Option("auto", "--backend", help="as for `vpnlab run`"),
):
    """What this kernel and machine offer, which VPN implementations can run here, whether a VM
    can run the rest, and (given a study) where each of its scenarios would run."""
    from . import vm
    from .capabilities import detect, tool_versions

    _need_root("vpnlab doctor")
    caps = detect()
    versions = tool_versions()
    report = {
        "kernel": caps.kernel,
        "features": caps.features,
        "tools": {t: {"path": path, "version": versions.get(t)} for t, path in caps.tools.items()},
        "drivers": _driver_usability(caps),
        "vm": vm.describe(),
        "placement": _placement(study, backend, caps) if study is not None else [],
    }
    if as_json:
        out.print_json(json.dumps(report))
        return
    _print_doctor(report, caps, study, backend)


def _driver_usability(caps) -> dict:
    from .drivers import REGISTRY

    drivers = {}
    for name, driver in REGISTRY.items():
        drivers[name] = [{"implementation": impl.name, "usable": not impl.missing(caps), "missing": impl.missing(caps)}
                         for impl in driver.implementations(driver.Options())]
    return drivers


def _placement(study: str, backend: str, caps) -> list[dict]:
    from .plan import check_scenario, make_plan, place

    plan = make_plan(_load(study)[0])
    _, problems, in_vm = place(plan, backend)
    rows = []
    for sc in plan.scenarios:
        where = "nowhere" if sc.index in problems else ("vm" if sc.id in in_vm else "here")
        why = problems.get(sc.index) or ("; ".join(check_scenario(sc, caps)) if where == "vm" else "")
        if sc.vm_twin:
            why = "the no-VPN baseline again, for the VPNs measured in the VM (emulation slows both)"
        rows.append({"index": sc.index, "scenario": sc.label, "runs": where, "why": why})
    return rows


def _print_doctor(report: dict, caps, study: str | None, backend: str) -> None:
    from .capabilities import FEATURES

    _table(f"kernel {caps.kernel} and libraries", ("feature", "present"),
           [(text, "[green]yes[/]" if caps.has(f) else "[red]no[/]") for f, text in FEATURES.items()])
    _table("tools", ("tool", "where", "version / how to get it"),
           [(t, info["path"] or "[red]missing[/]", info["version"] or caps.hint(t))
            for t, info in sorted(report["tools"].items())])
    _table("VPN drivers", ("driver", "implementation", "usable here"),
           [(name, i["implementation"], "[green]yes[/]" if i["usable"] else "[red]no[/]: needs " + ", ".join(i["missing"]))
            for name, impls in report["drivers"].items() for i in impls])
    info = report["vm"]
    if info["available"]:
        out.print(f"VM backend: available ({'KVM' if info['kvm'] else 'software emulation (TCG): slow'}; "
                  f"kernel {info['kernel']}); with --backend auto it runs what this kernel cannot")
    else:
        out.print(f"VM backend: [red]unavailable[/]: {info['problem']}")
    if report["placement"]:
        _table(f"where the scenarios of {study} run (--backend {backend})", ("#", "scenario", "runs", "why"),
               [(str(r["index"]), r["scenario"], r["runs"], r["why"]) for r in report["placement"]])


def _table(title: str, columns: tuple[str, ...], rows) -> None:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    out.print(table)


@app.command("list")
def list_things():
    """VPN drivers with their options, workload kinds, every metric vpnlab can record, built-in studies."""
    from .drivers import REGISTRY
    from .metrics import all_metrics
    from .study import builtin_studies
    from .workloads import KINDS

    _table("VPN drivers", ("driver", "what", "options (default)"),
           [(name, driver.summary, ", ".join(f"{k}={f.default!r}" if f.default is not None else k
                                             for k, f in driver.Options.model_fields.items()) or "-")
            for name, driver in REGISTRY.items()])
    _table("workloads", ("kind", "what", "primary metric", "metrics"),
           [(kind, k.summary, k.primary, ", ".join(m.name for m in k.metrics)) for kind, k in KINDS.items()])
    _table("metrics", ("metric", "unit", "direction", "recorded by", "meaning"),
           [(m.name, m.unit, m.direction, m.producers, m.meaning) for m in all_metrics().values()])
    out.print("built-in studies: " + ", ".join(sorted(builtin_studies())))


@app.command()
@user_errors
def clean():
    """Remove what crashed runs left behind (namespaces, processes, keys), and nothing else."""
    from .testbed.state import clean_stale_runs

    _need_root("vpnlab clean")
    cleaned = clean_stale_runs()
    if not cleaned:
        out.print("nothing to clean")
    for line in cleaned:
        out.print(f"cleaned {line}")


@app.callback(invoke_without_command=True)
def main(version: bool = typer.Option(False, "--version", help="print the version and exit")):
    signals.install()  # before anything is created, until the program exits
    if version:
        out.print(f"vpnlab {__version__}")
        raise typer.Exit()


from .hosts.cli import app as hosts_app  # noqa: E402  (registered last: it imports nothing from here)
app.add_typer(hosts_app, name="hosts")
