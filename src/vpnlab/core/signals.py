"""How vpnlab ends on a signal, as Unix programs do.

SIGINT, SIGTERM and SIGHUP unwind the program (every finally-block tears down what it made)
and end it with 128 + the signal's number (130, 143, 129). A signal the program was started
with ignored stays ignored: `nohup vpnlab run` survives the terminal closing, and a run
started in the background of a non-interactive shell (SIGINT ignored) is stopped with SIGTERM.
The handlers are installed before anything is created and stay until the program exits.
"""

from __future__ import annotations

import contextlib
import signal

UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal asked the program to stop: unwind like Ctrl-C so every finally-block runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_held = 0  # `held` blocks open
_pending: int | None = None  # a signal that came meanwhile


def _raise(signum, frame):
    global _pending
    if _held:
        _pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def held():
    """A step not to be cut in two, such as starting a process its caller must then end: a signal
    meanwhile is raised once the block is over. (Blocking the signal would not do: another thread
    may take it, and Python runs the handler in the main thread wherever that is.)"""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            signum, _pending = _pending, None
            raise Interrupted(signum)


def install() -> list[str]:
    """Handle each unwinding signal that is not inherited as ignored; the names left ignored."""
    ignored = []
    for sig in UNWINDING:
        if signal.getsignal(sig) is signal.SIG_IGN:
            ignored.append(sig.name)
        else:
            signal.signal(sig, _raise)
    return ignored
