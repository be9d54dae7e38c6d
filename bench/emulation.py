"""bench emulation: does the comparability rule (vpnlab.analyse.comparability) say truly which figures a VM
under software emulation can decide?

The same scenarios run on this host (netns) and in the VM (QEMU TCG): no VPN, WireGuard (wireguard-go on
both: the host's kernel has none, and the same software on both sides is the point), OpenVPN and strongSwan
(libipsec on both), on an 8 Mbit/s tbf link (link-bound) and a 1000 Mbit/s one (CPU-bound on both), TCP
throughput, ping RTT, the tunnel's overhead and the bytes on the wire. The rule gives each VM figure,
from the VM's own evidence (utilisation of the link, the metric), a bound: true/measured within [low, high].
Taking this host's figure as the truth (no emulation here), VM/host should lie within [1/high, 1/low]: the
VM/host ratio's 95% interval (Welch on logs; a tunnel's once-measured overhead as is) for rates and byte
counts, the difference VM - host for RTT. A figure the rule calls "as measured" should agree (the ratio's
interval, widened by AGREEMENT_PCT, containing 1); a bounded one should lie within its bound, and the table
shows which agree anyway. This host has no netem, so no link has a delay, in either place.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vpnlab.analyse import comparability
from vpnlab.analyse.judging import values_of
from vpnlab.plan.analysis_settings import AnalysisSettings
from vpnlab.plan.scenarios import make_plan
from vpnlab.plan.placement import place
from vpnlab.run.runner import Runner
from vpnlab.analyse.stats import difference_ms, welch_log_ratio
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

STUDY = """
name: bench-emulation
repetitions: {reps}
vpns:
  - driver: none
  - {{driver: wireguard, options: {{implementation: wireguard-go}}}}
  - {{driver: openvpn, options: {{cipher: AES-256-GCM}}}}
  - {{driver: strongswan, options: {{implementation: libipsec, esp: aes128gcm16}}}}
links: [{{rate_mbit: [8, 1000]}}]
workloads:
  - {{kind: tcp, duration_s: {seconds}, omit_s: 1}}
  - {{kind: ping, count: 20, interval_s: 0.05}}
"""
METRICS = ("throughput_mbps", "rtt_avg_ms", "overhead_bytes", "wan_avg_packet_bytes", "wan_bytes_per_byte")
AGREEMENT_PCT = 2.0        # a ratio "agrees" when its 95% interval, widened by this, contains 1
DELAY_TOLERANCE_MS = 0.5   # a delay "agrees" when the difference's 95% interval lies within +- this
RESULTS = Path(__file__).parent / "results"


def run_both(quick: bool, folder: Path) -> None:
    """The study on this host and in the VM, each into its own store under `folder`."""
    text = STUDY.format(reps=2 if quick else 4, seconds=3 if quick else 6)
    for backend in ("netns", "vm"):
        plan = make_plan(parse_study(text))
        placed = place(plan, backend)
        placed.enforce(plan, drop=True)
        Runner(plan, folder / backend, placed.caps, console=Console(), progress=False, in_vm=placed.in_vm).run()


def compare(folder: Path) -> list[dict]:
    """Each scenario's figures in the VM against the host's, with the bound the rule gives the VM's."""
    read = {}
    for backend in ("netns", "vm"):
        store = Store.open_dir(folder / backend)
        try:
            read[backend] = _read(store)
        finally:
            store.close()
    rows = []
    for key, (vm_row, vm_values, seen) in sorted(read["vm"].items()):
        if key not in read["netns"]:
            continue
        host_values = read["netns"][key][1]
        for metric in METRICS:
            host, vm = host_values.get(metric, []), vm_values.get(metric, [])
            if not host or not vm:
                continue
            bound = comparability.side_bound(metric, [vm_row], seen)
            row = {"vpn": key[0], "link": key[1], "workload": key[2], "metric": metric, "rule": bound.kind,
                   "truth_over_vm": [bound.low, bound.high], "why": bound.why}
            rows.append(row | _against(metric, host, vm, bound))
    return rows


def _read(store: Store) -> dict:
    """(VPN, link, workload) -> (scenario row, metric -> values, the rule's evidence)."""
    values = values_of(store, AnalysisSettings())[0]
    seen = comparability.evidence(store)
    return {(row.vpn_label.removesuffix(" (in the VM)"), row.link_label, row.workload_label):
            (row, {m: [v for _, v in values.get((row.id, m), [])] for m in METRICS}, seen)
            for row in store.scenarios()}


