"""The race's answer: the winner or the set of equivalent survivors, ranked, each with its ratio to no
VPN, the field checks it passed and the settings its user pastes; and the race as a figure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..catalog import DRIVERS  # noqa: E402
from ..plan.scenarios import Scenario  # noqa: E402
from ..analyse.stats import Comparison, log_interval, paired_log_ratio  # noqa: E402
from ..store import Store  # noqa: E402
from .design import RaceDesign  # noqa: E402
from .field import outcomes  # noqa: E402
from .race import EQUIVALENT, METHOD, ONE_LEFT, Drop, Standing  # noqa: E402

RANKED_BY = "CPU per GB, then set-up time"


@dataclass
class Finalist:
    scenario: Scenario
    against_none: Comparison | None         # its metric / no VPN's, paired by round
    estimate: float | None                  # geometric mean of the metric
    cpu_s_per_gb: float | None
    setup_s: float | None
    over: list[str] = field(default_factory=list)   # ceilings its estimate exceeds

    @property
    def settings(self) -> str:
        vpn = self.scenario.vpn
        return DRIVERS[vpn.driver].settings(vpn.options, vpn.profile)


@dataclass
class Answer:
    stop: str
    rounds: int
    metric: str
    finalists: list[Finalist]                 # ranked, best first
    dropped: list[tuple[str, Drop]]           # label, when and why, in the order they were dropped
    ranking: str
    checks: int = 0                           # field checks, and how many each candidate (by label) passed
    passed: dict[str, int] = field(default_factory=dict)

    def checks_passed(self, label: str) -> str:
        return f"passed {self.passed.get(label, 0)} of {self.checks} field checks" if self.checks else ""


def _geometric_mean(values) -> float | None:
    values = [v for v in values if v > 0]
    return log_interval(values).estimate if values else None


def _finalist(store: Store, design: RaceDesign, scenario: Scenario) -> Finalist:
    mine = store.values_by_round(scenario.id, design.metric)
    none = store.values_by_round(design.baseline, design.metric)
    common = sorted(set(mine) & set(none))
    against = paired_log_ratio([none[r] for r in common], [mine[r] for r in common]) if len(common) >= 2 else None
    over = [f"{metric} {estimate:.3g} above {limit:g}" for metric, limit in design.ceilings.items()
            if (estimate := _geometric_mean(store.values(scenario.id, metric))) and estimate > limit]
    return Finalist(scenario, against, _geometric_mean(mine.values()),
                    _geometric_mean(store.values(scenario.id, "cpu_s_per_gb")),
                    _geometric_mean(store.values(scenario.id, "setup_s")), over)


def answer(store: Store, design: RaceDesign, standing: Standing, scenarios: list[Scenario]) -> Answer:
    """Equivalent survivors are ranked by CPU per GB, then set-up time; otherwise (one left, or the
    budget spent before the race could separate them) by the metric, best first."""
    by_id = {s.id: s for s in scenarios}
    finalists = [_finalist(store, design, by_id[c]) for c in standing.survivors]
    sign = -1 if design.higher_is_better else 1
    by_metric = standing.stop != EQUIVALENT

    def rank(f: Finalist) -> tuple:  # what breaks a ceiling comes last
        secondary = (f.cpu_s_per_gb or math.inf, f.setup_s or math.inf)
        return (bool(f.over), sign * (f.estimate or 0) if by_metric else 0, *secondary)

    finalists.sort(key=rank)
    ranking = f"{design.metric}, then {RANKED_BY}" if by_metric else RANKED_BY
    dropped = sorted(((by_id[c].vpn_label, d) for c, d in standing.dropped.items()), key=lambda d: d[1].look)
    passed = {by_id[c].vpn_label: sum(why is None for why in found.values())
              for c, found in outcomes(store, design.checks, design.candidates).items()}
    return Answer(standing.stop or "not finished", standing.looks, design.metric, finalists, dropped, ranking,
                  len(design.checks), passed)


def _ratio_text(comparison: Comparison | None) -> str:
    if comparison is None or comparison.estimate is None:
        return "no ratio to no VPN (fewer than two rounds with both)"
    interval = f" (95% interval {comparison.low:.3f} - {comparison.high:.3f})" if comparison.low else ""
    return f"{comparison.estimate:.3f} of no VPN{interval}"


def text(result: Answer, labels: dict[str, str]) -> str:
    """The answer for people: how the race ended, the settings to use, the rest."""
    lines = [f"The race ended after {result.rounds} round(s): {result.stop}. {_verdict(result)}",
             f"Method: {METHOD}."]
    for rank, finalist in enumerate(result.finalists, 1):
        head = f"{rank}."
        extra = [f"{finalist.estimate:.4g} {result.metric}" if finalist.estimate else "",
                 f"CPU {finalist.cpu_s_per_gb:.3g} s/GB" if finalist.cpu_s_per_gb else "",
                 f"set-up {finalist.setup_s:.2g} s" if finalist.setup_s else "",
                 result.checks_passed(finalist.scenario.vpn_label)]
        lines += ["", f"{head} {finalist.scenario.vpn_label}: {_ratio_text(finalist.against_none)}; "
                      + ", ".join(e for e in extra if e)]
        lines += [f"   over a ceiling: {', '.join(finalist.over)}"] if finalist.over else []
        lines += ["   " + line for line in finalist.settings.rstrip().splitlines()]
    if len(result.finalists) > 1:
        lines += ["", f"(survivors ranked by {result.ranking})"]
    if result.dropped:
        lines += ["", "Dropped:"] + [f"  {drop.when}: {label}: {_named(drop.reason, labels)}"
                                     + (f" ({result.checks_passed(label)})" if result.checks else "")
                                     for label, drop in result.dropped]
    return "\n".join(lines) + "\n"


def _verdict(result: Answer) -> str:
    """What the ranking means, as far as the race showed it."""
    usable = [f for f in result.finalists if not f.over]
    if not usable:
        return "No survivor keeps every ceiling: none is recommended."
    best = usable[0].scenario.vpn_label
    if result.stop == ONE_LEFT:
        return f"Use {best}: every other candidate {_how_the_others_went(result)}."
    if result.stop == EQUIVALENT:
        return f"The survivors are equivalent on {result.metric}; use {best}, the first by {result.ranking}."
    return (f"{best} leads, but the race did not show it better than the other survivors: they are ranked by "
            f"their estimates (a larger budget decides between them).")


def _how_the_others_went(result: Answer) -> str:
    """Out by a field check, shown worse by the race, or some of each."""
    failed_a_check = sum(result.passed.get(label, 0) < result.checks for label, _ in result.dropped)
    if not failed_a_check:
        return "was shown worse"
    return "failed a field check" if failed_a_check == len(result.dropped) else "failed a field check or was shown worse"


def _named(reason: str, labels: dict[str, str]) -> str:
    for scenario_id, label in labels.items():
        reason = reason.replace(scenario_id, label)
    return reason


def figure(standing: Standing, labels: dict[str, str], design: RaceDesign, path: Path) -> Path:
    """Each candidate's ratio to the round's leader, round by round (1 the leader, below 1 worse, for
    a lower-is-better metric too), a cross where it was dropped."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    margin, metric = design.margin, design.metric
    for name in standing.names:
        points = [(look, ratios[name]) for look, ratios in enumerate(standing.history, 1) if name in ratios]
        if not points:
            continue
        rounds, ratios = zip(*points)
        line, = ax.plot(rounds, ratios, marker="o", markersize=3, label=labels.get(name, name))
        if name in standing.dropped:
            ax.plot(rounds[-1], ratios[-1], marker="x", markersize=10, color=line.get_color())
    ax.axhspan(1 / (1 + margin), 1, color="0.9", label=f"within the margin ({100 * margin:g}%)")
    ax.axvline(design.min_rounds, color="0.6", linestyle=":", label="first look")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ratio = "candidate / leader" if design.higher_is_better else "leader / candidate"
    ax.set_ylabel(f"{metric}, {ratio}\n(geometric means so far; below 1: worse)")
    ax.set_title(f"the race: {standing.stop or 'not finished'} (x: dropped)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
