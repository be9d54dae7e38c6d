"""The race's statistics: which candidates to drop after a round, and when the race is over. No I/O.

Each candidate's optimised metric is compared on the log scale, oriented so that higher is better
(z = log value, or -log value for a metric where lower is better). A round is a block: every
survivor ran once in it, in a shuffled order, so the comparison of candidate c with the leader L is
the paired t test on d = z_L - z_c over the rounds both have.

Error control under repeated looks (alpha spending, Bonferroni over looks and candidates). From
`min_rounds` on, the look after round k spends alpha(k) - alpha(k - 1) of a Pocock-type Lan-DeMets
spending function alpha(t) = alpha ln(1 + (e - 1) t), t = k / max_rounds (the first look spends all
of alpha(min_rounds / max_rounds)). Within a look that share is split equally (Bonferroni) over the
K - 1 rivals a candidate may be tested against, K the field at the start. So, whatever the data,
the chance that a given candidate is ever wrongly dropped is at most the sum of its tests' levels,
alpha; a union bound needs no assumption about how the looks are correlated.

- Drop: c is dropped when the one-sided test of H0 "c is at most `margin` worse than L"
  (mean d <= log(1 + margin)) rejects at the look's level. A candidate within the margin of the
  true best is within the margin of any leader, so it is dropped with probability at most alpha;
  the true best survives with probability at least 1 - alpha.
- Equivalent: the race stops when every survivor is equivalent to the leader within the margin by
  the TOST at the same level (the (1 - 2 level) interval of mean d inside +-log(1 + margin)).
- Budget: the race stops after `max_rounds` rounds (what the budget allows) with the survivors it has.
- Ceilings (CPU per GB, latency under load): c is dropped when a one-sided t test on its logs shows
  its geometric mean above the ceiling, at the same level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import stdtr

METHOD = ("paired one-sided t tests on the log ratio to the leader by round, against a margin; alpha spent over "
          "the rounds the budget allows by a Pocock-type Lan-DeMets function, alpha ln(1 + (e - 1) k / max), each "
          "look's share split by Bonferroni over the candidates (a union bound, valid under repeated looks); the "
          "race stops when one candidate is left, when the survivors are equivalent to the leader within the "
          "margin (TOST at the same levels), or when the budget is spent")
ONE_LEFT, EQUIVALENT, BUDGET = "one candidate left", "the survivors are equivalent within the margin", "budget spent"
NONE_LEFT = "no candidate left (every one failed, or failed a field check)"


@dataclass(frozen=True)
class RaceRules:
    max_rounds: int
    alpha: float = 0.05
    margin: float = 0.02      # relative: a candidate within 2% of the best is as good as the best
    min_rounds: int = 3
    field_size: int = 2       # K, the candidates at the start

    def spent(self, look: int) -> float:
        """Alpha spent by the end of look `look` (rounds so far): Pocock-type Lan-DeMets."""
        t = min(1.0, look / self.max_rounds)
        return self.alpha * math.log1p((math.e - 1) * t)

    def level(self, look: int) -> float:
        """The one-sided level of each test at this look: its share of alpha, over the K - 1 rivals."""
        if look < self.min_rounds:
            return 0.0
        before = self.spent(look - 1) if look > self.min_rounds else 0.0
        return (self.spent(look) - before) / max(1, self.field_size - 1)


@dataclass(frozen=True)
class Drop:
    look: int             # the round after which it was dropped (1 = the first; 0: before it, by a field check)
    reason: str

    @property
    def when(self) -> str:
        return f"after round {self.look}" if self.look else "before the first round"


@dataclass
class Standing:
    """Where the race is after the rounds it was given."""

    names: list[str]
    survivors: list[str]
    dropped: dict[str, Drop] = field(default_factory=dict)
    leader: str | None = None
    stop: str | None = None   # ONE_LEFT, EQUIVALENT, BUDGET; None: the race goes on
    looks: int = 0
    # per round: candidate -> its geometric-mean ratio to that round's leader (1 = the leader, below 1 worse)
    history: list[dict[str, float]] = field(default_factory=list)


def race(z: np.ndarray, rules: RaceRules, names: list[str] | None = None,
         ceilings: list[tuple[np.ndarray, float, str]] = ()) -> Standing:
    """Replay the race over the rounds in the columns of z (candidates x rounds, NaN where a candidate
    has no valid value that round; oriented so higher is better). `ceilings`: (log values in the same
    shape, log of the ceiling, what it is) for each upper limit a candidate must keep."""
    names = names or [str(i) for i in range(len(z))]
    standing = Standing(names, list(names))
    alive = np.ones(len(z), dtype=bool)
    if not len(z):
        standing.stop = NONE_LEFT
        return standing
    with np.errstate(invalid="ignore", divide="ignore"):
        for look in range(1, z.shape[1] + 1):
            _look(z[:, :look], look, rules, names, alive, ceilings, standing)
            if standing.stop:
                break
    standing.survivors = [names[i] for i in np.flatnonzero(alive)]
    return standing


def _look(seen: np.ndarray, look: int, rules: RaceRules, names: list[str], alive: np.ndarray, ceilings,
          standing: Standing) -> None:
    """After round `look`: the leader, the drops and whether the race is over."""
    standing.looks = look
    means = _row_means(seen)
    leader = int(np.argmax(np.where(alive & ~np.isnan(means), means, -np.inf)))
    standing.leader = names[leader]
    standing.history.append({names[i]: math.exp(means[i] - means[leader]) for i in np.flatnonzero(alive)
                             if not math.isnan(means[i])})
    level = rules.level(look)
    if level > 0:
        paired = _paired(seen, leader)
        _drop_the_worse(paired, leader, alive, rules, level, names, look, standing)
        _drop_over_ceilings(ceilings, look, alive, level, names, standing)
        if alive.sum() == 1:
            standing.stop = ONE_LEFT
        elif _all_equivalent(paired, leader, alive, rules, level):
            standing.stop = EQUIVALENT
    if standing.stop is None and look >= rules.max_rounds:
        standing.stop = BUDGET


def _row_means(data: np.ndarray) -> np.ndarray:
    valid = ~np.isnan(data)
    counts = valid.sum(axis=1)
    sums = np.where(valid, data, 0.0).sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _paired(seen: np.ndarray, leader: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate: mean and standard error of d = z_leader - z_c over the rounds both have, and n."""
    d = seen[leader] - seen
    valid = ~np.isnan(d)
    n = valid.sum(axis=1)
    mean = np.where(valid, d, 0.0).sum(axis=1) / np.maximum(n, 1)
    var = (np.where(valid, d - mean[:, None], 0.0) ** 2).sum(axis=1) / np.maximum(n - 1, 1)
    return mean, np.sqrt(var / np.maximum(n, 1)), n


