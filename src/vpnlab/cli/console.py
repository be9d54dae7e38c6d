"""How a `vpnlab` command speaks and ends: its consoles, its exit codes, and one clear message
(never a traceback) for bad input, a signal, a full disk or a damaged store."""

from __future__ import annotations

import functools
import sys
import tempfile
import traceback
from pathlib import Path

import typer
from rich.console import Console

from ..store import results_dir
from ..core.errors import VpnlabError
from ..core.backend import IN_GUEST
from ..core.printable import safe
from ..core.signals import Interrupted

# Piped or logged output keeps whole tables rather than squeezing them to 80 columns; no emoji
# codes: a label or a quoted line holding ':x:' prints as it is written.
out = Console(width=None if sys.stdout.isatty() else 150, emoji=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 150, emoji=False)

EXIT_BAD_INPUT = 2
EXIT_SCENARIOS_FAILED = 1
EXIT_INTERRUPTED = 130
EXIT_BUG = 70  # sysexits' EX_SOFTWARE


def user_errors(func):
    """How a command ends on an error: bad input, a signal, a full disk as one clear message and
    its exit code; anything else is a bug, said so in one message with its traceback kept aside."""

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
                report_bug(exc)
                raise typer.Exit(EXIT_BUG) from None
            err.print(f"[bold red]error:[/] {safe(known[0], lines=True)}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(known[1])
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer's own ways out
            raise
        except Exception as exc:  # noqa: BLE001  (a bug: whatever it is, one message and its traceback kept)
            report_bug(exc)
            raise typer.Exit(EXIT_BUG)

    return wrapper


def report_bug(exc: BaseException) -> None:
    """A bug in vpnlab, not in the input: where it happened in one line, its traceback in a new
    file to attach to a bug report (the command's cleanup has run by then). A guest's temporary
    files die with it, so there the traceback goes to its log, which the host keeps."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{Path(__file__).parent}/" in f.filename] or frames
    where = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno} in {ours[-1].name}" if ours else ""
    text = "".join(traceback.format_exception(exc))
    kept = "its traceback:\n" + text
    if not IN_GUEST:
        try:
            with tempfile.NamedTemporaryFile("w", prefix="vpnlab-bug-", suffix=".txt", delete=False) as file:
                file.write(text)
            kept = f"its traceback is in {file.name}"
        except OSError:  # no room for it: here rather than nowhere
            pass
    err.print(f"[bold red]vpnlab failed on a bug[/] ({type(exc).__name__}: {safe(exc)}{safe(where)}); please "
              f"report it. {safe(kept, lines=True)}", highlight=False, soft_wrap=True)
