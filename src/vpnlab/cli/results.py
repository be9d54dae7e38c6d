"""The commands that read a results directory: show, export, report, compare, stats."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table

from ..store import results_dir
from ..core.errors import VpnlabError
from .console import err, out, user_errors
from ..core.printable import safe
from ..report.outputs import STDOUT, Output
from ..store.results_dir import read_store
from ..store import DB_NAME, SCHEMA_VERSION
from .common import app


def _show(directory: Path) -> None:
    from ..analyse.analysed import analyse
    from ..analyse.labels import for_scenarios
    from ..machines.provenance import machine_lines, measured_where, sitting_versions

    analysed = analyse(directory)
    summaries, scenarios, runs = analysed.summaries, analysed.scenarios, analysed.runs
    last = runs[-1]
    out.print(f"[bold]{safe(last['study_name'])}[/] - measured {safe(measured_where(last, scenarios))}, vpnlab "
              f"{safe(sitting_versions(runs))}, status {safe(results_dir.live_status(directory, last['status']))}",
              highlight=False)
    machines = machine_lines(runs, scenarios)
    if machines:
        out.print("measured on: " + "\n  ".join(map(safe, machines)), highlight=False)
    labels = for_scenarios(scenarios)  # as the report names them
    if labels.note:
        out.print(safe(labels.note), highlight=False)
    if short := sum(sc.unfinished for sc in scenarios):
        out.print(f"[yellow]not finished:[/] {short} of {len(scenarios)} scenarios have fewer repetitions than the "
                  f"study's rule asks, so their figures are provisional; measure the rest with: "
                  f"vpnlab run --resume {safe(directory)}", highlight=False)
    for sc in scenarios:
        title = f"[bold]{safe(labels.of(sc))}[/] | {safe(sc.link_label)} | {safe(sc.workload_label)}"
        title += " [yellow](not finished)[/]" if sc.unfinished else ""
        if sc.status == "failed":
            out.print(f"\n{title}: [red]failed[/] - {safe(sc.failure)}", highlight=False)
        else:
            _print_scenario(title, sc, {s.metric: s for s in summaries.get(sc.id, [])})
    _print_methods(analysed.study, scenarios, analysed.cpu_text, analysed.pairing_text)


def _print_scenario(title: str, sc, by_metric: dict) -> None:
    """One scenario's table of metrics (the tunnel-level ones go on a line below it), and its notes."""
    from .. import catalog
    from ..analyse.analysis import fmt, relative_text
    from ..machines.provenance import current_wording
    from ..analyse.stopping import lasting_notes

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
        table.add_row(safe(s.metric), safe(s.unit), str(s.n), fmt(s.mean), fmt(s.sd), ci, relative_text(s),
                      (s.grade or ("-" if s.grade_reason else "")) + flag)
    out.print(table)
    for s in by_metric.values():
        if s.grade_reason:
            out.print(f"  no grade for {safe(s.metric)}: {safe(s.grade_reason)}", highlight=False)
    out.print("  " + safe(", ".join(_tunnel_facts(sc, by_metric))), highlight=False)
    if notes := lasting_notes(current_wording(sc.notes)):  # (Stein's interval is the table's 95% CI, computed now)
        out.print(f"  [yellow]note:[/] {safe('; '.join(notes))}", highlight=False)


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


def _print_methods(study, scenarios, cpu: str, pairing: str) -> None:
    """How the numbers were obtained, as the report's methods paragraph says it."""
    from ..analyse import methods

    rules = sorted({sc.repetition_rule for sc in scenarios})
    paragraph = methods.paragraph(study, rules, cpu=cpu, pairing=pairing)
    out.print("\n[bold]Methods.[/] " + safe(paragraph), highlight=False)


@app.command()
@user_errors
def show(directory: Path = typer.Argument(..., help="a results directory")):
    """Summarise a results directory: n, mean, sd, 95% CI and the value relative to no VPN. Reads only."""
    _show(directory)


@app.command()
@user_errors
def export(
    directory: Path = typer.Argument(..., help="a results directory"),
    fmt: str = typer.Option("csv", "--format", help="csv or json"),
    output: str = typer.Option(STDOUT, "--output", "-o", help="file to write, - for standard output (the "
                               "default); an existing file is refused without --force"),
    table: str = typer.Option("samples", "--table",
                              help="samples (one row per sample per metric), summary, comparisons, or "
                              "findings (a seed study's verdicts, with what recomputes them)"),
    force: bool = typer.Option(False, "--force", help="replace an existing regular file given as --output"),
):
    """Every sample (long format), the per-scenario summary, the comparisons, or a seed study's
    findings. Reads the store only; writes only --output."""
    from ..report import export as exporter
    from ..analyse.analysed import analyse

    if fmt not in ("csv", "json"):
        raise VpnlabError(f"--format: expected csv or json, got {fmt!r}")
    if table not in exporter.TABLES:
        raise VpnlabError(f"--table: expected one of {', '.join(exporter.TABLES)}, got {table!r}")
    target = Output(output, "--output", force, protect=(directory / DB_NAME,))
    analysed = analyse(directory)
    with target.open() as fh:
        count = exporter.write(analysed, fmt, fh, table)
    if target.path is not None:
        err.print(f"{count} rows written to {safe(target)}", highlight=False)


