"""How vpnlab ends on a signal, as Unix programs do.

SIGINT, SIGTERM and SIGHUP unwind the program (every finally-block tears down what it made)
and end it with 128 + the signal's number (130, 143, 129). A signal the program was started
with ignored stays ignored: `nohup vpnlab run` survives the terminal closing, and a run
started in the background of a non-interactive shell (SIGINT ignored) is stopped with SIGTERM.
The handlers are installed before anything is created and stay until the program exits.
"""

from __future__ import annotations

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


def _raise(signum, frame):
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
