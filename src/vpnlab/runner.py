"""Runs a plan: for each scenario, testbed -> tunnel -> workload -> samples -> store.

Each scenario gets a fresh testbed, so one scenario's failure or leftover
state cannot leak into the next. Whatever ends the run (the last scenario, an
exception, Ctrl-C, SIGTERM), the finally-blocks take down tunnels, servers and
namespaces; after a SIGKILL the next run (or `vpnlab clean`) does it from the
state record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import __version__, vm
from .analysis import describe
from .capabilities import Capabilities, tool_versions
from .errors import TunnelError, VpnlabError
from .files import tail
from .measure import measure
from .plan import Plan, Scenario
from .store import DB_NAME, SETUP_REPETITION, Store
from .testbed.state import RunState, clean_stale_runs
from .testbed.topology import Layout, Testbed
from .tunnels import TunnelStage, bring_up, prove_and_measure
from .workloads.background import BackgroundTraffic
from .workloads.base import WorkloadContext

IN_GUEST = os.environ.get("VPNLAB_BACKEND", "").startswith("vm")  # set by vm.Guest for the guest
# The guest's time limit: twice its scenarios' estimates with every repetition, plus a margin each.
VM_TIME_LIMIT_FACTOR = 2
VM_SCENARIO_MARGIN_S = 60


class Interrupted(BaseException):
    """SIGTERM or SIGHUP: unwind like Ctrl-C so every finally-block runs."""


@dataclass
class Progressor:
    """Live progress with ETA; silent when not on a terminal and not asked for."""

    console: Console
    total_s: float
    enabled: bool = True
    _progress: Progress | None = field(default=None, init=False)
    _task: int | None = field(default=None, init=False)

    def __enter__(self):
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("starting", total=round(self.total_s))
        return self

    def __exit__(self, *exc):
        if self._progress:
            self._progress.__exit__(*exc)

    def describe(self, text: str) -> None:
        if self._progress:
            self._progress.update(self._task, description=text)

    def advance(self, seconds: float) -> None:
        if self._progress:
            self._progress.advance(self._task, round(seconds))

    def log(self, text: str) -> None:
        self.console.print(text)


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def signals_unwind():
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Runner:
    def __init__(self, plan: Plan, out_dir: Path, caps: Capabilities, console: Console | None = None,
                 progress: bool = True, in_vm: set[str] = frozenset()):
        self.plan = plan
        self.out_dir = Path(out_dir).resolve()
        self.in_vm = in_vm  # ids of the scenarios that run in the VM
        self.caps = caps
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.failures: list[tuple[Scenario, str]] = []

    def run(self) -> str:
        """Run every unfinished repetition; returns the run's final status."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "study.yaml").write_text(self.plan.study.source_text)
        for line in clean_stale_runs():
            self.console.print(f"[yellow]cleaned up after a crashed {line}[/]")
        store = Store.open_dir(self.out_dir)
        state = RunState.create()
        run_id = store.start_run(
            version=__version__, kernel=self.caps.kernel, hostname=socket.gethostname(),
            capabilities=self.caps.features, tool_versions=tool_versions(),
            study_name=self.plan.study.name, study_text=self.plan.study.source_text,
        )
        status = "failed"
        try:
            with signals_unwind():
                for scenario in self.plan.scenarios:
                    store.add_scenario(scenario, "vm" if scenario.id in self.in_vm or IN_GUEST else "host")
                todo = [s for s in self.plan.scenarios if not self._finished(store, s)]
                here = [s for s in todo if s.id not in self.in_vm]
                in_vm = [s for s in todo if s.id in self.in_vm]
                total = sum(s.estimate_s() for s in here) + sum(s.estimate_s(in_vm=True) for s in in_vm)
                with Progressor(self.console, total, self.show_progress) as progress:
                    for scenario in here:
                        self._run_scenario(store, state, run_id, scenario, progress)
                    if in_vm:
                        self._run_in_vm(store, state, run_id, in_vm, progress)
                status = "completed" if not self.failures else "completed-with-failures"
        except (KeyboardInterrupt, Interrupted):
            status = "interrupted"
            raise
        finally:
            state.teardown()
            store.finish_run(run_id, status)
            store.close()
        return status

    def _run_in_vm(self, store: Store, state: RunState, run_id: int, scenarios: list[Scenario],
                   progress: Progressor) -> None:
        """One VM boot for all the scenarios that need it; its store is merged into ours, also
        when the guest dies half-way (what it measured by then is kept)."""
        work = self.out_dir / "vm"
        guest_store = work / vm.RESULTS / DB_NAME
        progress.describe(f"VM: {len(scenarios)} scenarios")
        started = time.monotonic()
        vm.write_job(work, self.plan.study.source_text, self.plan.study.source_path, [s.id for s in scenarios])
        console = self.out_dir / "logs" / f"vm-run{run_id}-console.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        timeout = sum(s.estimate_s(in_vm=True, most=True) * VM_TIME_LIMIT_FACTOR + VM_SCENARIO_MARGIN_S
                      for s in scenarios)
        accel, error = "", None
        try:
            accel = vm.Guest(state, work, console).run(
                [sys.executable, "-m", "vpnlab.guest", work], timeout, {"VPNLAB_STORE_JOURNAL": "DELETE"})
        except vm.VmError as exc:
            error = str(exc)
        finally:
            note = (f"measured in a VM ({'software emulation (TCG): slow, CPU-bound figures are lower bounds' if accel == 'tcg' else accel}, "
                    f"kernel {vm.find_kernel(download=False).version})") if accel else ""
            if guest_store.is_file():
                store.merge(guest_store, run_id, note)
        guest_log = work / "guest.log"
        for scenario in scenarios:
            if not self._finished(store, scenario) and store.status(scenario.id) != "failed":
                reason = error or f"the guest stopped before this scenario finished:\n{tail(guest_log, 12)}"
                store.set_status(scenario.id, "failed", reason)
            if store.status(scenario.id) == "failed":
                self.failures.append((scenario, store.failure(scenario.id)))
                progress.log(f"[red]scenario {scenario.index} ({scenario.label}) failed in the VM:[/] "
                             f"{store.failure(scenario.id)}")
        progress.advance(time.monotonic() - started)

    @staticmethod
    def _target_met(store: Store, scenario: Scenario) -> bool:
        """Is the primary metric's 95% CI half-width within the rule's target?"""
        values = store.values(scenario.id, scenario.kind.primary)
        if len(values) < max(scenario.repetitions.min, 2):
            return False
        n, mean, sd, low, high = describe(values)
        return mean != 0 and 100 * (high - low) / 2 / abs(mean) <= scenario.repetitions.ci_target_pct

    def _finished(self, store: Store, scenario: Scenario) -> bool:
        done = store.done_repetitions(scenario.id)
        rule = scenario.repetitions
        return len(done) >= rule.max or (rule.adaptive and self._target_met(store, scenario))

    def _repetitions(self, store: Store, scenario: Scenario):
        """Repetition numbers still to measure; an adaptive rule stops once its interval is tight."""
        rule = scenario.repetitions
        for rep in range(1, rule.max + 1):
            if rule.adaptive and self._target_met(store, scenario):
                return
            if rep not in store.done_repetitions(scenario.id):
                yield rep

    def _run_scenario(self, store: Store, state: RunState, run_id: int, scenario: Scenario,
                      progress: Progressor) -> None:
        """testbed -> tunnel -> proof -> repetitions of the workload -> store, on a testbed of its own."""
        progress.describe(f"[{scenario.index + 1}/{len(self.plan.scenarios)}] {scenario.label}")
        log_dir = self.out_dir / "logs" / scenario.id / f"run{run_id}"  # fresh per attempt: readiness checks read these
        log_dir.mkdir(parents=True, exist_ok=True)
        store.set_status(scenario.id, "running")
        bed, ctx, stage = None, None, TunnelStage()
        try:
            started = time.monotonic()
            bed = Testbed.build(state, Layout.for_topology(scenario.topology, len(scenario.vpn.layers)),
                                scenario.link, tag=f"{scenario.index}")
            ctx = WorkloadContext(bed, log_dir)
            bring_up(stage, bed, scenario, state, log_dir)
            prove_and_measure(stage, bed, scenario, log_dir)
            self._store_tunnel(store, run_id, scenario, stage)
            progress.advance(time.monotonic() - started)
            self._repeat(store, run_id, scenario, ctx, stage, progress)
            store.set_status(scenario.id, "done")
        except (VpnlabError, subprocess.SubprocessError) as exc:
            self.failures.append((scenario, str(exc)))
            store.set_status(scenario.id, "failed", str(exc))
            progress.log(f"[red]scenario {scenario.index} ({scenario.label}) failed:[/] {exc}")
        finally:
            if ctx:
                ctx.stop_services()
            stage.down()
            if bed:
                bed.destroy()

    @staticmethod
    def _store_tunnel(store: Store, run_id: int, scenario: Scenario, stage: TunnelStage) -> None:
        for note in stage.notes:
            store.add_note(scenario.id, note)
        if stage.values and not store.has_sample(scenario.id, SETUP_REPETITION, "setup_s"):
            store.record_repetition(run_id, scenario.id, SETUP_REPETITION, stage.values, {}, [])

    def _repeat(self, store: Store, run_id: int, scenario: Scenario, ctx: WorkloadContext, stage: TunnelStage,
                progress: Progressor) -> None:
        """Every repetition still to measure, each stored the moment it is measured."""
        background = None
        if scenario.link.background:
            background = BackgroundTraffic(ctx, scenario.link.background, seed=int(scenario.id[1:], 16))
        for rep in self._repetitions(store, scenario):
            problem = stage.health()
            if problem:
                raise TunnelError(f"tunnel died before repetition {rep}: {problem}")
            rep_started = time.monotonic()
            sample = measure(scenario, ctx, len(stage.tunnels), background)
            store.record_repetition(run_id, scenario.id, rep, sample.values, sample.raw, sample.flags)
            if rep <= scenario.repetitions.min:  # the estimate counted the minimum
                progress.advance(time.monotonic() - rep_started)
        if scenario.repetitions.adaptive:
            met = self._target_met(store, scenario)
            store.set_ci_target_met(scenario.id, met)
            if not met:
                store.add_note(scenario.id, f"the 95% CI of {scenario.kind.primary} was still "
                                            f"wider than {scenario.repetitions.ci_target_pct:g}% of the mean "
                                            f"after {scenario.repetitions.max} repetitions")


def default_out_dir() -> Path:
    return Path("vpnlab-results") / time.strftime("%Y%m%d-%H%M%S")

