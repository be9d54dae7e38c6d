"""Text vpnlab did not write (a daemon's log, a store, an inventory, a study's labels), made safe to
print on a rich console."""

from __future__ import annotations

from rich.markup import escape

from .schema import CONTROL


def safe(text, lines: bool = False) -> str:
    """`text` to print as it is: its control characters as visible escapes (`\\x1b`; line breaks kept
    if `lines`), its square brackets not read as rich markup."""
    def visible(match):
        return match.group() if lines and match.group() == "\n" else match.group().encode("unicode_escape").decode()

    return escape(CONTROL.sub(visible, str(text)))
