"""Errors a user can act on. The CLI prints their message and exits non-zero."""


class VpnlabError(Exception):
    """Base class: the message is meant for the user, not a traceback."""


class StudyError(VpnlabError):
    """A study file is malformed, or asks for something impossible."""


class CapabilityError(VpnlabError):
    """This machine lacks a kernel feature or tool a scenario needs."""


class TunnelError(VpnlabError):
    """A tunnel did not come up or died; the message quotes the daemon's log."""


class MeasurementError(VpnlabError):
    """A tool ran but its output holds no usable measurement."""


class CommandError(VpnlabError):
    """An external command failed."""

    def __init__(self, argv, returncode, stdout="", stderr=""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout or "").strip().splitlines()[-5:]
        super().__init__(
            f"command failed (exit {returncode}): {' '.join(map(str, argv))}"
            + ("\n  " + "\n  ".join(detail) if detail else "")
        )
