"""The table of seed verdicts in docs/seeds.md, generated from results stores: one Markdown row per store,
saying what ran and each finding's verdict with its ratio named for what it is (B/A of a metric,
e.g. transfer_s B/A: a ratio of transfer times, above 1 when B was slower)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..analyse.analysed import analyse
from ..analyse.findings import CHANGELOG, VERDICTS, Judgement, changes, conditions_changed, judge
from ..core.schema import CONTROL
from ..store import Stored

HEADER = "| seed study | what ran | verdicts |\n|---|---|---|"


def row(directory: Path) -> str:
    """The Markdown row of one results directory (read only), its control characters as visible escapes."""
    analysed = analyse(directory)
    runs = analysed.runs  # (read_store refuses a store with none)
    judging, reencoded = analysed.study.judged_by
    judged = judge(analysed.stored, judging)
    ran = what_ran(analysed.stored, runs)
    encoding = " (findings as this vpnlab encodes them, judged on the stored samples)" if reencoded else ""
    changed, removed = changes(analysed.study, judging) if reencoded else ({}, [])
    if changed or removed:
        encoding = (f" (findings as this vpnlab encodes them, judged on the stored samples; {len(changed)} changed or "
                    f"added and {len(removed)} removed since the run: {CHANGELOG})")
    moved = conditions_changed(analysed.study, judging) if reencoded else {}
    if moved:
        encoding += (f"; {len(moved)} of its scenarios ran under other conditions than the study now states "
                     f"({'; '.join(sorted(set(moved.values())))}): the findings on them judge what was measured, "
                     "and a new run measures the study's")
    text = f"| `{runs[-1]['study_name']}` | {ran} | {verdicts_text(judged)}{encoding} |"
    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def what_ran(store: Stored, runs) -> str:
    scenarios = store.scenarios()
    places = Counter("in the VM under software emulation" if s.emulated else f"in the {s.measured_in}"
                     .replace("in the host", "on the host") for s in scenarios)
    attempts = [a for s in scenarios for a in store.attempts(s.id)]
    failed_scenarios = sum(s.status == "failed" for s in scenarios)
    where = ", ".join(f"{n} {place}" for place, n in places.most_common())
    first, last = runs[0]["started_at"][:16].replace("T", " "), (runs[-1]["finished_at"] or "")[:16].replace("T", " ")
    return (f"{len(scenarios)} scenarios ({where}); {len(attempts)} repetitions, "
            f"{sum(a is not None for a in attempts)} failed; {failed_scenarios} scenarios could not run; "
            f"{len(runs)} sitting{'s' if len(runs) != 1 else ''}, {first} to {last or 'unfinished'} UTC")


def verdicts_text(judged: list[Judgement]) -> str:
    counts = Counter(j.verdict for j in judged)
    head = "; ".join(f"{counts[v]} *{v}*" for v in VERDICTS if counts[v])
    return f"{head} ({len(judged)} findings). " + "; ".join(finding_text(j) for j in judged)


def finding_text(j: Judgement) -> str:
    """'id: verdict, throughput_mbps B/A = 0.90 [0.87, 0.94] (seed 0.85)'."""
    f = j.finding
    seed = (f"seed {f.seed_ratio:g}{' read off a figure' if f.read_from_figure else ''}" if f.seed_ratio
            else "seed: no ratio")
    if j.estimate is None:
        return f"`{f.id}`: {j.verdict} ({seed})"
    interval = "" if j.low is None else f" [{j.low:.3g}, {j.high:.3g}]"
    per = " per Mbit/s of link" if f.per_link_rate else ""
    if j.scale == "ratio":
        shown = f"{j.metric}{per} B/A = {j.estimate:.3g}{interval}"
    else:
        shown = f"{j.metric}{per} B - A = {j.estimate:+.3g} {j.unit}{interval}"
        if j.mean_a and j.mean_a > 0:
            shown += f", B/A about {1 + j.estimate / j.mean_a:.3g}"
    return f"`{f.id}`: {j.verdict}, {shown}, {j.n_a} and {j.n_b} values ({seed})"


def table(directories: list[Path]) -> str:
    return "\n".join([HEADER, *(row(d) for d in directories)])
