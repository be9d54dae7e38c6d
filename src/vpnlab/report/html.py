"""One self-contained HTML report per results directory (matplotlib SVG inline, jinja2).

Nothing is fetched when it opens: no scripts, fonts or styles from elsewhere.
Every number a reader should not trust blindly (few repetitions, a wide
interval, flagged samples, failed scenarios) is marked where it appears.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render to SVG text
import matplotlib.pyplot as plt  # noqa: E402
from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: E402

from .. import catalog  # noqa: E402
from ..analyse import findings, methods, recommend, sensitivity
from ..analyse.analysed import Analysed, analyse  # noqa: E402
from ..analyse.analysis import Summary, baseline_of, fmt, relative_text, summary_text  # noqa: E402
from ..analyse.compare import STUDY_HEADINGS, printed, study_footnotes, study_rows  # noqa: E402
from .algorithms import table as algorithm_table  # noqa: E402
from ..analyse.labels import Labels, for_scenarios as short_labels  # noqa: E402
from ..analyse.stopping import lasting_notes, target_met  # noqa: E402
from ..plan.study import RepetitionRule  # noqa: E402
from ..analyse.stats.grades import MIN_N, band  # noqa: E402
from ..analyse.stats.outliers import K as OUTLIER_K  # noqa: E402
from ..measure.observers import FRAGMENTED  # noqa: E402
from ..machines.provenance import current_wording, machine_lines, measured_where, sitting_versions  # noqa: E402
from .field_table import field_figures, field_table  # noqa: E402
from .outputs import Output  # noqa: E402
from ..store import ScenarioRow, Stored  # noqa: E402
from ..catalog import KINDS  # noqa: E402
from ..workloads.base import WorkloadOptions  # noqa: E402

WIDE_CI_PCT = 10.0   # a 95% CI half-width above this share of the mean is marked
FEW_SAMPLES = 3

DARK_GRADES = {"excellent", "very weak"}  # white text on these
GRADE_COLOURS = {  # Jaha 2014's colours, from dark green to dark red
    "excellent": "#1b7837", "very good": "#a6dba0", "good": "#d9c84a",
    "acceptable": "#fff3a0", "weak": "#f4a582", "very weak": "#b2182b",
}


@dataclass
class Cell:
    text: str
    css: str = ""
    colour: str = ""
    warn: str = ""


@dataclass
class Figure:
    title: str
    svg: str
    caption: str = ""
    drawn: object = field(default=None, repr=False, compare=False)  # the matplotlib figure (tests read its artists)


@dataclass
class Report:
    run: dict
    runs: int
    scenarios: list
    failed: list
    notes: list   # (text, the scenarios it concerns): notes, kinds of flag, outliers, missed targets
    measured_where: str = ""                            # on this machine, in its VM (how), or both
    table_vi: dict = field(default_factory=dict)        # link -> (headings, rows)
    seed_table_vi: dict = field(default_factory=dict)   # the same, graded as the seed did (analysis: seed_grading)
    flagged_counted: str = "counted"                    # how the study counts flagged samples
    latency_floor_ms: str = ""                          # the smallest no-VPN delay graded (analysis)
    flagged_both_ways: list = field(default_factory=list)  # rows of sensitivity.HEADINGS
    figures: list = field(default_factory=list)
    tunnel_rows: list = field(default_factory=list)
    comparisons: list = field(default_factory=list)      # the one-difference pairs, printed
    comparison_rows: list = field(default_factory=list)
    comparison_notes: list = field(default_factory=list)
    comparison_headings: list = field(default_factory=lambda: STUDY_HEADINGS)
    recommendations: list = field(default_factory=list)
    implementations: list = field(default_factory=list)
    links: list = field(default_factory=list)
    rules: list = field(default_factory=list)
    methods: str = ""
    labels: Labels = field(default_factory=Labels)       # the run's short labels (labels.py), everywhere
    algorithms: object = None                            # "Algorithms per profile" (algorithms.py)
    machines: list = field(default_factory=list)         # what the results came from (machines.py)
    mesh_pairs: list = field(default_factory=list)       # a mesh's pairs, each one's mean (mesh_pair_rows)
    mesh_rows: list = field(default_factory=list)        # a mesh's figures against no VPN (mesh_rows)
    mesh_metrics: list = field(default_factory=list)     # ... their columns
    field_columns: list = field(default_factory=list)    # the field conditions measured (field_table.py)
    field_rows: list = field(default_factory=list)       # ... each VPN's verdict under each
    field_figure_columns: list = field(default_factory=list)  # the figures the verdicts rest on (field_figures)
    field_figure_rows: list = field(default_factory=list)     # ... a row per VPN and condition


# What a mesh's reader asks of each VPN: what it carried in all and between its worst pair, the delay
# under that load, how long a new peer took to join, what the overlay sends while nobody else does.
MESH_METRICS = ("throughput_mbps", "worst_pair_throughput_mbps", "rtt_under_load_ms", "join_s",
                "idle_control_bytes_per_s")


def mesh_rows(scenarios: list, stat: dict) -> tuple[list[str], list[dict]]:
    """The MESH_METRICS the study's mesh scenarios measured (the columns), and a row per scenario: each
    figure with its interval and against no VPN's (Table VI grades only the primary metric)."""
    meshes = [s for s in sorted(scenarios, key=lambda s: s.idx) if s.topology == "mesh"]
    columns = [m for m in MESH_METRICS if any((s.id, m) in stat for s in meshes)]
    rows = [{"vpn": s.vpn_label, "link": s.link_label, "workload": s.workload_label,
             "cells": [summary_text(stat[(s.id, m)]) if (s.id, m) in stat else "-" for m in columns]}
            for s in meshes]
    return columns, rows


