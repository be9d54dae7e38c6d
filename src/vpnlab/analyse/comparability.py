"""What software emulation can have done to a figure, and so what a finding measured in a VM under QEMU
TCG can still decide. The rule is stated once, here (RULE, printed in the report and in docs/seeds.md), and
findings.py applies it to every finding with a side measured under emulation.

Each side's true value (what a machine like the seed's, with the same link, would have measured) lies
within a factor of the measured one: the side's BOUND, [low, high] on true/measured (for a metric judged
as a difference, an offset in its unit). A finding's B/A then lies within [B.low / A.high, B.high / A.low]
of the measured B/A, and a verdict stands only if it holds over that whole widened interval.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..core.flags import any_of

INF = math.inf

# The emulator adds no byte to a packet: sizes and counts on the wire are the protocol's.
WIRE = frozenset({"overhead_bytes", "overhead_model_bytes", "tunnel_mtu", "wan_avg_packet_bytes",
                  "wan_bytes_per_byte"})
# ... but how a stream splits into data and acknowledgements depends on its link: on a link the VM ran at
# another rate than the study's (scaled for emulation), these are that link's (bench emulation measured it).
STREAM_WIRE = frozenset({"wan_avg_packet_bytes", "wan_bytes_per_byte"})
# Rates the emulator can only lower (its CPU and its per-packet delay are slower, never faster).
RATES = frozenset({"throughput_mbps", "link_utilisation_pct"})
# Times the emulator can only raise (it adds its own delay to every packet and every step), and the loss
# its slowness can only add (a full queue, a late reply).
RAISED = frozenset({"transfer_s", "rtt_avg_ms", "rtt_min_ms", "rtt_max_ms", "rtt_mdev_ms", "rtt_under_load_ms",
                    "udp_jitter_ms", "udp_loss_pct", "ping_loss_pct", "setup_s"})
CONTENT = frozenset({"data"})   # workload parameters that change only what the bytes are

RULE = ("Emulation (QEMU TCG) decides what it cannot have set. Each side's true value lies within a bound of its "
        "measured one: as measured outside emulation, and for sizes and counts on the wire (overhead_bytes, "
        "tunnel_mtu; wan_avg_packet_bytes and wan_bytes_per_byte of pings, and of streams on a link the VM ran at"
        " the study's rate), which are the protocol's; a rate (throughput) the emulator can only have lowered, so"
        " the truth is at least the measured rate and, on a link shaped to a rate the VM ran unscaled and a path "
        "that compresses nothing, at most the link's rate: at most 100 / u times the measured, u being the least,"
        " over the rounds, of the side's mean link_utilisation_pct (a side at 90% of the link in every round is "
        "within 11% of the truth whatever its CPU did; the guest's saturated-core flags are shown but not "
        "trusted: a guest starved by its host's load sees no saturated core); a time, delay, jitter or loss the "
        "emulator can only have raised, so the truth is at most the measured; a CPU figure or any other metric is"
        " the emulator's (unbounded). B/A then lies within [B low / A high, B high / A low] of the measured (a "
        "difference B - A within [B low - A high, B high - A low] of it), except that two sides which differ only"
        " in their content (`data`) through the same VPN, link and workload in the same place, on a path that "
        "compresses nothing, were slowed alike: their B/A is as measured. A verdict stands when it holds over the"
        " whole widened interval: B higher (or lower) beyond the margin needs the widened 95% interval beyond 1 "
        "and the widened estimate beyond the margin; equivalence needs the widened 90% interval inside the "
        "margin; the size is judged on the widened 95% interval. So a one-way bound can reproduce or contradict a"
        " finding only one way (a rate the emulator lowered on B can show B higher than A, never lower), and "
        "never show a null finding equivalent. Otherwise: not comparable here, with the side that could have "
        "moved and how far.")


@dataclass(frozen=True)
class Bound:
    """A side's true value against its measured one: a factor [low, high] (scale "ratio") or an offset
    in the metric's unit (scale "difference"), and why."""

    kind: str          # "as measured", "link-bound", "lowered", "raised", "the emulator's"
    low: float
    high: float
    why: str

    @property
    def exact(self) -> bool:
        return self.kind == "as measured"

    @property
    def offset(self) -> tuple[float, float]:
        """The bound on a metric judged as a difference (in its unit): only which way it can have moved."""
        return (0.0 if self.low >= 1 else -INF), (0.0 if self.high <= 1 else INF)


def metric_class(metric: str) -> str:
    """'wire', 'rate', 'raised' or 'other' (the emulator's)."""
    return ("wire" if metric in WIRE else "rate" if metric in RATES else "raised" if metric in RAISED
            else "other")


@dataclass
class Evidence:
    """One scenario's repetitions: the share of its network bound each carried (link rate, or the UDP
    load offered), by round (or repetition, where rounds are unrecorded), and how many a saturated core,
    machine or daemon thread bounded."""

    shares: dict = field(default_factory=dict)   # round -> % of the bound, None where unrecorded
    repetitions: int = 0
    cpu_bound: int = 0


def evidence(store) -> dict[str, Evidence]:
    """Scenario id -> its Evidence, from every valid repetition (counted or not: the stricter)."""
    reps: dict[tuple[str, int], dict] = defaultdict(dict)
    about: dict[tuple[str, int], tuple] = {}
    for s in store.samples():
        reps[(s.scenario_id, s.repetition)][s.metric] = s.value
        about[(s.scenario_id, s.repetition)] = (s.round if s.round is not None else f"#{s.repetition}", s.flags)
    out: dict[str, Evidence] = defaultdict(Evidence)
    for (scenario, repetition), values in reps.items():
        round_, flags = about[(scenario, repetition)]
        out[scenario].repetitions += 1
        out[scenario].cpu_bound += any_of(flags, "cpu_bound")
        out[scenario].shares[round_] = _share(values)
    return dict(out)


