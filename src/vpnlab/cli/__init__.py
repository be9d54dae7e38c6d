"""The `vpnlab` command line: one module per group of commands, all on one typer app.

Each command imports the parts of vpnlab it runs inside its own function, not at the top of its
module: every command's module is loaded to build the app, and the whole pipeline takes 1.5 s of
CPU to import (hosts/ alone starts some 30 programs, as asyncssh looks for liboqs), where
`vpnlab --help` takes 0.3 s. Nothing below cli/ imports cli/, so this dodges no cycle."""

from __future__ import annotations

# Loaded before main() installs the signal handlers, as pydantic's core is: a signal raised while a
# Rust extension initialises makes it panic (a traceback, not exit 143), and the drivers load this one later
import cryptography.x509  # noqa: F401
import os

import typer

from .. import version as vpnlab_version
from ..core import signals
from . import machine  # noqa: F401  (their commands register themselves on the app)
from . import results, run, tune
from .console import out
from .common import app

SAFE_UMASK = 0o022


@app.callback(invoke_without_command=True)
def main(version: bool = typer.Option(False, "--version", help="print the version and exit")):
    signals.install()  # before anything is created, until the program exits
    os.umask(os.umask(0) | SAFE_UMASK)  # whatever the caller's: results 0755 and 0644 at most, secrets tighter
    if version:
        out.print(f"vpnlab {vpnlab_version()}")
        raise typer.Exit()


from .hosts import app as hosts_app  # noqa: E402

app.add_typer(hosts_app, name="hosts")
