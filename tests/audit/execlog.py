"""Records each program a Python process runs into the file named by VPNLAB_EXEC_LOG, so the
test suite can fail a test that runs a program no declaration names (see tests/needs.py)."""

import json
import os
import sys

log_path = os.environ.get("VPNLAB_EXEC_LOG")


def _record(event, args):
    if event not in ("subprocess.Popen", "os.exec", "os.posix_spawn") or not log_path:
        return
    argv = args[1]
    line = json.dumps(argv if isinstance(argv, str) else [os.fsdecode(a) for a in argv]) + "\n"
    with open(log_path, "a") as log:
        log.write(line)


_installed = False


def install() -> None:
    """Once per process: a pytest worker loads this by sitecustomize and again by conftest.py, and
    two hooks logged each program twice."""
    global _installed
    if not _installed:
        sys.addaudithook(_record)
        _installed = True
