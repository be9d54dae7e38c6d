"""A race as a study: the candidates and the no-VPN baseline (in every round, for each candidate's
ratio to no VPN) over the spec's link and workload, as many rounds as the budget allows. The study's
text is a normal study file, stored with the results, so `show`, `report`, `export` and `stats` read a
race's store as any other; the race's own rules are kept beside it (race.json)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ..core.errors import StudyError
from ..core.files import write_own
from ..plan.scenarios import Plan, duration, make_plan
from ..plan.study import VpnConfig, parse_study
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

    def rules(self) -> RaceRules:
        return RaceRules(self.max_rounds, self.alpha, self.margin, self.min_rounds, len(self.candidates))

    def save(self, directory: Path) -> None:
        write_own(directory / RULES_FILE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, directory: Path) -> "RaceDesign":
        try:
            return cls(**json.loads((directory / RULES_FILE).read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise StudyError(f"{directory}: no readable {RULES_FILE}: not a race's results ({exc})") from exc


def race_study_yaml(spec: TuneSpec, candidates: list[VpnConfig], rounds: int) -> str:
    """The race as a study file."""
    study = {
        "name": spec.name,
        "description": f"vpnlab tune race of {len(candidates)} candidates ({spec.source})",
        "topology": spec.topology,
        "repetitions": rounds,
        "order": "shuffled",
        "seed": spec.race.seed,
        "vpns": [{"driver": "none"}] + [_entry(c) for c in candidates],
        "links": [spec.link.model_dump(mode="json", exclude_defaults=True)],
        "workloads": [spec.workload.model_dump(mode="json", exclude_defaults=True) | {"kind": spec.workload.kind}],
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
    candidate and the baseline), at least the minimum rounds, or a StudyError naming the budget."""
    probe = make_plan(parse_study(race_study_yaml(spec, candidates, 1), spec.source, here=True))
    full = round_s(probe)
    rounds = min(MAX_ROUNDS, math.floor(spec.budget_s / full))
    if rounds < spec.race.min_rounds:
        raise StudyError(f"{spec.source}: budget: {duration(spec.budget_s)} allows {rounds} round(s) of the "
                         f"{len(candidates)} candidates and no VPN (about {duration(full)} a round), fewer than "
                         f"race.min_rounds ({spec.race.min_rounds}); give at least "
                         f"{duration(full * spec.race.min_rounds)} or narrow the space")
    plan = make_plan(parse_study(race_study_yaml(spec, candidates, rounds), spec.source, here=True))
    baseline = next(s.id for s in plan.scenarios if s.vpn.is_baseline)
    race = RaceDesign(spec.metric, spec.higher_is_better, spec.race.alpha, spec.race.margin_pct / 100,
                      spec.race.min_rounds, rounds, spec.budget_s, spec.ceilings,
                      [s.id for s in plan.scenarios if not s.vpn.is_baseline], baseline)
    return plan, race


def expected_s(plan: Plan, race: RaceDesign) -> tuple[float, float]:
    """(worst case, expected case) in seconds. Worst: nobody dropped, every round the budget allows.
    Expected: the field thins at the first look to the leader and one rival, which run with the
    baseline to the end (a clear winner, as in the simulations; a close field costs more)."""
    full = round_s(plan)
    per_scenario = full / len(plan.scenarios)
    rest = race.max_rounds - race.min_rounds
    return full * race.max_rounds, full * race.min_rounds + rest * per_scenario * min(3, len(plan.scenarios))
