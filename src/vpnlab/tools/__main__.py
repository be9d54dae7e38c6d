"""`python -m vpnlab.tools packages [--with FILE]`: the Debian packages to install, one a line
(bootstrap.sh installs them), from every declaration the catalog collects and FILE's TOOLS."""

from __future__ import annotations

import runpy
import sys

from ..catalog import packages


def _load_extra(path: str) -> tuple:
    """The TOOLS declared by a file outside the package (the tests' needs)."""
    return tuple(runpy.run_path(path)["TOOLS"])


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "packages":
        print("usage: python -m vpnlab.tools packages [--with FILE]", file=sys.stderr)
        return 2
    extra = _load_extra(argv[2]) if argv[1:2] == ["--with"] and len(argv) > 2 else ()
    print("\n".join(packages(extra)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
