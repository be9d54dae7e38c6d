"""Runs a plan in rounds: in each round every scenario that still needs a repetition runs once,
in an order randomised per round (seeded, recorded with each repetition) unless the study asks
for its listed order. Rounds are the blocks the analysis pairs configurations by, so drift over
time hits every configuration alike instead of the one that happens to run last.

Each repetition gets a fresh testbed and tunnel (repetition.py). Whatever ends the run (the
last round, an exception, a signal), the finally-blocks take down tunnels, servers and
namespaces; after a SIGKILL the next run (or `vpnlab clean`) does it from the state record.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import version
from ..machines import vm
from ..core.backend import EMULATED, IN_GUEST
from ..machines.capabilities import Capabilities, this_machine, tool_versions
from ..catalog import unit
from ..measure.cpu import OtherLoadSeries, shared_machine_flag
from ..core.files import tail, write_own
from ..core.printable import safe
from ..machines.provenance import TCG_NOTE
from ..plan.scenarios import Plan, Scenario, duration, measured_pace, round_order
from .mesh_run import run_mesh_repetition
from .repetition import run_repetition
from ..core.signals import Interrupted
from .stopping import rounds_wanted, stein_note
from ..store import DB_NAME, Store
from ..testbed.state import RunState, clean_stale_runs, other_live_runs
from ..workloads.background import arrivals_seed

# The guest's time limit: twice its scenarios' estimates with every repetition, plus a margin each.
VM_TIME_LIMIT_FACTOR = 2
VM_SCENARIO_MARGIN_S = 60
# ... and once, the guest's own start before its first scenario (imports, the capability probe, the
# tool versions): seconds on a quiet machine, but over 90 s under emulation with other work on the cores.
VM_GUEST_SETUP_S = 180
FAILURES_IN_A_ROW = 2   # a scenario whose repetitions fail this often in a row has failed


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


class HostWatch:
    """What a VM guest cannot see while it measures, watched on the host: other vpnlab runs (the guest's
    /run is its own) and other programs' load (its /proc is its own). The host flags each repetition
    the guest measured while either went on, as a repetition measured here is flagged (repetition.py)."""

    POLL_S = 2.0

    def __init__(self, run_id: str):
        self.run_id, self.seen = run_id, []  # (time, the other runs then)
        self.load = OtherLoadSeries()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self.started = time.time()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while True:
            others = other_live_runs(self.run_id)
            if others:
                self.seen.append((time.time(), others))
            self.load.sample()
            if self._stop.wait(self.POLL_S):
                return

    def flag(self, store: Store, run_id: int, scenario_ids: list[str]) -> None:
        """Flag each repetition the guest completed for these scenarios whose span (from the one
        before it, or the boot) came within a poll of a moment another run was seen, or in which
        other programs loaded the host."""
        start = self.started
        for scenario_id, repetition, completed_at in store.completed(run_id, scenario_ids):
            end = datetime.fromisoformat(completed_at).timestamp()
            others = [name for t, names in self.seen if start - self.POLL_S <= t <= end + self.POLL_S
                      for name in names]
            flags = ([shared_machine_flag(others)] if others else []) + self.load.flags(start, end)
            for flag in flags:
                store.add_flag(scenario_id, repetition, flag)
            start = end


class Runner:
    def __init__(self, plan: Plan, out_dir: Path, caps: Capabilities, console: Console | None = None,
                 progress: bool = True, in_vm: set[str] = frozenset(), hosts=None, refused: dict[str, str] | None = None):
        self.plan = plan
        self.hosts = hosts  # hosts.testbed.HostSet: the study runs on real hosts (probed, connected)
        self.refused = refused or {}  # id -> why the place it runs cannot run it: failed before it starts
        self._stopping = threading.Event()  # pairs of hosts in threads of their own: stop after this repetition
        self._failing = threading.Lock()    # ... which may find a lost host at the same time
        self.out_dir = Path(out_dir).resolve()
        self.in_vm = in_vm  # ids of the scenarios that run in the VM
        self.caps = caps
        self.console = console or Console(stderr=True, emoji=False)
        self.show_progress = progress
        self.failures: list[tuple[Scenario, str]] = []
        self.unfinished: list[tuple[Scenario, str]] = []  # short of their rule when the VM guest ended

    def run(self) -> str:
        """Run every unfinished repetition; returns the run's final status."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_own(self.out_dir / "study.yaml", self.plan.study.source_text)
        for line in clean_stale_runs():
            self.console.print(f"[yellow]cleaned up after a crashed {safe(line)}[/]")
        store = Store.open_dir(self.out_dir)
        store.mark_killed_runs()
        state = RunState.create()
        for other in other_live_runs(state.run_id):
            self.console.print(f"[yellow]another vpnlab run is going on on this machine ({safe(other)}): both measure "
                               "each other's load; their samples are flagged while they overlap[/]")
        run_id = store.start_run(
            version=version(), kernel=self.caps.kernel, hostname=socket.gethostname(),
            capabilities=self.caps.features, tool_versions=self._tool_versions(),
            study_name=self.plan.study.name, study_text=self.plan.study.source_text,
            hosts=self.hosts.describe() if self.hosts else {socket.gethostname(): this_machine()},
        )
        status = "failed"
        try:
            if self.hosts:
                self.hosts.begin(state.run_id)  # the run's record on each host, before anything there
            for scenario in self.plan.scenarios:
                if self.hosts:
                    store.add_scenario(scenario, "host", scenario.hosts)
                else:
                    store.add_scenario(scenario, "vm" if scenario.id in self.in_vm or IN_GUEST else "host")
                    if note := scenario.scale_for_emulation() if EMULATED else None:
                        store.add_note(scenario.id, note)
            self._refuse(store)
            todo, total = self._todo(store)
            for scenario in todo:  # only what this sitting measures (the guest records how it runs its own)
                if scenario.id not in self.in_vm:
                    store.record_as_run(scenario)
            short = {s.id for s in todo}
            for scenario in self.plan.scenarios:  # measured to its rule by a sitting that ended before saying so
                if scenario.id not in short and store.status(scenario.id) not in ("done", "failed"):
                    self._settle(store, scenario)
            here = [s for s in todo if s.id not in self.in_vm]
            in_vm = [s for s in todo if s.id in self.in_vm]
            with Progressor(self.console, total, self.show_progress) as progress:
                if self.hosts and len(self.hosts.pairs) > 1:
                    self._pairs_in_parallel(store, state, run_id, here, progress)
                else:
                    self._rounds(store, state, run_id, here, progress)
                if in_vm:
                    self._run_in_vm(store, state, run_id, in_vm, progress)
            status = "completed-with-failures" if self.failures else "incomplete" if self.unfinished else "completed"
        except (KeyboardInterrupt, Interrupted):
            status = "interrupted"
            self._settle_measured(store)
            raise
        finally:
            for problem in self.hosts.close() if self.hosts else []:
                self.console.print(f"[red]{safe(problem, lines=True)}[/]")
            state.teardown()
            store.finish_run(run_id, status)
            store.close()
        return status

    def _settle_measured(self, store: Store) -> None:
        """On an interruption: a scenario whose last repetition was stored before the signal, and which
        needs no more, is done (`show` would call it not finished otherwise)."""
        for scenario in self.plan.scenarios:
            if store.status(scenario.id) == "running" and not self._needs_more(store, scenario):
                self._settle(store, scenario)

    def _refuse(self, store: Store) -> None:
        """The scenarios the place they run cannot run (a host's kernel lacks a piece) fail with the
        reason before anything starts; one measured to its rule already is left done."""
        for scenario in self.plan.scenarios:
            reason = self.refused.get(scenario.id)
            if reason and store.status(scenario.id) != "done":
                store.set_status(scenario.id, "failed", reason)
                self.failures.append((scenario, reason))
                self.console.print(f"[red]scenario {scenario.index} ({safe(scenario.label)}) failed before it started:[/] "
                                   f"{safe(reason, lines=True)}", highlight=False)

    def _tool_versions(self) -> dict[str, str]:
        """Recorded with the run. On real hosts, theirs (in their facts). A VM guest runs this
        machine's own programs (its root filesystem) and its run row is not merged: asking ~60
        programs their version under emulation took ~30 s of every boot for nothing."""
        return {} if self.hosts or IN_GUEST else tool_versions()

    def _run_in_vm(self, store: Store, state: RunState, run_id: int, scenarios: list[Scenario],
                   progress: Progressor) -> None:
        """One VM boot for all the scenarios that need it; its store is merged into ours, also
        when the guest dies half-way (what it measured by then is kept)."""
        work = self.out_dir / "vm"
        guest_store = work / vm.RESULTS / DB_NAME
        progress.describe(f"VM: {len(scenarios)} scenarios")
        started = time.monotonic()
        if guest_store.is_file():  # a guest's, from a run killed before it could merge it
            store.merge(guest_store, run_id, "measured in a VM (by a run that was killed: accelerator not recorded)")
            guest_store.unlink()
        self._hand_to_guest(store, work)
        console = self.out_dir / "logs" / f"vm-run{run_id}-console.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        timeout = VM_GUEST_SETUP_S + sum(s.estimate_s(in_vm=True, most=True) * VM_TIME_LIMIT_FACTOR
                                         + VM_SCENARIO_MARGIN_S for s in scenarios)
        error = None
        watch = HostWatch(state.run_id)
        drivers = tuple(sorted({layer.driver for s in scenarios for layer in s.vpn.layers}))
        guest = vm.Guest(state, work, console, drivers)
        try:
            with watch:
                # the guest runs this very vpnlab, wherever it was imported from (a checkout on PYTHONPATH too)
                guest.run([sys.executable, "-m", "vpnlab.run.guest", work], timeout,
                          {"VPNLAB_STORE_JOURNAL": "DELETE", "PYTHONPATH": str(vm.PACKAGE.parent)})
        except vm.VmError as exc:
            error = str(exc)
        finally:  # (also when interrupted: what the guest measured is kept, with how it was measured)
            accel = guest.accel
            how = TCG_NOTE if accel == "tcg" else accel
            note = (f"measured in a VM ({how}, kernel {vm.find_kernel(download=False).version}, "
                    f"{guest.vcpus} vCPU{'s' if guest.vcpus > 1 else ''})") if accel else ""
            if guest_store.is_file():
                store.merge(guest_store, run_id, note)
                guest_store.unlink()  # all in ours now: one left here was never merged (a killed run)
                watch.flag(store, run_id, [s.id for s in scenarios])
        guest_log = work / "guest.log"
        for scenario in scenarios:
            if self._needs_more(store, scenario):  # its valid samples stay; --resume measures the rest
                reason = error or f"the guest stopped before this scenario finished:\n{tail(guest_log, 12)}"
                self.unfinished.append((scenario, reason))
                progress.log(f"[yellow]scenario {scenario.index} ({safe(scenario.label)}) is short of its repetitions "
                             f"(`vpnlab run --resume` measures them):[/] {safe(reason, lines=True)}")
            elif store.status(scenario.id) == "failed":
                self.failures.append((scenario, store.failure(scenario.id)))
                progress.log(f"[red]scenario {scenario.index} ({safe(scenario.label)}) failed in the VM:[/] "
                             f"{safe(store.failure(scenario.id), lines=True)}")
        progress.advance(time.monotonic() - started)

    def _hand_to_guest(self, store: Store, work: Path) -> None:
        """The job and the store a guest starts from: every scenario measured in the VM, with all it
        has, so that it goes on from there and Stein's rule weighs the finished configurations compared
        with one as the host does (the guest runs only those still short)."""
        in_vm = [s.id for s in self.plan.scenarios if s.id in self.in_vm]
        store.hand_over(work / vm.RESULTS / DB_NAME, in_vm)
        vm.write_job(work, self.plan.study, in_vm)

    def _todo(self, store: Store) -> tuple[list[Scenario], float]:
        """The scenarios short of their rule, and how long their missing repetitions take by the
        estimate; said when the run resumes one that measured some already."""
        todo, total, said = self.what_is_left(store)
        if said and not IN_GUEST:
            self.console.print(f"resumed: {safe(said, lines=True)}", highlight=False)
        return todo, total

    def what_is_left(self, store: Store) -> tuple[list[Scenario], float, str | None]:
        """The scenarios short of their rule, the estimated time of their missing repetitions and,
        if some were measured already, a sentence saying what is left (`--resume`, `--dry-run` too)."""
        left = {s.id: self._left(store, s) for s in self.plan.scenarios}
        todo = [s for s in self.plan.scenarios if left[s.id]]
        total = sum(s.estimate_s(s.id in self.in_vm, repetitions=left[s.id]) for s in todo)
        stored = sum(len(store.done_repetitions(s.id)) for s in self.plan.scenarios)
        if not stored:
            return todo, total, None
        more = " (more if the interval target asks for them)" if self.plan.study.repetitions.adaptive else ""
        pace = measured_pace(store.completion_times(), self.plan.scenarios, self.in_vm)
        paced = (f"; at the pace measured so far ({pace[1]:.2f}x the estimate over {pace[0]} repetitions) "
                 f"about {duration(total * pace[1])}") if pace else ""
        return todo, total, (f"{stored} repetitions were measured before; {sum(left.values())} more for "
                             f"{len(todo)} scenarios, about {duration(total)}{more}{paced}")

    def _needs_more(self, store: Store, scenario: Scenario) -> bool:
        return self._left(store, scenario) > 0

    def _left(self, store: Store, scenario: Scenario) -> int:
        """How many more repetitions the scenario needs now: none if it failed, else up to its rule
        (stopping.py), its rounds balanced with the scenarios measured in the same place (here or the VM)."""
        if store.status(scenario.id) == "failed":
            return 0
        done = len(store.done_repetitions(scenario.id))
        peers = [s for s in self.plan.scenarios if (s.id in self.in_vm) == (scenario.id in self.in_vm)
                 and s.hosts == scenario.hosts]  # on real hosts: the same pair
        return max(0, rounds_wanted(store, scenario, peers) - done)

    def _pairs_in_parallel(self, main_store: Store, state: RunState, run_id: int, scenarios: list[Scenario],
                           progress: Progressor) -> None:
        """Each pair of hosts in a thread of its own, with its own connection to the store; a pair
        waits for the hosts it shares with another (their locks taken in name order: no deadlock).
        Interrupted, the connections are closed so that every pair stops at once; `run` then tears
        the hosts down over fresh ones."""
        locks = {name: threading.Lock() for name in self.hosts.ssh}
        errors: list[BaseException] = []

        def work(pair, members):
            names = sorted(set(pair.roles.values()))
            for name in names:
                locks[name].acquire()
            try:
                store = main_store.another()
                try:
                    self._rounds(store, state, run_id, members, progress)
                finally:
                    store.close()
            except BaseException as exc:  # raised again by the main thread
                errors.append(exc)
            finally:
                for name in names:
                    locks[name].release()

        threads = [threading.Thread(target=work, args=(pair, [s for s in scenarios if s.hosts == pair.roles]),
                                    name=f"vpnlab-pair-{n}", daemon=True) for n, pair in enumerate(self.hosts.pairs)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:
            self._stopping.set()
            for ssh in self.hosts.ssh.values():
                ssh.disconnect()
            for thread in threads:
                thread.join(30)
            raise
        if errors:
            raise errors[0]

    def _rounds(self, store: Store, state: RunState, run_id: int, scenarios: list[Scenario],
                progress: Progressor) -> None:
        # A new round even after an interrupted one: a round is a block in time, and one completed by a
        # later sitting would pair values measured hours apart.
        round_no = store.last_round()
        while pending := [s for s in scenarios if self._needs_more(store, s)]:
            round_no += 1
            for position, scenario in enumerate(round_order(self.plan.study, pending, round_no)):
                if self._stopping.is_set():
                    return
                if store.status(scenario.id) == "failed":
                    continue  # its host was lost during this round
                self._repetition(store, state, run_id, scenario, round_no, position, progress)
            self._round_ended(store, progress)
            for scenario in pending:  # after the whole round: Stein's totals weigh every compared pilot
                self._settle(store, scenario)

    def _round_ended(self, store: Store, progress: Progressor) -> None:
        """After each round, before its scenarios settle: nothing in a study (a race drops candidates here)."""

    def _repetition(self, store: Store, state: RunState, run_id: int, scenario: Scenario, round_no: int,
                    position: int, progress: Progressor) -> None:
        """One repetition, stored the moment it is measured (as failed, with the reason, if it is
        not a valid sample); _settle then fails the scenario after FAILURES_IN_A_ROW failed ones."""
        rep = len(store.attempts(scenario.id)) + 1
        progress.describe(f"round {round_no}: {scenario.label}")
        log_dir = self.out_dir / "logs" / scenario.id / f"rep{rep}"  # fresh per attempt: readiness checks read these
        log_dir.mkdir(parents=True, exist_ok=True)
        store.set_status(scenario.id, "running")
        started = time.monotonic()
        pair = self.hosts.pair_of(scenario) if self.hosts else None
        repetition = run_mesh_repetition if scenario.topology == "mesh" else run_repetition
        attempt = repetition(scenario, state, log_dir, arrivals_seed(self.plan.study.seed, round_no, scenario), pair)
        if self._stopping.is_set():
            return  # interrupted: not a sample, nor a failure (`--resume` measures it)
        if attempt.failure and pair and not pair.lost and (taken := self.hosts.ports_taken(scenario)):
            attempt.failure += "\n  since the run began, " + "\n  ".join(taken)
        for note in attempt.notes:
            store.add_note(scenario.id, note)
        values = attempt.sample.values
        store.record_repetition(run_id, scenario.id, rep, values, attempt.sample.raw, attempt.sample.flags, round_no,
                                position, attempt.failure, units={m: unit(m) for m in values})
        progress.advance(min(time.monotonic() - started, scenario.estimate_s() / scenario.repetitions.min))
        if attempt.failure:
            progress.log(f"[yellow]repetition {rep} of scenario {scenario.index} ({safe(scenario.label)}) is not a "
                         f"valid sample:[/] {safe(attempt.failure, lines=True)}")
        if pair and pair.lost:
            self._host_lost(store, progress)

    def _host_lost(self, store: Store, progress: Progressor) -> None:
        """A host's SSH connection is gone: every scenario still to measure on it fails, with why
        (those of every pair it is in); the other pairs go on."""
        with self._failing:
            for scenario in self.plan.scenarios:
                reason = self.hosts.pair_of(scenario).lost
                if reason and self._needs_more(store, scenario):  # not failed already, nor measured to its rule
                    store.set_status(scenario.id, "failed", reason)
                    self.failures.append((scenario, reason))
                    progress.log(f"[red]scenario {scenario.index} ({safe(scenario.label)}) failed:[/] {safe(reason, lines=True)}")

    def _settle(self, store: Store, scenario: Scenario) -> None:
        """Mark a scenario failed, done or still running after a repetition."""
        if store.status(scenario.id) == "failed":
            return  # its host was lost (_host_lost)
        attempts = store.attempts(scenario.id)
        if len(attempts) >= FAILURES_IN_A_ROW and all(attempts[-FAILURES_IN_A_ROW:]):
            reason = f"{FAILURES_IN_A_ROW} repetitions in a row failed; the last: {attempts[-1]}"
            store.set_status(scenario.id, "failed", reason)
            self.failures.append((scenario, reason))
            return
        if self._needs_more(store, scenario):
            return
        store.set_status(scenario.id, "done")
        if scenario.repetitions.adaptive:
            met, note = stein_note(store, scenario)
            store.set_ci_target_met(scenario.id, met)
            store.add_note(scenario.id, note)


def default_out_dir() -> Path:
    return Path("vpnlab-results") / time.strftime("%Y%m%d-%H%M%S")

