"""How a `vpnlab` command speaks and ends: its consoles, its exit codes, and one clear message
(never a traceback) for bad input, a signal, a full disk or a damaged store."""

from __future__ import annotations

import functools
import sys

import typer
from rich.console import Console
from rich.markup import escape

from .store import results_dir
from .errors import VpnlabError
from .plan.schema import CONTROL
from .run.signals import Interrupted

# Piped or logged output keeps whole tables rather than squeezing them to 80 columns.
out = Console(width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)

EXIT_BAD_INPUT = 2
EXIT_SCENARIOS_FAILED = 1
EXIT_INTERRUPTED = 130


def safe(text, lines: bool = False) -> str:
    """Text from a store, an inventory or a file, to print as it is: its control characters as
    visible escapes (`\\x1b`; line breaks kept if `lines`), its square brackets not read as rich
    markup."""
    def visible(match):
        return match.group() if lines and match.group() == "\n" else match.group().encode("unicode_escape").decode()

    return escape(CONTROL.sub(visible, str(text)))


def user_errors(func):
    """Print a VpnlabError as one clear message and exit non-zero, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except VpnlabError as exc:
            err.print(f"[bold red]error:[/] {safe(exc, lines=True)}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT)
        except Interrupted as exc:
            err.print(f"[yellow]interrupted[/] ({exc}): everything it created is removed")
            raise typer.Exit(exc.exit_code)
        except results_dir.STORAGE_ERRORS as exc:  # a full disk, an unreadable store
            known = results_dir.explain(exc)
            if known is None:
                raise
            err.print(f"[bold red]error:[/] {safe(known[0], lines=True)}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(known[1])

    return wrapper
