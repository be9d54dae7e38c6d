from pathlib import Path

__version__ = "0.1.0"


def version() -> str:
    """This vpnlab's version and, run from a git checkout, the commit: the sittings of one study may
    run different code, and a result must say which (read from .git's files: no program started)."""
    commit = _checkout_commit(Path(__file__).resolve().parents[2])
    return f"{__version__}+g{commit[:10]}" if commit else __version__


def _checkout_commit(root: Path) -> str:
    git = root / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: <its folder in the main checkout's .git>"
            git = root / git.read_text().split(":", 1)[1].strip()  # (relative to the checkout, or absolute)
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head  # detached
        ref = head[5:]
        common = git / (git / "commondir").read_text().strip() if (git / "commondir").is_file() else git
        for folder in (git, common):
            if (folder / ref).is_file():
                return (folder / ref).read_text().strip()
        packed = (common / "packed-refs").read_text().splitlines()
        return next((line.split()[0] for line in packed if line.endswith(f" {ref}")), "")
    except (OSError, IndexError):
        return ""
