"""How the numbers were obtained, in one paragraph the report and `vpnlab show` print the way a
methods section would: design, order, intervals, grades, tests, correction, stopping rule, outliers."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from datetime import datetime

from .compare import ALPHA
from ..plan.stored import StoredStudy
from ..testbed.cgroups import METHODS
from .stats.decisions import PRACTICAL_ROUNDS
from .stats.grades import MIN_N
from .stats.outliers import K as OUTLIER_K
from .stats.outliers import MIN_N as OUTLIER_MIN_N


def paragraph(study: StoredStudy, rules: list[str], cpu: str = "", pairing: str = "") -> str:
    """The methods paragraph of the stored study; rules: the stopping rules that ran, as stored with
    the scenarios; pairing: how far apart paired samples lay (pairing_text)."""
    order, settings = study.order, study.analysis
    threshold = settings.threshold_pct
    design = ("in an order randomised per round (seeded and recorded)" if order != "listed" else
              "in the order the study lists (`order: listed`: drift over time can then favour a position)")
    return (
        "Design: repetitions run in rounds; each round runs once every configuration still short of its "
        "rule (a resumed run, a failed repetition or an adaptive rule's totals can leave a round without "
        "some), " + design + "; comparisons pair the rounds both sides completed" + pairing + ", and "
        "each repetition brings its tunnel up afresh with a warm-up that is not stored; failed repetitions "
        "and scenarios are kept in the store but left out of every statistic. "
        "Intervals (95%, nominal: a mean's interval of a count or CPU share near zero, skewed, covers less "
        "with few repetitions, 85-92% in simulation at n = 3-5): a t interval on the log scale for positive "
        "quantities (it estimates the geometric mean and never goes below zero), of the arithmetic mean "
        "clipped at zero otherwise, and for loss "
        "Korn and Graubard's Clopper-Pearson interval with the repetition as the unit (loss comes in bursts). "
        "Against no VPN, measured in the same place: throughput as the ratio of geometric means with the "
        "paired t interval by round, latency and jitter as the ms the VPN adds (paired difference), loss in "
        "percentage points (t intervals of differences: in simulation they cover 90-95% for skewed jitter and "
        f"85-93% for loss that comes in bursts, at n = 3-10); Jaha's grades need n >= {MIN_N} on both sides "
        f"and, for latency, a baseline of at least {settings.latency_floor_ms:g} ms, and show a range where the "
        "interval spans bands. "
        "Tests: each comparison's primary test is the paired t test on log(B/A) by round (Welch's t on logs "
        "when the two were not measured in the same rounds), Holm-corrected over every comparison of VPN "
        "configurations the study defines; one-sided t and rank tests are secondary and uncorrected. "
        f"A configuration is called ahead only when its corrected p < {ALPHA:g} and the estimated difference "
        f"exceeds {threshold:g}% (a difference is tested, its size beyond {threshold:g}% is estimated), the best "
        f"choice only when it is ahead of every other configuration measured there, equivalent only when a TOST "
        f"(Holm-corrected over the same family) shows it within {threshold:g}%; otherwise the rounds that "
        f"would show a true {threshold:g}% difference to exist are given (power 80% at the family's Bonferroni "
        f"level, from an upper bound of the spread; 'ahead' also needs the estimate beyond {threshold:g}%, which a "
        f"true difference of exactly {threshold:g}% gives about half the time; beyond {PRACTICAL_ROUNDS} rounds, a "
        f"{threshold:g}% difference is said to be below what the setup resolves, with the rounds' spread). "
        "CPU per GB carried is compared by the same tests and rule on the workloads that carry bulk traffic, "
        "Holm-corrected as a family of its own (never under software emulation, where the CPU is the emulator's). "
        + cpu +  # how each tunnel end's CPU was counted and where the ends ran: cpu_text
        f"Stopping: {'; '.join(rules) or 'fixed repetitions'}"
        + (" (the primary metric's interval is then Stein's final one, from the pilot's spread and degrees "
           "of freedom, not a stop-when-tight rule, widened to the t interval of all repetitions where that "
           "reaches further; a comparison after such stopping rejects about 6% of the time under no difference, "
           "not 5%, in simulation before Holm's correction: stopping early follows a pilot whose spread came "
           "out small)" if any("Stein" in rule for rule in rules) else "") + ". "
        f"Outliers: from n >= {OUTLIER_MIN_N}, samples beyond {OUTLIER_K:g} modified z-scores (median and MAD) are "
        "flagged, as are samples taken while another vpnlab run shared the machine; the study fixed before "
        "the run that they " + ("count (the report also shows the results without them)." if settings.counts_flagged
                               else "are left out (the report also shows the results with them; leaving them out "
                                    "narrows the intervals: on clean data a 95% one then covers about 86% at n = 5, "
                                    "91% at n = 10, in simulation).")
    )


def pairing_text(samples: list) -> str:
    """How the rounds held the configurations, and how far apart two samples of one round could lie (the
    round's span, first to last repetition), from the stored samples; '' with a single round."""
    times: dict[int, dict[str, datetime]] = defaultdict(dict)
    for s in samples:
        if s.round is not None and s.measured_at:
            times[s.round].setdefault(s.scenario_id, datetime.fromisoformat(s.measured_at))
    if len(times) < 2:
        return ""
    configurations = len({sid for held in times.values() for sid in held})
    sizes = sorted(len(held) for held in times.values())
    spans = sorted((max(held.values()) - min(held.values())).total_seconds() / 60 for held in times.values())
    full = sum(size == configurations for size in sizes)
    return (f" ({len(times)} rounds, {full} of them with all {configurations} scenarios, the others with "
            f"{sizes[0]} to {sizes[-1]}: a resumed sitting starts a round of its own; two samples of one round lay "
            f"at most {_minutes(statistics.median(spans))} apart in the median round and "
            f"{_minutes(spans[-1])} in the longest)" if full < len(times) else
            f" ({len(times)} rounds, each with all {configurations} scenarios; two samples of one round lay at most "
            f"{_minutes(statistics.median(spans))} apart in the median round, {_minutes(spans[-1])} in the longest)")


def _minutes(value: float) -> str:
    return f"{60 * value:.0f} s" if value < 1 else f"{value:.1f} min" if value < 10 else f"{value:.0f} min"


def cpu_text(store) -> str:
    """How each tunnel end's CPU was counted and where the ends ran, over the stored repetitions
    (each stores its method and placement as raw output 'cpu'); '' without tunnel ends. `store`: a
    store, or what was read of it (store.Stored, with the raw output of 'cpu')."""
    place = {s.id: s.measured_in for s in store.scenarios()}
    rows = [(row["output"], place[row["scenario_id"]]) for row in store.raw_outputs("cpu")]
    tunnels = any(s.metric == "cpu_vpn_client_pct" for s in store.samples(valid_only=False))
    methods, places = Counter(), Counter()
    for output, measured_in in rows:
        record = json.loads(output)
        if record.get("ends"):
            where = "in the VM" if measured_in == "vm" else "on this host"
            method = record["method"] if record["method"] == "ticks" or "cgroup_s" in record else "ticks"
            methods[where, method] += 1
            places[where, "each end on a core of its own" if record["pinned"] else record["placement"]] += 1
    if not methods:
        return ("CPU of each tunnel end: clock ticks of the processes in its namespace, from /proc (this store "
                "recorded no method). ") if tunnels else ""
    counted = "; ".join(f"{where}, {METHODS[method]}, in {n} repetitions" for (where, method), n in sorted(methods.items()))
    placed = "; ".join(f"{where}, {how}, in {n} repetitions" for (where, how), n in sorted(places.items()))
    return (f"CPU of each tunnel end (cpu_vpn_client_pct, cpu_vpn_gateway_pct): {counted}; the other CPU figures "
            f"from /proc clock ticks. Placement of the tunnel ends' daemons: {placed} (pinned by "
            "sched_setaffinity when the machine has a core per tunnel end; traffic tools and vpnlab not pinned). ")