def mesh_pair_rows(scenarios: list, pairs: list) -> list[dict]:
    """For each mesh scenario measured between several pairs: its primary metric's mean per pair over the
    valid repetitions, the worst pair first, beside the aggregate the sample holds."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    by_id = {s.id: s for s in scenarios}
    for scenario_id, _, pair, values in pairs:
        primary = KINDS[by_id[scenario_id].workload].primary
        if primary in values:
            found[scenario_id][pair].append(values[primary])
    rows = []
    for scenario_id, per_pair in found.items():
        s, primary = by_id[scenario_id], KINDS[by_id[scenario_id].workload].primary
        if len(per_pair) < 2:
            continue
        metric = catalog.metric(primary)
        means = sorted(((statistics.fmean(v), pair) for pair, v in per_pair.items()),
                       reverse=not metric.higher_is_better)
        rows.append({"vpn": s.vpn_label, "link": s.link_label, "workload": s.workload_label,
                     "metric": f"{primary} ({metric.unit})",
                     "pairs": ", ".join(f"{pair} {fmt(mean)}" for mean, pair in means)})
    return rows


def _grouped_notes(scenarios: list) -> list[tuple[str, list[str]]]:
    """Each note once, with the scenarios it concerns (a study run in the VM gives every one
    of them the same note)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for s in scenarios:
        for note in lasting_notes(current_wording(s.notes)):
            groups[note].append(s.label)
    return list(groups.items())


def trust(s: Summary | None) -> str:
    """Why a figure deserves care, or ''."""
    if s is None:
        return ""
    reasons = []
    if s.n < FEW_SAMPLES:
        reasons.append(f"only {s.n} sample{'s' if s.n != 1 else ''}")
    elif s.ci_half_pct > WIDE_CI_PCT:
        reasons.append(f"95% CI ±{s.ci_half_pct:.0f}%")
    if s.flagged:
        reasons.append(f"{s.flagged} flagged sample{'s' if s.flagged != 1 else ''}")
    if s.outliers:
        reasons.append(f"{s.outliers} outlier{'s' if s.outliers != 1 else ''} (counted)")
    if s.set_aside:
        reasons.append(f"{s.set_aside} flagged sample{'s' if s.set_aside != 1 else ''} left out, as the study says")
    return ", ".join(reasons)


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inline SVG


def _figure(title: str, fig, caption: str) -> Figure:
    return Figure(title, _svg(fig), caption, drawn=fig)


def _legend_outside(ax, title: str | None = None) -> None:
    """The legend right of the axes, where it cannot cover data (the SVG grows to hold it); none when
    nothing drawn has a label (no VPN alone, grey)."""
    if not ax.get_legend_handles_labels()[0]:
        return
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0, title=title,
              title_fontsize=8)


def _numeric(values) -> bool:
    """A swept parameter is drawn as a line only when every value is a number (window, rate, size);
    data types, protocols, booleans are categories, drawn as grouped bars."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _whiskers(summaries: list[Summary]) -> tuple[list[float], list[list[float]]]:
    """The estimate each interval is of (the geometric mean on the log scale, else the mean) and the
    interval's distances below and above it (asymmetric on the log scale)."""
    centres = [s.centre for s in summaries]
    below = [0 if math.isnan(s.ci_low) else max(0.0, c - s.ci_low) for c, s in zip(centres, summaries)]
    above = [0 if math.isnan(s.ci_high) else max(0.0, s.ci_high - c) for c, s in zip(centres, summaries)]
    return centres, [below, above]


