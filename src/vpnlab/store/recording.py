"""Recording during a run: a run's start and end, its scenarios, each repetition's samples, raw
output and completion mark in one transaction, notes and flags.

A full disk stops the run without harm: SQLite rolls the transaction in flight back, the store
raises DiskFull (an OSError, ENOSPC, naming the file), and the run is marked interrupted with
the room a reserve file kept for that; what was committed stays intact for `--resume`. A value
that is not a finite number (a tool printing garbage) is stored as missing, with a flag on its
repetition, never as NaN.
"""

from __future__ import annotations

import errno
import json
import math
import sys
from pathlib import Path

from ..core.files import write_own
from ..core.flags import SEPARATOR, Flag, declare, stored
from .database import (BASELINE_VPN, LOW_SPACE_BYTES, RESERVE_BYTES, RESERVE_NAME, SETUP_REPETITION, DiskFull,
                       free_bytes, now)

NOT_FINITE = declare("not-finite", "a value was not a finite number and is stored as missing")


class Recording:
    """What a run writes into its store (`self.db`, `self.path`: the Store's connection and file)."""

    @property
    def _reserve(self) -> Path:
        return Path(self.path).with_name(RESERVE_NAME)

    def mark_killed_runs(self) -> None:
        """Runs still marked running were killed (SIGKILL, a power cut): the directory's lock says
        no other process writes here now."""
        with self.db:
            self.db.execute("UPDATE runs SET status='killed' WHERE status='running'")

    def start_run(self, *, version: str, kernel: str, hostname: str, capabilities: dict,
                  tool_versions: dict, study_name: str, study_text: str, hosts: dict | None = None) -> int:
        try:  # real blocks (zeros, not a hole): freed to mark the run interrupted if the disk fills
            write_own(self._reserve, bytes(RESERVE_BYTES))
        except OSError as exc:
            self._reserve.unlink(missing_ok=True)
            if exc.errno == errno.ENOSPC:
                raise DiskFull(self.path, stopped=False) from exc
            raise
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (started_at, status, vpnlab_version, kernel, hostname, capabilities,"
                " tool_versions, study_name, study_text, hosts) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
                (now(), version, kernel, hostname, json.dumps(capabilities), json.dumps(tool_versions),
                 study_name, study_text, json.dumps(hosts or {})),
            )
        return cur.lastrowid

    def finish_run(self, run_id: int, status: str) -> None:
        """Record how the run ended. A run that ends because the disk filled ("failed" to the
        runner) is interrupted: nothing is wrong with what it stored and `--resume` finishes it."""
        ending = sys.exc_info()[1]
        if status == "failed" and (self.db.full or (isinstance(ending, OSError) and ending.errno == errno.ENOSPC)):
            status = "interrupted"
        try:
            try:
                with self.db:
                    self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (now(), status, run_id))
            except DiskFull:
                self._reserve.unlink(missing_ok=True)  # the room kept for this
                with self.db:
                    self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE id=?", (now(), status, run_id))
        finally:
            self._reserve.unlink(missing_ok=True)

    def add_scenario(self, scenario, measured_in: str = "host", hosts: dict | None = None) -> None:
        """Record a planned scenario and where it is measured ("host" or "vm"; on real hosts, `hosts`
        maps its roles to them); a resumed run keeps the row and its status."""
        link, workload = scenario.link, scenario.workload
        with self.db:
            self.db.execute(
                "INSERT INTO scenarios (id, idx, label, topology, vpn, vpn_label, vpn_options, implementation,"
                " link_label, link_rate_mbit, link_delay_ms, link_jitter_ms, link_loss_pct, workload,"
                " workload_label, workload_params, repetitions, repetition_rule, measured_in, hosts, baseline)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET idx=excluded.idx, implementation=excluded.implementation,"
                " measured_in=excluded.measured_in, hosts=excluded.hosts",
                (scenario.id, scenario.index, scenario.label, scenario.topology, _vpn_name(scenario.vpn),
                 scenario.vpn_label, json.dumps(scenario.vpn.as_dict(), sort_keys=True),
                 "+".join(scenario.implementations) or "none", link.label, link.rate_mbit, link.delay_ms,
                 link.jitter_ms, link.loss_pct, workload.kind, workload.full_label,
                 json.dumps(workload.model_dump(mode="json"), sort_keys=True), scenario.repetitions.max,
                 scenario.repetitions.describe(), measured_in, json.dumps(hosts) if hosts else "",
                 int(scenario.vpn.is_baseline)),
            )

    def record_as_run(self, scenario) -> None:
        """The link and workload a scenario runs with here (emulation scales them). A sitting that runs
        them otherwise than an earlier one did is noted: its samples are pooled with the earlier ones."""
        link = scenario.link_as_run
        path = {"mtu": link.mtu, "icmp": link.icmp} if link.needs_router else {}  # (as before without a router)
        as_run = json.dumps({"link": {"rate_mbit": link.rate_mbit, "delay_ms": link.delay_ms,
                                      "jitter_ms": link.jitter_ms, "loss_pct": link.loss_pct, **path},
                             "workload": scenario.workload_as_run.model_dump(mode="json")}, sort_keys=True)
        with self.db:
            before = self.db.execute("SELECT as_run FROM scenarios WHERE id=?", (scenario.id,)).fetchone()[0]
            if before and before != as_run:
                self._note(scenario.id, f"run otherwise than by an earlier sitting (now {as_run}, then {before}): "
                                        "their samples are pooled")
            self.db.execute("UPDATE scenarios SET as_run=? WHERE id=?", (as_run, scenario.id))

    def add_note(self, scenario_id: str, note: str) -> None:
        """Something a reader of the results must know (a model mismatch, a suspect figure)."""
        with self.db:
            self._note(scenario_id, note)

    def _note(self, scenario_id: str, note: str) -> None:
        self.db.execute("UPDATE scenarios SET notes = CASE WHEN notes = '' THEN ? ELSE notes || '; ' || ? END"
                        " WHERE id=? AND instr(notes, ?) = 0", (note, note, scenario_id, note))

    def set_ci_target_met(self, scenario_id: str, met: bool) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET ci_target_met=? WHERE id=?", (int(met), scenario_id))

    def set_status(self, scenario_id: str, status: str, failure: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET status=?, failure=? WHERE id=?", (status, failure, scenario_id))

    def record_repetition(self, run_id: int, scenario_id: str, repetition: int, values: dict[str, float],
                          raw: dict[str, str], flags: list[Flag], round_: int | None = None,
                          position: int | None = None, failure: str | None = None,
                          units: dict[str, str] | None = None) -> None:
        """Samples (with their `units`, as the catalog gives them to the runner; '' without one), raw
        output and the completion mark of one repetition, atomically. A value that is not a finite number is stored as missing,
        with a flag. A failed repetition on a (nearly) full disk is not stored: the full disk may
        be why it failed, so the run stops (DiskFull) and `--resume` measures it again."""
        values, flags = _finite(values, flags)
        if failure and free_bytes(self.path) < LOW_SPACE_BYTES:
            self.db.full = True
            raise DiskFull(self.path, f"less than {LOW_SPACE_BYTES >> 20} MiB left on its disk, and a repetition "
                                      "failed (not stored: the full disk may be why)")
        stamp = now()
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                [(scenario_id, repetition, m, float(v), (units or {}).get(m, ""), stamp) for m, v in values.items()],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO raw_outputs VALUES (?, ?, ?, ?)",
                [(scenario_id, repetition, tool, text) for tool, text in raw.items()],
            )
            if repetition != SETUP_REPETITION:
                self.db.execute(
                    "INSERT OR REPLACE INTO repetitions (scenario_id, repetition, run_id, completed_at, flags, round,"
                    " position, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (scenario_id, repetition, run_id, stamp, stored(flags), round_, position, failure),
                )

    def add_flag(self, scenario_id: str, repetition: int, flag: Flag) -> None:
        with self.db:
            self.db.execute(f"UPDATE repetitions SET flags = CASE WHEN flags = '' THEN ? ELSE flags || '{SEPARATOR}' || ? END"
                            " WHERE scenario_id=? AND repetition=?", (str(flag), str(flag), scenario_id, repetition))


def _finite(values: dict, flags: list[Flag]) -> tuple[dict[str, float], list[Flag]]:
    """The values that are finite numbers; each other one is left out (missing) and flagged."""
    kept, flags = {}, list(flags)
    for metric, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if math.isfinite(number):
            kept[metric] = number
        else:
            flags.append(NOT_FINITE(f"{metric} was {str(value)[:40]!r}, not a finite number: stored as missing"))
    return kept, flags



def _vpn_name(vpn) -> str:
    """'wireguard', or 'openvpn-in-strongswan' for nested tunnels (inner first, as people say it)."""
    layers = vpn.layers
    return "-in-".join(layer.driver for layer in reversed(layers)) if layers else BASELINE_VPN
