"""A race as a study: the candidates and the no-VPN baseline (in every round, for each candidate's
ratio to no VPN) over the spec's link and workload, as many rounds as the budget allows. The study's
text is a normal study file, stored with the results, so `show`, `report`, `export` and `stats` read a
race's store as any other; the race's own rules are kept beside it (race.json), with its field checks:
each a study of the candidates over the check's link and workload, run before the race's first round."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from ..core.errors import StudyError
from ..core.files import write_own
from ..plan.scenarios import Plan, duration, make_plan
from ..plan.study import VpnConfig, parse_study
from .field import CheckDesign, FieldCheck
from .race import RaceRules
from .spec import TuneSpec

RULES_FILE = "race.json"
MAX_ROUNDS = 1000  # a study's repetitions at most


@dataclass(frozen=True)
class RaceDesign:
    """What a race is fixed to before it starts, and what a resumed one reads back."""

    metric: str
    higher_is_better: bool
    alpha: float
    margin: float
    min_rounds: int
    max_rounds: int
    budget_s: float
    ceilings: dict[str, float]
    candidates: list[str]   # scenario ids, in the spec's order
    baseline: str
    checks: list[CheckDesign] = field(default_factory=list)  # the field checks, run before the first round

    @property
    def checks_s(self) -> float:
        """The field checks' time by the plan's estimate."""
        return sum(check.estimate_s for check in self.checks)

    def rules(self) -> RaceRules:
        return RaceRules(self.max_rounds, self.alpha, self.margin, self.min_rounds, len(self.candidates))

    def save(self, directory: Path) -> None:
        write_own(directory / RULES_FILE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, directory: Path) -> "RaceDesign":
        try:
            data = json.loads((directory / RULES_FILE).read_text())
            return cls(**data | {"checks": [CheckDesign(**check) for check in data.get("checks", [])]})
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise StudyError(f"{directory}: no readable {RULES_FILE}: not a race's results ({exc})") from exc


def race_study_yaml(spec: TuneSpec, candidates: list[VpnConfig], rounds: int) -> str:
    """The race as a study file."""
    return _study_yaml(spec, f"vpnlab tune race of {len(candidates)} candidates ({spec.source})",
                       [{"driver": "none"}] + [_entry(c) for c in candidates], spec.link, spec.workload, rounds)


def check_study_yaml(spec: TuneSpec, check: FieldCheck, candidates: list[VpnConfig]) -> str:
    """A field check as a study file: the candidates alone (its requirements are absolute, not ratios to no VPN)."""
    return _study_yaml(spec, f"vpnlab tune field check {check.where} ({spec.source})",
                       [_entry(c) for c in candidates], check.link, check.workload, check.repetitions)


def _study_yaml(spec: TuneSpec, description: str, vpns: list[dict], link, workload, repetitions: int) -> str:
    study = {
        "name": spec.name,
        "description": description,
        "topology": spec.topology,
        "repetitions": repetitions,
        "order": "shuffled",
        "seed": spec.race.seed,
        "vpns": vpns,
        "links": [link.model_dump(mode="json", exclude_defaults=True)],
        "workloads": [workload.model_dump(mode="json", exclude_defaults=True) | {"kind": workload.kind}],
    }
    if spec.hosts:
        study["hosts"] = spec.hosts
    return yaml.safe_dump(study, sort_keys=False)


def _entry(config: VpnConfig) -> dict:
    entry = {"driver": config.driver, "options": config.options.model_dump(mode="json", exclude_defaults=True)}
    return entry | ({"profile": config.profile} if config.profile != "default" else {})


def round_s(plan: Plan) -> float:
    """One round of every scenario of the plan, by its estimate of a repetition."""
    return sum(s.estimate_s(repetitions=1) for s in plan.scenarios)


def design(spec: TuneSpec, candidates: list[VpnConfig]) -> tuple[Plan, RaceDesign]:
    """The race's plan and rules: as many rounds as the budget allows for the whole field (every
    candidate and the baseline) after the field checks, at least the minimum rounds, or a StudyError
    naming the budget."""
    checks = [_check_design(spec, check, candidates) for check in spec.checks]
    checks_s = sum(check.estimate_s for check in checks)
    probe = make_plan(parse_study(race_study_yaml(spec, candidates, 1), spec.source, here=True))
    full = round_s(probe)
    rounds = min(MAX_ROUNDS, math.floor((spec.budget_s - checks_s) / full))
    if rounds < spec.race.min_rounds:
        raise _too_small(spec, len(candidates), max(0, rounds), full, checks_s)
    plan = make_plan(parse_study(race_study_yaml(spec, candidates, rounds), spec.source, here=True))
    baseline = next(s.id for s in plan.scenarios if s.vpn.is_baseline)
    race = RaceDesign(spec.metric, spec.higher_is_better, spec.race.alpha, spec.race.margin_pct / 100,
                      spec.race.min_rounds, rounds, spec.budget_s, spec.ceilings,
                      [s.id for s in plan.scenarios if not s.vpn.is_baseline], baseline, checks)
    return plan, race


def _too_small(spec: TuneSpec, candidates: int, rounds: int, per_round_s: float, checks_s: float) -> StudyError:
    after = f" after the field checks (about {duration(checks_s)})" if checks_s else ""
    least = duration(checks_s + per_round_s * spec.race.min_rounds)
    return StudyError(f"{spec.source}: budget: {duration(spec.budget_s)} allows {rounds} round(s) of the {candidates} "
                      f"candidates and no VPN (about {duration(per_round_s)} a round){after}, fewer than "
                      f"race.min_rounds ({spec.race.min_rounds}); give at least {least} or narrow the space")


def _check_design(spec: TuneSpec, check: FieldCheck, candidates: list[VpnConfig]) -> CheckDesign:
    """A field check as a study of the candidates, checked against this machine as a study is."""
    plan = make_plan(parse_study(check_study_yaml(spec, check, candidates), f"{spec.source}: {check.where}",
                                 here=True))
    return CheckDesign(check.where, check.label, [r.as_written for r in check.requirements], plan.study.source_text,
                       [s.id for s in plan.scenarios], plan.estimate_s())


def expected_s(plan: Plan, race: RaceDesign) -> tuple[float, float]:
    """(worst case, expected case) in seconds, each after the field checks. Worst: nobody dropped, every
    round the budget allows. Expected: the field thins at the first look to the leader and one rival,
    which run with the baseline to the end (a clear winner, as in the simulations; a close field costs
    more)."""
    full = round_s(plan)
    per_scenario = full / len(plan.scenarios)
    rest = race.max_rounds - race.min_rounds
    expected = full * race.min_rounds + rest * per_scenario * min(3, len(plan.scenarios))
    return race.checks_s + full * race.max_rounds, race.checks_s + expected
