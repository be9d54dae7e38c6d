"""What the `vpnlab` commands share beyond vpnlab.cli.console: the app they register on, and a few
helpers."""

from __future__ import annotations

import os

import typer
from rich.table import Table

from .console import out
from ..core.errors import VpnlabError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure what a VPN costs, on real VPN software.")


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise VpnlabError(f"{what} builds network namespaces and needs root: run it with sudo")


def print_table(title: str, columns: tuple[str, ...], rows) -> None:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    out.print(table)