@app.command()
@user_errors
def report(
    directory: Path = typer.Argument(..., help="a results directory"),
    output: Optional[str] = typer.Option(None, "--out", help="HTML file to write (default DIR/report.html, "
                                         "replaced); an existing file is refused without --force"),
    force: bool = typer.Option(False, "--force", help="replace an existing regular file given as --out"),
):
    """Write one self-contained HTML report: graded table, plots with 95% CIs, overhead, comparisons,
    recommendation. Reads the store only; writes only the report."""
    from ..report.html import write as write_report

    target = Output(output, "--out", force, protect=(directory / DB_NAME,)) if output is not None else None
    read_store(directory).close()  # refused before anything is computed if it is not a store to read
    out.print(f"report: {safe(write_report(directory, target))}", highlight=False)


@app.command()
@user_errors
def verdicts(directories: list[Path] = typer.Argument(..., help="results directories of seed studies")):
    """The seed verdicts of each results directory as Markdown table rows (the table in docs/seeds.md): what
    ran, and each finding's verdict with its ratio named for what it is (B/A of a metric)."""
    from ..report.verdict_table import table

    for d in directories:
        read_store(d).close()  # each refused before anything is computed if it is not a store to read
    print(table(directories))  # Markdown, not rich markup: printed as it is (verdict_table makes it safe)


@app.command("compare")
@user_errors
def compare_command(
    dir_a: Path = typer.Argument(..., help="results directory A"),
    dir_b: Path = typer.Argument(..., help="results directory B"),
    html: Optional[str] = typer.Option(None, "--html", help="also write the comparison as an HTML file (an "
                                       "existing file is refused without --force)"),
    force: bool = typer.Option(False, "--force", help="replace an existing regular file given as --html"),
):
    """Two runs side by side: the scenarios both have (measured in the same place), B against A as a
    ratio of geometric means with Welch's t test on logs, Holm-corrected; Mann-Whitney U secondary."""
    from ..analyse.compare import RUN_FOOTNOTES, RUN_HEADINGS, compare_runs, run_rows

    target = Output(html, "--html", force, protect=(dir_a / DB_NAME, dir_b / DB_NAME)) if html is not None else None
    store_a = read_store(dir_a)
    try:
        store_b = read_store(dir_b)
        try:
            diffs = compare_runs(store_a, store_b)
        finally:
            store_b.close()
    finally:
        store_a.close()
    if not diffs:
        raise VpnlabError("the two runs have no scenario in common (same VPN, link and workload labels)")
    table = Table(title=f"B = {safe(dir_b)} against A = {safe(dir_a)}", box=box.SIMPLE_HEAD)
    for col in RUN_HEADINGS:
        table.add_column(col, justify="left" if col in ("vpn", "link", "workload", "metric") else "right")
    rows = run_rows(diffs)
    for row in rows:
        table.add_row(*map(safe, row))
    out.print(table)
    for line in RUN_FOOTNOTES:
        out.print(line, highlight=False)
    if target:
        from ..report.html import render_table

        target.write_text(render_table(f"vpnlab: {dir_b} against {dir_a}", RUN_HEADINGS, rows))
        out.print(f"written {safe(target)}", highlight=False)


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
    from ..analyse.analysed import analyse
    from ..analyse.compare import SECONDARY_HEADINGS, STUDY_HEADINGS, study_comparisons, study_footnotes, study_rows

    pairs = None
    if pair:
        pairs = []
        for text in pair:
            if "|" not in text:
                raise VpnlabError(f"--pair: expected 'LABEL A|LABEL B', got {text!r}")
            a, b = (part.strip() for part in text.split("|", 1))
            pairs.append((a, b))
    analysed = analyse(directory)
    _known_labels(pairs or [], {sc.vpn_label for sc in analysed.scenarios})
    comparisons = study_comparisons(analysed.stored, pairs, analysed.family)
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
        table = Table(title=f"{safe(link)} | {safe(workload)} | {safe(metric)}", title_justify="left",
                      box=box.SIMPLE_HEAD)
        for i in shown:
            heading = STUDY_HEADINGS[i]
            table.add_column(heading, justify="left" if heading in ("A", "B", "verdict") else "right",
                             no_wrap=heading not in ("A", "B"))
        for row in rows:
            table.add_row(*map(safe, row))
        out.print(table)
    for line in study_footnotes(comparisons):
        if secondary or not line.startswith(("†", "‡")):
            out.print(safe(line), highlight=False)
    if not secondary:
        out.print("secondary tests (one-sided t, rank test) and Hedges' g: --secondary", highlight=False)


def _known_labels(pairs: list[tuple[str, str]], labels: set[str]) -> None:
    """Refuse a --pair label no configuration of the study has, listing the ones it has."""
    for label in (label for pair in pairs for label in pair):
        if label not in labels:
            raise VpnlabError(f"--pair: no configuration is labelled {label!r}; the study's labels: "
                              + ", ".join(repr(known) for known in sorted(labels)))


@app.command()
@user_errors
def upgrade(directory: Path = typer.Argument(..., help="a results directory written by an older vpnlab")):
    """Upgrade an older results store in place, for this vpnlab to read; a copy of it is kept first
    (results.sqlite.vN.bak beside it, never overwriting an earlier copy)."""
    was, backup = results_dir.upgrade(directory)
    if backup is None:
        out.print(f"{safe(directory)}: already at results schema {was}; nothing changed", highlight=False)
    else:
        out.print(f"{safe(directory)}: upgraded from results schema {was} to {SCHEMA_VERSION}; the store as it "
                  f"was is kept in {safe(backup)}", highlight=False)
