"""What the catalog answers for the whole of vpnlab, printed:
  python -m vpnlab.catalog packages [--with FILE]   the Debian packages to install, one a line
                                                    (bootstrap.sh installs them), FILE's TOOLS too
  python -m vpnlab.catalog gobuilds [--list]        build the programs declared as Go modules into
                                                    vpnlab's cache (bootstrap.sh runs it), each once;
                                                    --list: only say which, and whether each is built
  python -m vpnlab.catalog metrics                  the metric table of the docs, from the registry"""

from __future__ import annotations

import runpy
import sys

from . import gobuilds, markdown_table, packages
from ..tools import gobuild


def _load_extra(path: str) -> tuple:
    """The TOOLS declared by a file outside the package (the tests' needs)."""
    return tuple(runpy.run_path(path)["TOOLS"])


def _gobuilds(build: bool) -> int:
    """Build (or list) each declared Go module: one line each, `command<TAB>path<TAB>version`; a build that
    fails is said on stderr and the others are still built (exit 1)."""
    failed = 0
    for tool in gobuilds():
        try:
            record = gobuild.build(tool.go, tool.command) if build else gobuild.recorded(tool.go, tool.command)
        except gobuild.GoBuildError as exc:
            print(f"{tool.command}: {exc}", file=sys.stderr)
            failed += 1
            continue
        path = gobuild.program(tool.go, tool.command)
        print(f"{tool.command}\t{path}\t{gobuild.describe(record) if record else 'not built: ' + tool.go.target}")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv == ["metrics"]:
        print(markdown_table())
        return 0
    if argv[:1] == ["packages"] and (len(argv) == 1 or (argv[1] == "--with" and len(argv) == 3)):
        print("\n".join(packages(_load_extra(argv[2]) if len(argv) == 3 else ())))
        return 0
    if argv in (["gobuilds"], ["gobuilds", "--list"]):
        return _gobuilds(build=argv == ["gobuilds"])
    print(__doc__.split("\n", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