def _upper_p(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """P(T > t) for Student's t; 1 where there is no test (fewer than two pairs, no spread)."""
    p = stdtr(np.maximum(df, 1), -t)
    return np.where((df >= 1) & np.isfinite(t), p, 1.0)


def _drop_the_worse(paired, leader, alive, rules, level, names, look, standing) -> None:
    mean, se, n = paired
    p = _upper_p((mean - math.log1p(rules.margin)) / se, n - 1)
    for i in np.flatnonzero(alive & (p < level)):
        if i != leader:
            alive[i] = False
            worse = 100 * (1 - math.exp(-mean[i]))
            standing.dropped[names[i]] = Drop(look, f"{worse:.1f}% worse than {names[leader]}, beyond the "
                                                    f"{100 * rules.margin:g}% margin (p = {p[i]:.2g} < {level:.2g})")


def _drop_over_ceilings(ceilings, look, alive, level, names, standing) -> None:
    for logs, log_limit, what in ceilings:
        seen = logs[:, :look]
        valid = ~np.isnan(seen)
        n = valid.sum(axis=1)
        mean = _row_means(seen)
        sd = np.sqrt((np.where(valid, seen - mean[:, None], 0.0) ** 2).sum(axis=1) / np.maximum(n - 1, 1))
        p = _upper_p((mean - log_limit) / (sd / np.sqrt(np.maximum(n, 1))), n - 1)
        for i in np.flatnonzero(alive & (p < level)):
            alive[i] = False
            standing.dropped[names[i]] = Drop(look, f"above the {what} ceiling: {math.exp(mean[i]):.3g} "
                                                    f"(p = {p[i]:.2g} < {level:.2g})")


def _all_equivalent(paired, leader, alive, rules, level) -> bool:
    """TOST of every survivor against the leader at the look's level."""
    mean, se, n = paired
    others = alive.copy()
    others[leader] = False
    bound = math.log1p(rules.margin)
    p = np.maximum(_upper_p((mean + bound) / se, n - 1), _upper_p((bound - mean) / se, n - 1))
    return bool((p[others] < level).all())