def _share(values: dict) -> float | None:
    if values.get("udp_offered_mbps"):
        return 100 * values.get("throughput_mbps", 0.0) / values["udp_offered_mbps"]
    return values.get("link_utilisation_pct")


def compresses(row) -> bool:
    """A layer of the VPN compresses what it carries (OpenVPN lzo/lz4, IPComp): a rate can then exceed
    the link's."""
    try:
        layer = json.loads(row.vpn_options or "{}")
    except ValueError:
        return True   # unreadable: assume the worst
    while isinstance(layer, dict):
        options = layer.get("options") or {}
        if str(options.get("compression", "off")) not in ("off", "False", "false") or options.get("ipcomp"):
            return True
        layer = layer.get("inner")   # the tunnel inside this one (study.Vpn.as_dict)
    return False


def side_bound(metric: str, rows: list, evidence: dict[str, Evidence]) -> Bound:
    """The bound of a side on `metric`: one scenario, or the mean of several (`rows`), round by round."""
    kind = metric_class(metric)
    emulated = [row for row in rows if row.emulated]
    first = rows[0]
    where = f"{first.vpn_label} | {first.link_label} | " + (
        first.workload_label if len(rows) == 1 else f"mean of {len(rows)} workloads")
    rescaled = any(scaled(row) for row in emulated)
    if kind == "wire" and rescaled and metric in STREAM_WIRE and first.workload != "ping":
        return Bound("the emulator's", 0.0, INF, f"{where}: its link ran at another rate in the VM (scaled for "
                     f"emulation): how a stream splits into packets there is not the study's link's")
    if not emulated or kind == "wire":
        return Bound("as measured", 1.0, 1.0, "")
    seen = [evidence.get(row.id, Evidence()) for row in rows]
    saturated = (f"; a saturated CPU in {sum(e.cpu_bound for e in seen)} of {sum(e.repetitions for e in seen)} "
                 "repetitions")
    if kind == "other":
        return Bound("the emulator's", 0.0, INF, f"{where}: {metric} under emulation is the emulator's")
    least = _least_share(seen)   # of the link's rate, or of the UDP load offered
    compressing = any(compresses(row) for row in rows)
    if kind == "rate" and least and not compressing and not rescaled:
        high = max(1.0, 100 / least)
        return Bound("link-bound", 1.0, high, f"{where}: at least {least:.0f}% of its network bound in every round"
                     f"{saturated}: the truth is 1 to {high:.3g} times the measured")
    if kind == "rate":
        why = ("it compresses" if compressing else "its link ran scaled for emulation" if rescaled
               else "no link rate or load to bound it")
        return Bound("lowered", 1.0, INF, f"{where}: emulated, {why}{saturated}: the truth is at least the "
                     "measured, no more is known")
    if metric == "transfer_s" and least and not compressing and not rescaled:
        low = min(1.0, least / 100)
        return Bound("link-bound", low, 1.0, f"{where}: at least {least:.0f}% of the link in every round"
                     f"{saturated}: the truth is {low:.3g} to 1 times the measured")
    return Bound("raised", 0.0, 1.0, f"{where}: emulated: the emulator can only have added to {metric}")


def scaled(row) -> bool:
    """The VM ran the scenario's link at another rate than the study's (plan.py scales a link faster than
    emulation can carry); an unrecorded as-run link counts as scaled."""
    try:
        ran = (json.loads(row.as_run) if row.as_run else {}).get("link") or {}
    except ValueError:
        return True
    return "rate_mbit" not in ran or ran["rate_mbit"] != row.link_rate_mbit


def _least_share(seen: list[Evidence]) -> float | None:
    """The least, over the rounds every scenario completed, of the side's mean share of its bound."""
    rounds = set.intersection(*(set(e.shares) for e in seen)) if seen else set()
    if not rounds:
        return None
    means = []
    for round_ in rounds:
        shares = [e.shares[round_] for e in seen]
        if None in shares:
            return None
        means.append(sum(shares) / len(shares))
    return min(means)


def slowed_alike(a_rows: list, b_rows: list) -> bool:
    """The sides differ only in content, through the same VPN, link and workload kind, in the same place,
    on a path that compresses nothing: the emulator slowed both alike."""
    if len(a_rows) != len(b_rows) or not a_rows:
        return False
    return all(a.vpn_options == b.vpn_options and a.link_label == b.link_label and a.workload == b.workload
               and a.measured_in == b.measured_in and not compresses(a) and _uncontented(a) == _uncontented(b)
               and a.workload_params != b.workload_params for a, b in zip(a_rows, b_rows))


def _uncontented(row) -> dict:
    params = json.loads(row.workload_params or "{}")
    return {k: v for k, v in params.items() if k not in CONTENT}


def ratio_factor(a: Bound, b: Bound) -> tuple[float, float]:
    """How far the true B/A can lie from the measured: [B low / A high, B high / A low]."""
    return _div(b.low, a.high), _div(b.high, a.low)


def difference_offset(a: Bound, b: Bound) -> tuple[float, float]:
    """How far the true B - A can lie from the measured: [B low - A high, B high - A low] of the offsets."""
    return b.offset[0] - a.offset[1], b.offset[1] - a.offset[0]


def _div(x: float, y: float) -> float:
    if y == 0:
        return INF if x > 0 else 0.0
    return x / y if not (math.isinf(x) and math.isinf(y)) else INF


__all__ = ["Bound", "Evidence", "RULE", "compresses", "difference_offset", "evidence", "metric_class", "scaled",
           "ratio_factor", "side_bound", "slowed_alike"]