def _bar_figure(title: str, unit: str, rows: list[tuple[ScenarioRow, Summary]], short: Labels) -> Figure:
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.2))
    labels = [short.of(sc) for sc, _ in rows]
    means, errors = _whiskers([s for _, s in rows])
    colours = ["#888888" if sc.is_baseline else "#3b6ea8" for sc, _ in rows]
    ax.barh(labels, means, xerr=errors, color=colours, capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return _figure(title, fig, "bars: geometric mean (mean where a value is zero); whiskers: its 95% "
                               "confidence interval; grey: no VPN")


def _cost_figures(scenarios: list, stat: dict, short: Labels) -> list[Figure]:
    """On an unshaped link, per TCP workload: each VPN's goodput against the CPU it spends per GB, both
    with their intervals; configurations of one driver (its builds, its cores) joined by a line."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for s in scenarios:
        if s.workload == "tcp" and s.link_rate_mbit is None and not s.is_baseline and s.status != "failed" \
                and (s.id, "throughput_mbps") in stat and (s.id, "cpu_s_per_gb") in stat:
            groups[(s.link_label, s.workload_label)].append(s)
    return [_cost_figure(f"throughput against CPU per GB - {workload} on {link} (the VPN is the bottleneck)",
                         members, stat, short)
            for (link, workload), members in sorted(groups.items()) if len(members) > 1]


def _cost_figure(title: str, members: list, stat: dict, short: Labels) -> Figure:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    by_driver: dict[str, list] = defaultdict(list)
    for sc in sorted(members, key=lambda s: s.idx):
        by_driver[sc.vpn].append(sc)
    for driver, same in by_driver.items():
        cost, speed = [stat[(s.id, "cpu_s_per_gb")] for s in same], [stat[(s.id, "throughput_mbps")] for s in same]
        xs, xerr = _whiskers(cost)
        ys, yerr = _whiskers(speed)
        line = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="o", capsize=3, linestyle="-" if len(same) > 1 else "",
                           label=driver)
        for sc, x, y in zip(same, xs, ys):
            ax.annotate(short.of(sc), (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points",
                        color=line[0].get_color())
    ax.set_xlabel("CPU per GB carried [s/GB] (lower is cheaper)")
    ax.set_ylabel("throughput [Mbit/s]")
    ax.grid(alpha=0.3)
    _legend_outside(ax, "driver")
    ax.set_title(title, fontsize=10)
    return _figure(title, fig, "points: geometric means; whiskers: their 95% confidence intervals; a line joins "
                               "the configurations of one driver (its builds, its cores); up and to the left is "
                               "faster and cheaper")


def _sweep_figure(title: str, param: str, metric: str, unit: str,
                  lines: dict[ScenarioRow, list[tuple[float, Summary]]], short: Labels) -> Figure:
    """A numeric sweep (window, rate, size): one line per VPN with its intervals as error bars."""
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for sc, points in sorted(lines.items(), key=lambda kv: kv[0].idx):
        points.sort(key=lambda p: p[0])
        xs = [x for x, _ in points]
        ys, errs = _whiskers([s for _, s in points])
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=short.of(sc),
                    linestyle="--" if sc.is_baseline else "-")
    ax.set_xlabel(param)
    ax.set_ylabel(f"{metric} [{unit}]")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    ax.set_title(title, fontsize=10)
    return _figure(title, fig, "points: geometric mean (mean where a value is zero); whiskers: its 95% "
                               "confidence interval")


def _grouped_bar_figure(title: str, param: str, metric: str, unit: str,
                        groups: dict[ScenarioRow, list[tuple[object, Summary]]], short: Labels) -> Figure:
    """A categorical sweep (data type, protocol, ...): per VPN one bar per category, each with its
    interval as error bars; never a line between categories."""
    vpns = sorted(groups, key=lambda sc: sc.idx)
    categories = list(dict.fromkeys(str(value) for sc in vpns for value, _ in groups[sc]))
    height = 0.8 / len(categories)
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(vpns) * len(categories) + 0.4 * len(vpns) + 1.2))
    for j, category in enumerate(categories):
        ys, rows = [], []
        for i, sc in enumerate(vpns):
            found = [s for value, s in groups[sc] if str(value) == category]
            if found:
                ys.append(i - 0.4 + height * (j + 0.5))
                rows.append(found[0])
        centres, errors = _whiskers(rows)
        ax.barh(ys, centres, height=height * 0.95, xerr=errors, capsize=2, label=category)
    ax.set_yticks(range(len(vpns)), [short.of(sc) for sc in vpns])
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} [{unit}]")
    ax.grid(axis="x", alpha=0.3)
    _legend_outside(ax, title=param)
    ax.set_title(title, fontsize=10)
    return _figure(title, fig, "bars: geometric mean (mean where a value is zero); whiskers: its 95% "
                               f"confidence interval; one bar per {param}")


def build(directory: Path) -> Report:
    """The report of a results directory, from its store read once and analysed once (analysed.py)."""
    return compose(analyse(directory), Path(directory))


def compose(analysed: Analysed, directory: Path) -> Report:
    """The report's parts from one analysed results directory."""
    stored, runs, scenarios, stat = analysed.stored, analysed.runs, analysed.scenarios, analysed.stat
    summaries, settings = analysed.summaries, analysed.settings
    last = dict(runs[-1]) | {"first_started_at": runs[0]["started_at"], "vpnlab_version": sitting_versions(runs)}
    report = Report(run=last, runs=len(runs), scenarios=scenarios,
                    failed=[s for s in scenarios if s.status == "failed"],
                    notes=_grouped_notes(scenarios) + _short_of_their_rule(stored, scenarios, directory)
                    + _grouped_flags(stored) + _unflagged_fragments(stored) + _unscaled_loads(scenarios)
                    + analysed.kind_notes + _outlier_groups(scenarios, summaries))
    report.flagged_counted, report.flagged_both_ways = sensitivity.both_ways(stored, summaries)
    report.latency_floor_ms = f"{settings.latency_floor_ms:g}"
    report.machines = machine_lines(runs, scenarios)
    report.measured_where = measured_where(last, scenarios)
    report.implementations = sorted({(s.vpn, s.implementation) for s in scenarios if not s.is_baseline})
    report.links = sorted({s.link_label for s in scenarios})
    report.rules = sorted({s.repetition_rule for s in scenarios})
    met_line, missed = _target_met(scenarios, stat, analysed.study.repetitions)
    report.rules += met_line
    report.notes += missed
    report.labels = short_labels(scenarios)
    report.algorithms = algorithm_table(stored, scenarios, report.labels)

    graded = [w for f in analysed.study.findings if f.graded for w in f.b.workloads]
    report.table_vi = _table_vi(scenarios, stat, report.links, _graded_cell, graded)
    if settings.seed_grading == "jaha-2014":
        sweeps = _graded_sweeps(analysed.study.findings, scenarios)
        report.seed_table_vi = (_seed_sweep_table(scenarios, stat, report.links, sweeps, settings.latency_floor_ms)
                                if sweeps else _table_vi(scenarios, stat, report.links,
                                                         _seed_cell(scenarios, stat, settings.latency_floor_ms), graded))
    _short_table_labels(report)
    _figures(report, scenarios, stat)
    report.figures[:0] = _cost_figures(scenarios, stat, report.labels)  # where the link does not limit: first
    _interval_figures(report, scenarios, analysed.series)
    _tunnels(report, scenarios, stat)
    report.mesh_pairs = mesh_pair_rows(scenarios, stored.pair_values())
    report.mesh_metrics, report.mesh_rows = mesh_rows(scenarios, stat)
    report.field_columns, report.field_rows = field_table(scenarios, stat)
    report.field_figure_columns, report.field_figure_rows = field_figures(scenarios, stat)
    used = _recommend(report, scenarios, stat, analysed.family, analysed.cost_family)
    _comparisons(report, scenarios, analysed.family, used)
    report.methods = methods.paragraph(analysed.study, report.rules, cpu=analysed.cpu_text,
                                       pairing=analysed.pairing_text)
    report.against = analysed.against  # "Against the original study": findings.html.j2
    return report


def _target_met(scenarios: list, stat: dict, rule: RepetitionRule) -> tuple[list[str], list]:
    """With an adaptive rule: how many scenarios' final intervals (as computed now) are within the
    study's target, and those that are not, as a note with the scenarios and their intervals."""
    finals = [(s, stat[(s.id, KINDS[s.workload].primary)]) for s in scenarios
              if s.workload in KINDS and (s.id, KINDS[s.workload].primary) in stat]
    if not rule.adaptive:
        return [], []
    wide = [(s, f) for s, f in finals if not target_met(f, rule)]
    line = f"confidence target met in {len(finals) - len(wide)} of {len(finals)} adaptive scenarios"
    if not wide:
        return [line], []
    note = (f"final 95% interval wider than the study's +-{rule.ci_target_pct:g}% target: the repetitions reached "
            f"max {rule.max}, or the later ones spread wider than the pilot")
    return [line], [(note, [f"{s.label}: {fmt(f.ci_low)} - {fmt(f.ci_high)} {f.unit}" for s, f in wide])]


def _grouped_flags(store: Stored) -> list[tuple[str, list[str]]]:
    """Each kind of flag once, with how many repetitions carry it, an example, and the scenarios: under emulation most repetitions of
    a study carry the same one, and a line per scenario would bury the rare ones."""
    labels = {s.id: s.label for s in store.scenarios()}
    reps: dict[str, dict[tuple[str, int], str]] = defaultdict(dict)
    for row in store.samples():
        if row.repetition > 0:
            for flag in row.flags:
                reps[flag.kind].setdefault((row.scenario_id, row.repetition), flag)
    groups = []
    for kind, flagged in sorted(reps.items(), key=lambda kv: len(kv[1])):  # the rare ones first
        scenarios = sorted({labels[sid] for sid, _ in flagged})
        example = next(iter(flagged.values()))
        many = f"{len(flagged)} repetitions flagged alike, e.g." if len(flagged) > 1 else "1 repetition flagged:"
        groups.append((f"{many} {example.declared.meaning or example.kind}: {example.text}", scenarios))
    return groups


def _short_of_their_rule(store: Stored, scenarios: list, directory: Path) -> list[tuple[str, list[str]]]:
    """Scenarios not yet measured to their repetition rule: their figures rest on fewer samples than
    the study asked for, and so do the comparisons made with them (recommend.py leaves them out)."""
    short = [f"{s.label}: {store.attempts(s.id).count(None)} valid so far"
             for s in scenarios if s.unfinished]
    if not short:
        return []
    return [(f"not finished: fewer repetitions than the study's rule asks (see Summary), so these figures and "
             f"the comparisons made with them are provisional (a recommendation leaves them out); "
             f"`vpnlab run --resume {directory}` measures the rest", short)]


def _unscaled_loads(scenarios: list) -> list[tuple[str, list[str]]]:
    """Scenarios whose link was slowed for emulation while their offered load was not (measured before
    vpnlab scaled loads with the link): the load was a larger share of the link than the study's."""
    unscaled = [s.label for s in scenarios if "link scaled for software emulation" in s.notes
                and "offered at" not in s.notes and s.workload in KINDS
                and KINDS[s.workload].slowed(KINDS[s.workload].Options(**s.params), 2.0) is not None]
    if not unscaled:
        return []
    return [("offered at the study's rate on the slowed link (measured before vpnlab scaled offered loads with "
             "it): a larger share of the link than the study's, so not under its condition", unscaled)]


def _unflagged_fragments(store: Stored) -> list[tuple[str, list[str]]]:
    """Repetitions fragmented on the WAN that carry no flag saying so (measured before vpnlab flagged
    them): the same note, from their stored wan_fragments."""
    labels = {s.id: s.label for s in store.scenarios()}
    found: dict[str, list[float]] = defaultdict(list)
    for row in store.samples():
        if row.metric == "wan_fragments" and row.value > 0 and row.repetition > 0 \
                and FRAGMENTED.name not in {flag.kind for flag in row.flags}:
            found[labels[row.scenario_id]].append(row.value)
    if not found:
        return []
    return [(f"{sum(map(len, found.values()))} repetitions fragmented on the WAN (packets bigger than the path "
             "MTU), whose cost is in their figures", [f"{label}: {len(v)} repetitions, {statistics.median(v):.0f} "
                                                       "fragments (median)" for label, v in sorted(found.items())])]


def _outlier_groups(scenarios: list, summaries: dict) -> list[tuple[str, list[str]]]:
    """Samples far from the rest, flagged and never dropped: one note for those counted, one for those
    the study leaves out, each with the scenarios and metrics they are in."""
    labels = {s.id: s.label for s in scenarios}
    why = (f"far from the rest (modified z-score above {OUTLIER_K:g}, median and MAD) or taken while the machine "
           "was busy")
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for sid, sums in summaries.items():
        for s in sums:
            if s.outliers or s.set_aside:
                left_out = f"samples {why}: left out of every statistic, as the study says"
                groups[left_out if s.set_aside else f"samples {why}: counted in every statistic"][labels[sid]].append(
                    f"{s.outliers or s.set_aside} {s.metric}")
    return [(note, [f"{label}: {', '.join(found)}" for label, found in by_scenario.items()])
            for note, by_scenario in groups.items()]  # one entry per scenario: the fold counts scenarios


def _graded_workload(scenarios: list, kind: str, graded: list[str]) -> str | None:
    """Table VI grades one workload per kind: the first the study's graded findings name (the seed's
    own table), else the first the study lists."""
    candidates = sorted((s.workload_label not in graded, s.idx, s.workload_params)
                        for s in scenarios if s.workload == kind)
    return candidates[0][2] if candidates else None


def _table_vi(scenarios: list, stat: dict, links: list, cell, graded: list[str]) -> dict:
    """Link -> (headings, rows) of Table VI: per VPN, one workload of each kind (_graded_workload), `cell`
    making each graded metric's cell from its scenario and summary. A heading names its workload."""
    chosen = {kind: _graded_workload(scenarios, kind, graded) for kind in KINDS}
    label = {s.workload: s.workload_label for s in scenarios if s.workload_params == chosen.get(s.workload)}
    columns = [(kind, metric, f"{heading} ({label[kind]})") for kind in KINDS
               for metric, heading in KINDS[kind].graded if chosen[kind]]
    tables = {}
    for link in links if columns else []:
        rows = []
        vpns = sorted({s.vpn_label for s in scenarios if s.link_label == link and not s.is_baseline})
        for vpn in vpns:
            cells = []
            for kind, metric, _ in columns:
                sc = next((s for s in scenarios if s.link_label == link and s.vpn_label == vpn
                           and s.workload == kind and s.workload_params == chosen[kind]), None)
                s = stat.get((sc.id, metric)) if sc else None
                if sc and sc.status == "failed":
                    cells.append(Cell("failed", warn=sc.failure[:200]))
                else:
                    cells.append(cell(sc, s))
            measured_in_vm = any(s.vpn_label == vpn and s.link_label == link and s.measured_in == "vm"
                                 for s in scenarios)
            rows.append((f"{vpn} (in the VM)" if measured_in_vm else vpn, cells))
        if rows:
            tables[link] = ([heading for _, _, heading in columns], rows)
    return tables


def _coloured(text: str, grade: str, warn: str) -> Cell:
    worse = grade.split(" - ")[0]  # a range is coloured by its worse end
    return Cell(f"{text} ({grade})" if grade else text, colour=GRADE_COLOURS.get(worse, ""), warn=warn,
                css="dark" if worse in DARK_GRADES else "")


def _graded_cell(sc, s: Summary | None) -> Cell:
    """vpnlab's grade: of the ratio's interval, with the n, baseline and floor rules (stats/grades.py)."""
    if s is None or relative_text(s) == "-":
        return Cell("-", warn=s.grade_reason if s else "")
    return _coloured(relative_text(s), s.grade, ", ".join(filter(None, [trust(s), s.grade_reason])))


def _seed_cell(scenarios: list, stat: dict, floor_ms: float):
    """The seed's own grade (Jaha 2014, Table VI) of one workload's cell (_seed_grade), every metric
    graded, latency, jitter and loss as multiples."""
    by_id = {s.id: s for s in scenarios}

    def cell(sc, s: Summary | None) -> Cell:
        base = stat.get((baseline_of(sc, by_id), s.metric)) if sc and s else None
        if base is None or base.n == 0:
            return Cell("-", warn="no valid no-VPN baseline measured in the same place")
        return _seed_grade([s], [base], floor_ms)

    return cell


def _graded_sweeps(study_findings: list, scenarios: list) -> list[tuple[str, str, tuple[str, ...]]]:
    """(heading, metric, workloads) of each graded finding's B side, once each: the seed's Table VI grades
    one figure per VPN over a whole sweep (Jaha 2014: every window and stream count, every packet size)."""
    kind_of = {s.workload_label: s.workload for s in scenarios}
    out = []
    for f in study_findings:
        kind = KINDS.get(kind_of.get(f.b.workloads[0], "")) if f.graded and f.b else None
        if kind is None:
            continue
        metric = f.metric or kind.primary
        heading = dict(kind.graded).get(metric, metric)
        entry = (f"{heading} (mean of {len(f.b.workloads)}: {', '.join(f.b.workloads)})", metric, tuple(f.b.workloads))
        if entry not in out:
            out.append(entry)
    return out


def _seed_sweep_table(scenarios: list, stat: dict, links: list, sweeps: list, floor_ms: float) -> dict:
    """Table VI as the seed graded it: per VPN and sweep, the mean of its workloads' means against no VPN's
    mean of the same workloads (_seed_grade)."""
    by_id = {s.id: s for s in scenarios}
    tables = {}
    for link in links:
        vpns = sorted({s.vpn_label for s in scenarios if s.link_label == link and not s.is_baseline})
        rows = [(vpn, [_seed_sweep_cell([s for s in scenarios if s.link_label == link and s.vpn_label == vpn
                                         and s.workload_label in workloads], stat, by_id, metric, workloads, floor_ms)
                       for _, metric, workloads in sweeps]) for vpn in vpns]
        if rows:
            tables[link] = ([heading for heading, _, _ in sweeps], rows)
    return tables


def _seed_sweep_cell(members: list, stat: dict, by_id: dict, metric: str, workloads: tuple, floor_ms: float) -> Cell:
    ours = [stat.get((s.id, metric)) for s in members]
    bases = [stat.get((baseline_of(s, by_id), metric)) for s in members]
    if len(members) < len(workloads) or not all(x is not None and x.n for x in ours + bases):
        return Cell("-", warn="not every workload of the sweep was measured here with its no-VPN baseline")
    return _seed_grade(ours, bases, floor_ms)


def _seed_grade(ours: list[Summary], bases: list[Summary], floor_ms: float) -> Cell:
    """The seed's grade of a VPN's summaries (one workload's, or a sweep's) against no VPN's of the same
    workloads: the ratio of their means' means, without vpnlab's rules; where one of them would withhold
    the grade, the cell says why the seed's grade should be read with care."""
    first = ours[0]
    mean, base = statistics.fmean(x.mean for x in ours), statistics.fmean(x.mean for x in bases)
    share = catalog.metric(first.metric).judged == "share"
    if base <= 0:
        return Cell("-", warn=f"no VPN's mean is {fmt(base)} {first.unit}: no multiple of it")
    ratio = mean / base
    text = f"{100 * ratio:.3g}%" if share else f"{ratio:.3g}x"
    bound = next((x.emulation_bound for x in ours + bases if x.emulation_bound), "")
    if bound:  # the seed's rule would grade the emulator
        return Cell(text, warn=f"{bound}: no grade, by the seed's rule either")
    caveats = [trust(x) for x in ours]
    n_ours, n_base = min(x.n for x in ours), min(x.n for x in bases)
    if min(n_ours, n_base) < MIN_N:
        caveats.append(f"n = {n_ours} and {n_base}: vpnlab grades from {MIN_N} on both sides")
    if not share and first.unit == "ms" and base < floor_ms:
        caveats.append(f"no VPN's {fmt(base)} ms is below the {floor_ms:g} ms floor: this multiple "
                       "mostly grades noise (vpnlab's own table shows the added ms instead)")
    return _coloured(text, band(ratio, "throughput" if share else "latency"), ", ".join(filter(None, caveats)))


def _short_table_labels(report: Report) -> None:
    """Table VI's rows named as every figure and table names them (labels.py)."""
    for tables in (report.table_vi, getattr(report, "seed_table_vi", {})):
        for _, rows in tables.values():
            rows[:] = [(report.labels(vpn), cells) for vpn, cells in rows]


def _figures(report: Report, scenarios: list, stat: dict) -> None:
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for s in scenarios:
        groups[(s.link_label, s.workload)].append(s)
    for (link, kind), members in sorted(groups.items()):
        params = {s.workload_params for s in members}
        decoded = [json.loads(p) for p in params]
        keys = sorted({k for d in decoded for k in d})  # every one's: a store leaves defaults out (pairs)
        varying = [k for k in keys if len({json.dumps(d.get(k)) for d in decoded}) > 1]
        grouped = False
        if len(varying) == 1:  # a sweep: lines along a numeric parameter, grouped bars over categories
            grouped = _sweep(report, stat, link, kind, members, varying[0])
        else:  # several swept together (a window sweep and a streams sweep): each along its own axis
            for param in varying:
                _sweep(report, stat, link, kind, _one_factor(members, param, varying), param)
        for workload_params in sorted(params):
            if grouped:  # the grouped bars already show each workload's primary metric
                break
            same = [s for s in members if s.workload_params == workload_params]
            if kind not in KINDS:
                continue
            metric = KINDS[kind].primary
            rows = [(s, stat[(s.id, metric)]) for s in sorted(same, key=lambda s: s.idx)
                    if (s.id, metric) in stat]
            if len(rows) > 1 and len(params) <= 3:  # a bar chart per workload, unless a long sweep
                report.figures.append(_bar_figure(f"{metric} - {same[0].workload_label} on {link}",
                                                  rows[0][1].unit, rows, report.labels))


def _one_factor(members: list, param: str, varying: list[str]) -> list:
    """The scenarios along `param` with every other swept parameter at its commonest value; a value
    left to the tool (None, its default) is no point on a numeric axis."""
    held = {}
    for other in varying:
        if other != param:
            counts = Counter(json.dumps(s.params.get(other)) for s in members)
            held[other] = json.loads(counts.most_common(1)[0][0])
    subset = [s for s in members if all(s.params.get(k) == v for k, v in held.items())]
    numbers = [s for s in subset if s.params.get(param) is not None]
    return numbers if _numeric([s.params.get(param) for s in numbers]) else subset


def _param(s: ScenarioRow, name: str):
    """A workload parameter of a scenario, a default its store leaves out (`pairs` at one) included."""
    field = WorkloadOptions.model_fields.get(name)
    return s.params.get(name, field.default if field else None)


def _sweep(report: Report, stat: dict, link: str, kind: str, members: list, param: str) -> bool:
    """The figures of one swept parameter: lines along a number, grouped bars over categories, one line
    (or group) per VPN; True when the grouped bars show the kind's primary metric."""
    if len({json.dumps(s.params.get(param)) for s in members}) < 2:
        return False
    numeric = _numeric([s.params.get(param) for s in members])
    plotted = KINDS[kind].plotted if kind in KINDS else ()
    vpn_of: dict[str, ScenarioRow] = {}
    grouped = False
    for metric in plotted:
        lines: dict[ScenarioRow, list] = defaultdict(list)
        unit = ""
        for s in members:
            summary = stat.get((s.id, metric))
            if summary:
                unit = summary.unit
                lines[vpn_of.setdefault(s.shown, s)].append((_param(s, param), summary))
        if lines and numeric:
            report.figures.append(_sweep_figure(f"{metric} versus {param} - {kind} on {link}",
                                                param, metric, unit, lines, report.labels))
        elif lines:
            report.figures.append(_grouped_bar_figure(f"{metric} by {param} - {kind} on {link}",
                                                      param, metric, unit, lines, report.labels))
            grouped = grouped or metric == KINDS[kind].primary
    return grouped


def _interval_figures(report: Report, scenarios: list, series: dict) -> None:
    """Each workload's series interval by interval, as its kind draws it (the FAVE thesis read trends
    in throughput across twenty 10-s intervals)."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for s in scenarios:
        if s.id in series and KINDS[s.workload].series_figure:
            groups[(s.link_label, s.workload_label)].append(s)
    for (link, workload), members in sorted(groups.items()):
        shown = KINDS[members[0].workload].series_figure
        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        for s in sorted(members, key=lambda s: s.idx):
            runs = [r for r in series[s.id] if r]
            if not runs:
                continue
            length = min(len(r) for r in runs)
            xs = [runs[0][i][0] for i in range(length)]
            means = [sum(r[i][1] for r in runs) / len(runs) for i in range(length)]
            ax.plot(xs, means, marker=".", label=report.labels.of(s), linestyle="--" if s.is_baseline else "-")
        ax.set_xlabel(shown.x)
        ax.set_ylabel(shown.y)
        ax.grid(alpha=0.3)
        _legend_outside(ax)
        title = f"{shown.title} - {workload} on {link}"
        ax.set_title(title, fontsize=10)
        report.figures.append(_figure(title, fig, shown.caption))


def _tunnels(report: Report, scenarios: list, stat: dict) -> None:
    """Per configuration and link: what the tunnel itself costs (overhead, MTU, set-up: the median over
    its workloads' means), and the CPU per GB of the first workload that measured it, named, as it
    depends on the workload; no VPN's row shows the CPU floor of the machine (or the emulator)."""
    seen = set()
    for s in sorted(scenarios, key=lambda s: s.idx):
        if (s.vpn_label, s.link_label) in seen:
            continue
        seen.add((s.vpn_label, s.link_label))
        group = [x for x in sorted(scenarios, key=lambda x: x.idx)
                 if x.vpn_label == s.vpn_label and x.link_label == s.link_label]

        def median(metric):
            means = [stat[(x.id, metric)].mean for x in group if (x.id, metric) in stat]
            return fmt(statistics.median(means) if means else None)

        cpu = next(((x, stat[(x.id, "cpu_s_per_gb")]) for x in group if (x.id, "cpu_s_per_gb") in stat), None)
        report.tunnel_rows.append({
            "vpn": report.labels.of(s), "link": s.link_label, "implementation": s.implementation,
            "overhead": median("overhead_bytes"), "model": median("overhead_model_bytes"),
            "mtu": median("tunnel_mtu"), "setup": median("setup_s"),
            "cpu_gb": f"{fmt(cpu[1].mean)} ({cpu[0].workload_label})" if cpu else fmt(None),
            "cpu_gb_warn": trust(cpu[1]) if cpu else "",
        })


def _comparisons(report: Report, scenarios: list, family: list, used: list) -> None:
    """The study's one-difference pairs and the pairs the recommendations rest on, from the family
    every comparison is corrected in."""
    shown = printed(family, scenarios)
    for c in used:
        if not any(c is s for s in shown):
            shown.append(c)
    report.comparisons = shown
    report.comparison_rows = [[*row[:3], report.labels(row[3]), report.labels(row[4]), *row[5:]]
                              for row in study_rows(report.comparisons)]
    report.comparison_notes = study_footnotes(report.comparisons)


def _recommend(report: Report, scenarios: list, stat: dict, family: list, cost: list) -> list:
    """The recommendations (recommend.py), each marked when its figure deserves care; returns the
    comparisons they rest on."""
    used = []
    for text, best, decided in recommend.recommendations(scenarios, stat, family, cost):
        report.recommendations.append({"text": text, "warn": trust(best)})
        used += [c for c in decided if not any(c is u for u in used)]  # (a NaN field makes == false)
    return used


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("vpnlab", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["fromjson"] = json.loads
    return env


def render(directory: Path, analysed: Analysed | None = None) -> str:
    """The report's HTML, from `analysed` (the directory's analysis, when made already)."""
    built = compose(analysed or analyse(directory), Path(directory))
    return _environment().get_template("report.html.j2").render(r=built, colours=GRADE_COLOURS, dark=DARK_GRADES,
                                                                sensitivity_headings=sensitivity.HEADINGS)


def render_table(title: str, headings: list[str], rows: list[list[str]]) -> str:
    """A self-contained page holding one table (for `vpnlab compare --html`)."""
    return _environment().get_template("table.html.j2").render(title=title, headings=headings, rows=rows)


def write(directory: Path, out: Output | None = None, analysed: Analysed | None = None) -> Output:
    """The report, into `out` (checked by the caller before anything is computed), or replacing
    the directory's own report.html: whole or not at all, a reader never sees half a report."""
    out = out or Output(Path(directory) / "report.html", "report", force=True)
    out.write_text(render(Path(directory), analysed))
    return out
