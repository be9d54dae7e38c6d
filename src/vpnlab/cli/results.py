"""The commands that read a results directory: show, export, report, compare, stats."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from ..errors import VpnlabError
from ..console import err, out, user_errors
from .common import app


def _show(directory: Path) -> None:
    from ..analysis import summarise
    from ..labels import for_scenarios
    from ..machines import machine_lines, measured_where, sitting_versions
    from ..store import Store

    store = Store.open_dir(directory)
    try:
        summaries = summarise(store)
        scenarios = store.scenarios()
        runs = store.runs()
    finally:
        store.close()
    last = runs[-1]
    out.print(f"[bold]{last['study_name']}[/] - measured {measured_where(last, scenarios)}, vpnlab "
              f"{sitting_versions(runs)}, status {last['status']}", highlight=False)
    machines = machine_lines(runs, scenarios)
    if machines:
        out.print("measured on: " + "\n  ".join(machines), highlight=False)
    labels = for_scenarios(scenarios)  # as the report names them
    if labels.note:
        out.print(labels.note, highlight=False)
    if short := sum(sc.unfinished for sc in scenarios):
        out.print(f"[yellow]not finished:[/] {short} of {len(scenarios)} scenarios have fewer repetitions than the "
                  f"study's rule asks, so their figures are provisional; measure the rest with: "
                  f"vpnlab run --resume {directory}", highlight=False)
    for sc in scenarios:
        title = f"[bold]{labels.of(sc)}[/] | {sc.link_label} | {sc.workload_label}"
        title += " [yellow](not finished)[/]" if sc.unfinished else ""
        if sc.status == "failed":
            out.print(f"\n{title}: [red]failed[/] - {sc.failure}", highlight=False)
        else:
            _print_scenario(title, sc, {s.metric: s for s in summaries.get(sc.id, [])})
    _print_methods(last["study_text"], scenarios, directory)


def _print_scenario(title: str, sc, by_metric: dict) -> None:
    """One scenario's table of metrics (the tunnel-level ones go on a line below it), and its notes."""
    from .. import catalog
    from ..analysis import fmt, relative_text
    from ..machines import current_wording
    from ..stopping import lasting_notes

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("metric", "unit", "n", "mean", "sd", "95% CI", "vs no-VPN", "grade"):
        table.add_column(col, justify="left" if col in ("metric", "unit", "grade") else "right", no_wrap=True)
    for s in by_metric.values():
        if catalog.metric(s.metric).level == "tunnel":
            continue
        ci = "-" if math.isnan(s.ci_low) else f"{fmt(s.ci_low)} .. {fmt(s.ci_high)}"
        flag = f" ({s.flagged} flagged)" if s.flagged else ""
        flag += f" ({s.outliers} outlier{'s' if s.outliers > 1 else ''}, counted)" if s.outliers else ""
        flag += f" ({s.set_aside} flagged, left out)" if s.set_aside else ""
        table.add_row(s.metric, s.unit, str(s.n), fmt(s.mean), fmt(s.sd), ci, relative_text(s),
                      (s.grade or ("-" if s.grade_reason else "")) + flag)
    out.print(table)
    for s in by_metric.values():
        if s.grade_reason:
            out.print(f"  no grade for {s.metric}: {s.grade_reason}", highlight=False)
    out.print("  " + ", ".join(_tunnel_facts(sc, by_metric)), highlight=False)
    if notes := lasting_notes(current_wording(sc.notes)):  # (Stein's interval is the table's 95% CI, computed now)
        out.print(f"  [yellow]note:[/] {'; '.join(notes)}", highlight=False)


def _tunnel_facts(sc, by_metric: dict) -> list[str]:
    facts = [f"implementation {sc.implementation}"]
    if "setup_s" in by_metric:
        facts.append(f"set-up {by_metric['setup_s'].mean:.2f} s")
    if "overhead_bytes" in by_metric:
        model = by_metric.get("overhead_model_bytes")
        facts.append(f"overhead {by_metric['overhead_bytes'].mean:.0f} B per 1028-byte packet"
                     + (f" (model {model.mean:.0f} B)" if model else ""))
    if "tunnel_mtu" in by_metric:
        facts.append(f"MTU {by_metric['tunnel_mtu'].mean:.0f}")
    return facts


def _print_methods(study_text: str, scenarios, directory: Path) -> None:
    """How the numbers were obtained, as the report's methods paragraph says it."""
    from .. import methods

    rules = sorted({sc.repetition_rule for sc in scenarios})
    out.print("\n[bold]Methods.[/] " + methods.paragraph(study_text or "", rules, cpu=methods.cpu_text(directory)),
              highlight=False)


@app.command()
@user_errors
def show(directory: Path = typer.Argument(..., help="a results directory")):
    """Summarise a results directory: n, mean, sd, 95% CI and the value relative to no VPN."""
    from ..store import DB_NAME

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
    from .. import export as exporter
    from ..store import DB_NAME, Store

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
    from ..report import write as write_report
    from ..store import DB_NAME

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
    from ..compare import RUN_FOOTNOTES, RUN_HEADINGS, compare_runs, run_rows
    from ..store import DB_NAME, Store

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
        from ..report import render_table

        html.write_text(render_table(f"vpnlab: {dir_b} against {dir_a}", RUN_HEADINGS, rows))
        out.print(f"written {html}")


@app.command()
@user_errors
def stats(
    directory: Path = typer.Argument(..., help="a results directory"),
    pair: Optional[list[str]] = typer.Option(None, "--pair", help="'LABEL A|LABEL B' to compare (repeatable); "
                                             "default: configurations of one driver that differ in one thing"),
    secondary: bool = typer.Option(False, "--secondary", help="also the secondary tests (one-sided t, rank "
                                   "test) and Hedges' g; `export --table comparisons` has every column"),
):
    """Compare configurations: the paired t test on log(B/A) per round (Welch on logs when unpaired),
    Holm-corrected over every comparison the study defines whatever is printed, with a verdict
    (ahead / equivalent / undecided); one-sided t and rank tests as secondary, uncorrected."""
    from ..compare import SECONDARY_HEADINGS, STUDY_HEADINGS, study_comparisons, study_footnotes, study_rows
    from ..store import DB_NAME, Store

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
    # One table per link, workload and metric, so the columns fit a terminal.
    shown = [i for i, h in enumerate(STUDY_HEADINGS)
             if h not in ("link", "workload", "metric") and (secondary or h not in SECONDARY_HEADINGS)]
    groups: dict[tuple[str, str, str], list[list[str]]] = {}
    for row in study_rows(comparisons):
        groups.setdefault(tuple(row[:3]), []).append([row[i] for i in shown])
    out.print("comparisons, B against A ('Holm p' corrected over the study's family)", style="bold")
    for (link, workload, metric), rows in groups.items():
        table = Table(title=f"{link} | {workload} | {metric}", title_justify="left", box=box.SIMPLE_HEAD)
        for i in shown:
            heading = STUDY_HEADINGS[i]
            table.add_column(heading, justify="left" if heading in ("A", "B", "verdict") else "right",
                             no_wrap=heading not in ("A", "B"))
        for row in rows:
            table.add_row(*row)
        out.print(table)
    for line in study_footnotes(comparisons):
        if secondary or not line.startswith(("†", "‡")):
            out.print(line, highlight=False)
    if not secondary:
        out.print("secondary tests (one-sided t, rank test) and Hedges' g: --secondary", highlight=False)
