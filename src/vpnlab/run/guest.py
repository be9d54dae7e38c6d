"""Inside the VM: run the scenarios the host handed over, storing into the shared folder.

The host writes job.json (the study text and the scenario ids) into the work folder, with
work/results/results.sqlite holding what it already measured for them (a resumed study's guest
goes on from there), boots the guest with `python -m vpnlab.run.guest <work>`, and merges that
store back into its own afterwards. The same Runner as on the host does the work, so a scenario is
measured the same way in both places.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from ..machines.capabilities import detect
from ..plan.scenarios import make_plan
from ..plan.placement import add_vm_twins, check_plan
from .runner import Runner
from ..store import Store
from ..plan.study import parse_study
from ..machines.vm import JOB, RESULTS


def main(work: Path) -> int:
    job = json.loads((work / JOB).read_text())
    plan = make_plan(parse_study(job["study_text"], job["source"]))
    add_vm_twins(plan, {s.id for s in plan.scenarios if s.vpn.layers})  # every possible one: the job picks
    wanted = set(job["scenarios"])
    plan.drop({s.index for s in plan.scenarios if s.id not in wanted})
    caps = detect()
    problems = check_plan(plan, caps)
    unrunnable = [(s, problems[s.index]) for s in plan.scenarios if s.index in problems]
    plan.drop(problems)
    out = work / RESULTS
    console = Console(stderr=True, width=120, emoji=False)
    Runner(plan, out, caps, console=console, progress=False).run()
    if unrunnable:
        store = Store.open_dir(out)
        for scenario, problem in unrunnable:
            store.add_scenario(scenario, "vm")
            if store.status(scenario.id) != "done":  # one measured to its rule is handed over as context only
                store.set_status(scenario.id, "failed", f"not runnable in the VM: {problem}")
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