def _against(metric: str, host: list[float], vm: list[float], bound) -> dict:
    """The VM's figure against the host's: whether it agrees, and whether it lies where the rule's bound
    puts it (the host's figure taken as the truth: true/measured in [bound.low, bound.high])."""
    out = {"host": statistics.mean(host), "vm": statistics.mean(vm), "n_host": len(host), "n_vm": len(vm)}
    if metric in DELAYS:   # VM - host: the rule says at least 0 (the emulator only adds)
        test = difference_ms(host, vm, paired=False)
        if test.low is None:
            return out | {"scale": "-", "agrees": None, "where_the_rule_says": None}
        agrees = -DELAY_TOLERANCE_MS <= test.low and test.high <= DELAY_TOLERANCE_MS
        inside = test.high >= -DELAY_TOLERANCE_MS if bound.low < 1 else agrees
        return out | {"scale": "VM - host ms", "estimate": test.estimate, "low": test.low, "high": test.high,
                      "agrees": agrees, "where_the_rule_says": inside}
    if min(host + vm) <= 0:
        return out | {"scale": "-", "agrees": None, "where_the_rule_says": None}
    widen = 1 + AGREEMENT_PCT / 100
    if min(len(host), len(vm)) < 2 or (len(set(host)) == 1 and len(set(vm)) == 1):  # once a tunnel, or never varied
        low = high = estimate = vm[0] / host[0]
    else:
        test = welch_log_ratio(host, vm)
        low, high, estimate = test.low, test.high, test.estimate
    agrees = low / widen <= 1 <= high * widen
    # VM/host = measured/true lies in [1 / bound.high, 1 / bound.low]
    lowest, highest = 1 / bound.high, (math.inf if bound.low == 0 else 1 / bound.low)
    inside = high * widen >= lowest and low / widen <= highest
    return out | {"scale": "VM/host", "estimate": estimate, "low": low, "high": high, "agrees": agrees,
                  "where_the_rule_says": inside}


DELAYS = frozenset({"rtt_avg_ms"})


def bench_emulation(quick: bool) -> dict:
    folder = RESULTS / f"emulation-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True)
    started, load = time.monotonic(), _load()
    run_both(quick, folder)
    return summarise(compare(folder), folder, time.monotonic() - started, [load, _load()])


def summarise(rows: list[dict], folder: Path, seconds: float, load: list) -> dict:
    """Per kind of bound: how many figures, how many lie where the rule puts them, how many agree."""
    kinds = {}
    for kind in sorted({r["rule"] for r in rows}):
        mine = [r for r in rows if r["rule"] == kind]
        kinds[kind] = {"figures": len(mine), "agree": sum(bool(r["agrees"]) for r in mine),
                       "where_the_rule_says": sum(bool(r["agrees" if kind == "as measured" else "where_the_rule_says"])
                                                  for r in mine)}
    return {"stores": str(folder), "run_s": seconds, "load_average": load, "rule": comparability.RULE,
            "agreement_pct": AGREEMENT_PCT, "delay_tolerance_ms": DELAY_TOLERANCE_MS, "rows": rows, "kinds": kinds}


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def report_emulation(result: dict, console: Console) -> None:
    table = Table(title="the same scenarios in the VM (TCG) and on this host: the rule's bound on the VM's figure")
    for col in ("vpn", "link", "workload", "metric", "host", "VM", "VM vs host [95%]", "rule: truth/VM", "agrees",
                "where the rule says"):
        table.add_column(col, justify="right" if col in ("host", "VM") else "left")
    for r in result["rows"]:
        shown = "-" if r.get("low") is None else f"{r['scale']} {_g(r['estimate'])} [{_g(r['low'])}, {_g(r['high'])}]"
        table.add_row(r["vpn"], r["link"], r["workload"], r["metric"], _g(r["host"]), _g(r["vm"]), shown,
                      f"{r['rule']} {_g(r['truth_over_vm'][0])}..{_g(r['truth_over_vm'][1])}", _yes(r["agrees"]),
                      _yes(r["where_the_rule_says"]) if r["rule"] != "as measured" else "")
    console.print(table)
    console.print(f"agreeing: the VM/host 95% interval widened by {result['agreement_pct']:g}% contains 1, or an RTT "
                  f"difference within +-{result['delay_tolerance_ms']:g} ms; the host's figure taken as the truth")
    for kind, k in result["kinds"].items():
        console.print(f"  {kind}: {k['figures']} figures, {k['where_the_rule_says']} where the rule puts them, "
                      f"{k['agree']} agree with this host")
    console.print(f"load average {result['load_average'][0]} at the start, {result['load_average'][1]} at the end; "
                  f"{result['run_s']:.0f} s; stores in {result['stores']}")


def _g(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _yes(value) -> str:
    return "-" if value is None else "yes" if value else "no"


if __name__ == "__main__":   # re-analyse kept stores: python -m bench.emulation bench/results/emulation-...
    kept = Path(sys.argv[1])
    report_emulation(summarise(compare(kept), kept, 0.0, [_load(), _load()]), Console())
