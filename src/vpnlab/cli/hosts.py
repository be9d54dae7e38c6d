"""`vpnlab hosts ...`: real hosts from an Ansible inventory."""

from __future__ import annotations

import dataclasses
import json
from typing import List, Optional

import typer
from rich.table import Table

from .console import out, user_errors
from ..core.printable import safe
from ..core.errors import VpnlabError
from ..hosts.inventory import SSH_SAFE

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Real hosts from an Ansible inventory: list, prepare, doctor, clean.")
EXIT_HOSTS_FAILED = 1

INVENTORY = typer.Option(..., "--inventory", "-i", help="Ansible inventory (YAML, INI, directory ...); an executable "
                         "file is a dynamic inventory: Ansible runs it as a program, as you (root)")
LIMIT = typer.Option(None, "--limit", "-l", help="only these hosts or groups, comma-separated")


def _hosts(inventory: str, pattern: Optional[str], to_connect: bool = True):
    from ..hosts.inventory import limit, load_inventory

    return limit(load_inventory(inventory), pattern, inventory, to_connect)


@app.command("list")
@user_errors
def list_hosts(inventory: str = INVENTORY, limit: Optional[str] = LIMIT):
    """The hosts as vpnlab will connect to them (read by ansible-inventory). An executable
    inventory file is a dynamic inventory: Ansible runs it, as a program, as you (root)."""
    table = Table(title=f"hosts in {safe(inventory)}", title_justify="left")
    for col in ("host", "address", "port", "user", "key", "groups"):
        table.add_column(col)
    for host in _hosts(inventory, limit, to_connect=False):
        refused = not (SSH_SAFE.match(host.name) and SSH_SAFE.match(host.address))
        marked = " [red](refused: SSH would misread it)[/]" if refused else ""
        table.add_row(safe(host.name), safe(host.address) + marked,
                      str(host.port), safe(host.user or "(yours)"), safe(host.key_file or "(ssh default)"),
                      safe(", ".join(host.groups) or "-"))
    out.print(table)


@app.command()
@user_errors
def prepare(inventory: str = INVENTORY, limit: Optional[str] = LIMIT,
            packages: List[str] = typer.Option(None, "--packages", "-p",
                                               help="Debian packages to install (repeat, or comma-separated); "
                                                    "default: iperf3, iproute2, tcpdump"),
            study: Optional[str] = typer.Option(None, "--study", help="install what this study's VPNs and workloads "
                                                "run, with the testbed's own programs (beside any --packages)"),
            as_json: bool = typer.Option(False, "--json", help="print JSON")):
    """Install the packages on each host with vpnlab's Ansible playbook and check its kernel."""
    from ..hosts.prepare import DEFAULT_PACKAGES, prepare as run_prepare, study_packages

    wanted = [p for item in packages or [] for p in item.split(",") if p]
    if study:
        from .run import load_study_arg

        wanted += [p for p in study_packages(load_study_arg(study)[0]) if p not in wanted]
    wanted = wanted or list(DEFAULT_PACKAGES)
    reports = run_prepare(inventory, limit, wanted)
    if as_json:
        out.print_json(json.dumps([dataclasses.asdict(r) for r in reports]))
    else:
        _print_prepared(reports)
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_HOSTS_FAILED)


def _print_prepared(reports) -> None:
    table = Table(title="prepare", title_justify="left")
    for col in ("host", "status", "packages", "kernel", "kernel pieces"):
        table.add_column(col)
    for r in reports:
        pieces = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in r.features.items())
        pkgs = ", ".join(f"{name} {how}" for name, how in r.packages.items())
        table.add_row(*map(safe, (r.host, r.status + (f": {r.message}" if r.message else ""), pkgs or "-",
                                  r.kernel or "-", pieces or "-")))
    out.print(table)


@app.command()
@user_errors
def doctor(inventory: str = INVENTORY, limit: Optional[str] = LIMIT,
           as_json: bool = typer.Option(False, "--json", help="print JSON")):
    """Per host, over SSH: kernel, CPU, kernel pieces, tools, and the NIC toward each other host."""
    from ..hosts.doctor import doctor as examine

    reports = examine(_hosts(inventory, limit))
    if as_json:
        out.print_json(json.dumps([r.as_dict() for r in reports]))
    else:
        _print_examined(reports)
    if not all(r.reachable for r in reports):
        raise typer.Exit(EXIT_HOSTS_FAILED)


def _print_examined(reports) -> None:
    for r in reports:
        if not r.reachable:
            out.print(f"[bold]{safe(r.host)}[/]: [red]unreachable[/]: {safe(r.error)}")
            continue
        out.print(f"[bold]{safe(r.host)}[/]: " + safe(f"kernel {r.kernel}, {r.cpus} x {r.cpu_model or 'unknown CPU'}"))
        out.print("  kernel pieces: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in r.features.items()))
        for path in r.paths:
            out.print(safe(f"  toward {path['to']} ({path['address']}): {path['interface']}, "
                           f"driver {path['driver']}, {path['speed_mbit']} Mbit/s"))
        for name, version in r.tools.items():
            out.print(safe(f"  {name}: {version}"), highlight=False)


@app.command()
@user_errors
def clean(inventory: str = INVENTORY, limit: Optional[str] = LIMIT):
    """Remove what crashed runs left on the hosts (as recorded there), and nothing else."""
    from ..hosts.ssh import clean_host

    failed = False
    for host in _hosts(inventory, limit):
        try:
            lines = [safe(line) for line in clean_host(host)] or [f"{safe(host.name)}: nothing to clean"]
        except VpnlabError as exc:
            lines, failed = [f"{safe(host.name)}: [red]{safe(exc)}[/]"], True
        for line in lines:
            out.print(line, highlight=False)
    if failed:
        raise typer.Exit(EXIT_HOSTS_FAILED)
