"""The commands about this machine: doctor, list, clean."""

from __future__ import annotations

import json
from typing import Optional

import typer

from .console import out, user_errors
from ..core.printable import safe
from .common import app, need_root, print_table
from .run import check_backend, load_study_arg


@app.command()
@user_errors
def doctor(
    study: Optional[str] = typer.Argument(None, help="also say where each scenario of this study would run"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    backend: str = typer.Option("auto", "--backend", help="as for `vpnlab run`: auto, netns or vm"),
    inventory: Optional[str] = typer.Option(None, "--inventory", "-i", help="instead, each host of this Ansible "
                                            "inventory, over SSH (as `vpnlab hosts doctor`); an executable file is "
                                            "a dynamic inventory: Ansible runs it as a program, as you (root)"),
):
    """What this kernel and machine offer, which VPN implementations can run here, whether a VM
    can run the rest, and (given a study) where each of its scenarios would run."""
    from ..machines import vm
    from ..machines.capabilities import detect, tool_versions

    check_backend(backend)
    if inventory is not None:
        from .hosts import doctor as hosts_doctor

        return hosts_doctor(inventory=inventory, limit=None, as_json=as_json)
    need_root("vpnlab doctor")
    caps = detect()
    versions = tool_versions()
    report = {
        "kernel": caps.kernel,
        "features": caps.features,
        "tools": {t: {"path": path, "version": versions.get(t)} for t, path in caps.tools.items()},
        "drivers": _driver_usability(caps),
        "vm": vm.describe(),
        "tunnel_ends": _tunnel_ends(),
        "placement": _placement(study, backend, caps) if study is not None else [],
    }
    if as_json:
        out.print_json(json.dumps(report))
        return
    _print_doctor(report, caps, study, backend)


def _driver_usability(caps) -> dict:
    from ..catalog import DRIVERS

    drivers = {}
    for name, driver in DRIVERS.items():
        drivers[name] = [{"implementation": impl.name, "usable": not impl.missing(caps), "missing": impl.missing(caps)}
                         for impl in driver.implementations(driver.Options())]
    return drivers


def _tunnel_ends() -> dict:
    """How each tunnel end's CPU is counted here, and which tunnels get a core per end."""
    from ..testbed.cgroups import assign, cores, this_machine

    accounting, available = this_machine(), cores()
    return {"cpu_accounting": accounting.method, "how": accounting.text, "why_not_cgroups": accounting.why_not,
            "cores": available, "pinned": {f"{ends} ends": assign(ends, available) for ends in (2, 4)}}


def _placement(study: str, backend: str, caps) -> list[dict]:
    from ..plan.scenarios import make_plan
    from ..plan.placement import check_scenario, place

    plan = make_plan(load_study_arg(study)[0])
    placed = place(plan, backend)
    problems, in_vm = placed.cannot, placed.in_vm
    rows = []
    for sc in plan.scenarios:
        where = "nowhere" if sc.index in problems else ("vm" if sc.id in in_vm else "here")
        why = problems.get(sc.index) or ("; ".join(check_scenario(sc, caps)) if where == "vm" else "")
        if sc.vm_twin:
            why = "the no-VPN baseline again, for the VPNs measured in the VM (emulation slows both)"
        rows.append({"index": sc.index, "scenario": sc.label, "runs": where, "why": why})
    return rows


def _print_doctor(report: dict, caps, study: str | None, backend: str) -> None:
    from ..core.features import FEATURES

    print_table(f"kernel {caps.kernel} and libraries", ("feature", "present"),
           [(text, "[green]yes[/]" if caps.has(f) else "[red]no[/]") for f, text in FEATURES.items()])
    print_table("tools", ("tool", "where", "version / how to get it"),
           [(t, info["path"] or "[red]missing[/]", info["version"] or caps.hint(t))
            for t, info in sorted(report["tools"].items())])
    print_table("VPN drivers", ("driver", "implementation", "usable here"),
           [(name, i["implementation"], "[green]yes[/]" if i["usable"] else "[red]no[/]: needs " + ", ".join(i["missing"]))
            for name, impls in report["drivers"].items() for i in impls])
    info = report["vm"]
    if info["available"]:
        out.print(f"VM backend: available ({'KVM' if info['kvm'] else 'software emulation (TCG): slow'}; "
                  f"kernel {info['kernel']}); with --backend auto it runs what this kernel cannot")
    else:
        out.print(f"VM backend: [red]unavailable[/]: {info['problem']}")
    ends = report["tunnel_ends"]
    out.print(f"CPU of each tunnel end: {ends['how']}" + (f" ({ends['why_not_cgroups']})" if ends["why_not_cgroups"] else "")
              + f"; {len(ends['cores'])} cores: " + ", ".join(
                  f"{'one tunnel' if n == '2 ends' else 'nested tunnels'} ({n}) " + (f"pinned to cores {cores}" if cores
                                                                                     else "not pinned")
                  for n, cores in ends["pinned"].items()), highlight=False)
    if report["placement"]:
        print_table(f"where the scenarios of {study} run (--backend {backend})", ("#", "scenario", "runs", "why"),
               [(str(r["index"]), safe(r["scenario"]), r["runs"], safe(r["why"])) for r in report["placement"]])


@app.command("list")
@user_errors
def list_things():
    """VPN drivers with their options, workload kinds, every metric vpnlab can record, built-in studies."""
    from ..catalog import DRIVERS, KINDS, METRICS
    from ..plan.study import builtin_studies

    print_table("VPN drivers", ("driver", "what", "options (default)"),
           [(name, driver.summary, ", ".join(f"{k}={f.default!r}" if f.default is not None else k
                                             for k, f in driver.Options.model_fields.items()) or "-")
            for name, driver in DRIVERS.items()])
    print_table("workloads", ("kind", "what", "primary metric", "metrics"),
           [(kind, k.summary, k.primary, ", ".join(m.name for m in k.metrics)) for kind, k in KINDS.items()])
    print_table("metrics", ("metric", "unit", "direction", "recorded by", "meaning"),
           [(m.name, m.unit, m.direction, m.producers, m.meaning) for m in METRICS.values()])
    out.print("built-in studies: " + ", ".join(sorted(builtin_studies())))


@app.command()
@user_errors
def clean():
    """Remove what crashed runs left behind (namespaces, processes, keys), and nothing else."""
    from ..testbed.state import clean_stale_runs

    need_root("vpnlab clean")
    cleaned = clean_stale_runs()
    if not cleaned:
        out.print("nothing to clean")
    for line in cleaned:
        out.print(f"cleaned {line}")
