"""Two things many parts do with files: quote the end of a log, and write a secret."""

from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 15, indent: str = "    ") -> str:
    """The last lines of a log, indented to sit under the message that quotes them."""
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return indent + "(no log)"
    return "\n".join(indent + line for line in text[-lines:])


def write_secret(path: Path, content: str) -> Path:
    """A file only root can read, mode 0600 from its creation (never readable for a moment)."""
    path.touch(mode=0o600)
    path.chmod(0o600)  # touch keeps the mode of a file that existed
    path.write_text(content)
    return path
