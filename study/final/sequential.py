"""Replicates where the verdict is open: a sequential rule over rounds of whole-search replicates.

A table of comparisons (an arm's cell against the reference's cell, on the same final seeds) first runs ``min`` = m
replicates per cell, then one more per cell in each round while a comparison of the cell is open, up to ``max`` = M.
After each round ("look") every open comparison is judged on its replicates so far: ``better`` or ``worse`` when its
interval excludes 0, ``equivalent`` when it lies inside ±δ (with a margin), else it stays open. A decided comparison
is frozen with the round it was decided in (the replicates per cell it was judged on) and never judged again, even
when the reference's cell goes on for another comparison. At M an open comparison is ``not detectable``, with its
minimum detectable effect.

What it estimates: the Δ of :func:`study.final.intervals.crossed_delta` (the arm's mean over its replicates × the
seeds, less the reference's: each side's searches add their own variance over their own R, the seeds pair the
sides), judged at each look by the same variance parts at a spent level instead of 95 %.

The error it controls, and how the two corrections combine:

- **Over the looks, Bonferroni alpha spending.** There are at most K = M − m + 1 looks; each is judged at
  α / K. Whatever the correlation between looks (they share replicates), a union bound over them keeps the chance
  of any false verdict at or below α.
- **Over the comparisons, Holm at each look**, at that look's α / K, over all the table's comparisons: those frozen
  as better or worse count as already rejected (they come first in the step-down), the others (open, or frozen as
  equivalent) count as not rejected. If no false verdict came before a look, the rejected ones are all real
  effects, so a true null (Δ = 0) is rejected at that look only where its p-value, at the look's fixed R, is below
  (α / K) / n₀ (n₀: the true nulls): at most α / K at that look, α over all of them. The table's family-wise chance
  of calling a Δ = 0 comparison better or worse is thus at most α, given intervals that hold at their level.
- **Equivalence** at a look needs the interval at the look's last Holm level (1 − (α / K) / (comparisons not
  rejected)) inside (−δ, +δ): two one-sided tests each at half that level, so calling a comparison with |Δ| ≥ δ
  equivalent has chance at most α / 2 over the looks.
- The bound is as good as the crossed interval's coverage at each level (its simulated coverage is ≥ 0.938 at 95 %,
  study/final/intervals.py); the simulation below checks the whole rule, looks and all.

Why Bonferroni over the looks and not a Pocock or O'Brien–Fleming boundary: with m = 2 the first look's replicate
parts have 1 degree of freedom, the statistic is far from normal, and the group-sequential boundaries (computed for
normal increments) would need their own simulation per design; Bonferroni's bound needs no model of the looks'
correlation and costs little at K ≤ 4 (t at 1 df is 50.9 at α / 4 against 25.5 at α / 2: the first looks decide
only large effects whatever the boundary).

Checked by simulation (tests/study/final/test_sequential_simulation.py; the model of
tests/study/final/test_intervals_coverage.py: a replicate's effect with each arm's search sd, a seed effect sd 0.01
shared by all, noise sd 0.005, 7 seeds; α 0.05, no margin; 4,000 tables a case; run the file as a script for the
table). MDE: the fixed R = M design's minimum detectable effect at α 0.05 and 80 % power (median over its tables);
power: a planted effect of 2 × MDE decided the right way; replicates: the mean per cell, against M; front: α
shared 0.1, 0.5, 0.25, 0.15 over the looks at R 2–5 (``Rule.spending``):

    ======================  ========================  =================  ========================
    plan (α shares)         identical arms: false     2 × MDE: power     replicates ÷ M (null /
                            verdicts (4 null cases)   (3 cases)          2 × MDE)
    ======================  ========================  =================  ========================
    m 2, M 5 (equal)        0.012–0.032               0.951–0.992        0.99–1.00 / 0.74–0.77
    m 2, M 4 (equal)        0.009–0.030               0.923–0.989        0.99–1.00 / 0.82–0.85
    m 2, M 5 (front)        0.013–0.037               0.906–0.979        0.99–1.00 / 0.68–0.73
    m 3, M 5 (equal)        0.017–0.036               0.971–0.997        1.00 / 0.71–0.75
    ======================  ========================  =================  ========================

The null cases: reference search sd 0.005 vs an arm's 0.02, 0.02 vs 0.02, 0.005 vs two arms (0.02 and 0.005, Holm
over both, the reference shared), 0 vs 0.03 (the highest, 0.032: one arm's 1-df replicate part). The power cases
(reference / arm search sd, the planted effect): 0.005 / 0.02 (0.063 at M 5), 0.02 / 0.02 (0.084), 0.005 / 0.005
(0.024); no comparison was ever decided the wrong way. What it costs: two identical arms run to M (no margin: nothing
ends an open null but the margin); a planted 2 × MDE is decided mostly at R 3 or 4 (at R = m = 2 in 1–3 % of tables:
each arm's replicate part has 1 degree of freedom, t 50.9 at α / 4), so it costs 0.74–0.77 of a fixed R = 5; front-
loading the α on the look at R 3 brings that to 0.68–0.73 for 2–5 points of power. At m = 2 even a large effect
seldom decides at m (4 × MDE: 3–6 % of tables; 16 × MDE: 36–48 %): one replicate's spread has 1 degree of freedom
whatever α it is given. At m = 3 (2 degrees of freedom) 2 × MDE decides at m in 43–51 % of tables and 4 × MDE in
88–98 %, for a cost of 0.71–0.75 and 0.60–0.62 of a fixed R = 5 (R = 3 is the floor: 0.60).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from study.final.intervals import MIN_SEEDS, Part, delta_parts

__all__ = [
    "OPEN",
    "BETTER",
    "WORSE",
    "EQUIVALENT",
    "NOT_DETECTABLE",
    "State",
    "SequentialPlan",
    "Rule",
    "Look",
    "Decision",
    "delta_parts",
    "look_states",
    "decide_round",
    "decide",
    "replay",
    "cells_to_continue",
    "min_detectable_effect",
]

State = Literal["open", "better", "worse", "equivalent", "not detectable"]
OPEN: State = "open"
BETTER: State = "better"
WORSE: State = "worse"
EQUIVALENT: State = "equivalent"
NOT_DETECTABLE: State = "not detectable"

#: The power the minimum detectable effect is stated at.
POWER = 0.8

#: Codes of the states in the vectorised rule (:func:`look_states`).
_CODES: tuple[State, ...] = (OPEN, BETTER, WORSE, EQUIVALENT, NOT_DETECTABLE)
_OPEN, _BETTER, _WORSE, _EQUIVALENT, _NOT_DETECTABLE = range(5)

K = TypeVar("K", bound=Hashable)
C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True)
class SequentialPlan:
    """``search.replicates: {min, max}``: every cell runs ``min`` replicates, then one more per round while open."""

    min: int
    max: int

    def __post_init__(self) -> None:
        if not 2 <= self.min <= self.max:
            raise ValueError(f"a sequential plan needs 2 <= min <= max, but got min={self.min}, max={self.max}")

    @property
    def looks(self) -> int:
        """The planned looks: one after each round, M − m + 1."""
        return self.max - self.min + 1

    def replicates(self, look: int) -> int:
        """The replicates per cell at ``look`` (0-based): m + look."""
        return self.min + look


@dataclass(frozen=True)
class Rule:
    """The sequential rule's settings: the plan, the table's α, the margin δ (``None``: no equivalence) and the
    metric's direction."""

    plan: SequentialPlan
    alpha: float = 0.05
    margin: float | None = None
    higher_is_better: bool = True
    #: Each look's share of α (weights, normalised; ``None``: equal shares, α / K each).
    spending: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.spending is not None and (len(self.spending) != self.plan.looks or min(self.spending) <= 0):
            raise ValueError(
                f"spending needs one positive weight per look ({self.plan.looks}), but got {self.spending=}"
            )

    def level(self, look: int) -> float:
        """The α that ``look`` (0-based) spends: α / K with equal shares, α · wₖ / Σw otherwise (Bonferroni over
        the planned looks: the shares sum to α)."""
        if self.spending is None:
            return self.alpha / self.plan.looks
        return self.alpha * self.spending[look] / sum(self.spending)


@dataclass(frozen=True)
class Look:
    """One comparison's values at one look: the arm's and the reference's (replicates, seeds) layouts on the same
    seeds, the first R replicates of each."""

    arm: np.ndarray
    reference: np.ndarray


@dataclass(frozen=True)
class Decision:
    """One comparison's state after a look.

    ``round`` is the replicates per cell of the look that decided it (``None`` while open); ``delta``, ``low`` and
    ``high`` its Δ and interval at ``confidence`` (the level it was judged at); ``mde`` the |Δ| this look would
    detect with 80 % power at the look's spent α; ``replicates`` the replicates per cell of its last look.
    """

    state: State
    round: int | None
    delta: float
    low: float
    high: float
    confidence: float
    mde: float
    replicates: int

    @property
    def is_open(self) -> bool:
        return self.state == OPEN

    def text(self) -> str:
        """``decided after 2: better`` or ``open after 3 of ≤ 5 replicates`` (the caller adds ≤ M)."""
        if self.is_open:
            return f"open after {self.replicates}"
        return f"decided after {self.replicates}: {self.state}"


def _half(parts: Sequence[Part], alpha: np.ndarray | float) -> np.ndarray:
    """The two-sided 1 − ``alpha`` half-width √(Σ t²₁₋α/₂,dfᵢ · vᵢ), each part at its own t (as the crossed
    interval at 95 %); ``alpha`` may vary over the leading axis."""
    from scipy import stats

    return np.sqrt(sum((stats.t.isf(np.asarray(alpha) / 2, p.df) ** 2 * p.variance for p in parts), np.zeros(())))


def min_detectable_effect(parts: Sequence[Part], alpha: float, power: float = POWER) -> np.ndarray:
    """The |Δ| detected with ``power`` at two-sided level ``alpha``: √(Σ (t₁₋α/₂,dfᵢ + t_power,dfᵢ)² · vᵢ), per part
    at its own degrees of freedom (as :func:`dashboards.stats.min_detectable_effect`, at any α)."""
    from scipy import stats

    return np.sqrt(
        sum(((stats.t.isf(alpha / 2, p.df) + stats.t.ppf(power, p.df)) ** 2 * p.variance for p in parts), np.zeros(()))
    )


def look_states(
    rule: Rule, look: int, states: np.ndarray, evidence: Sequence[tuple[np.ndarray, list[Part]]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One look of the rule, vectorised over tables: ``states`` (tables, comparisons) codes before the look (open,
    better, worse, equivalent, not detectable), ``evidence`` each comparison's (Δ, parts) at this look's R, arrays
    over the tables. Returns the codes after the look and each comparison's half-width and level judged at (the
    decided ones' Holm level, the others' last one). Frozen codes are kept whatever the evidence says."""
    delta = np.stack([np.broadcast_to(d, states.shape[:1]) for d, _ in evidence], axis=1)
    open_ = states == _OPEN
    rejected = (states == _BETTER) | (states == _WORSE)
    count = states.shape[1]
    level = np.full(delta.shape, rule.level(look))
    for _ in range(count):  # Holm's step-down as "reject every p below α / (m − rejected)" until nothing moves
        alpha = rule.level(look) / np.maximum(count - rejected.sum(axis=1), 1)
        halves = np.stack([_half(parts, alpha) for _, parts in evidence], axis=1)
        new = open_ & ~rejected & (np.abs(delta) > halves)
        level = np.where(new, alpha[:, None], level)
        if not new.any():
            break
        rejected = rejected | new
    last = np.broadcast_to((rule.level(look) / np.maximum(count - rejected.sum(axis=1), 1))[:, None], delta.shape)
    level = np.where(open_ & ~rejected, last, level)
    halves = np.stack([_half(parts, level[:, i]) for i, (_, parts) in enumerate(evidence)], axis=1)
    out = states.copy()
    decided = open_ & rejected
    out[decided] = np.where((delta[decided] > 0) == rule.higher_is_better, _BETTER, _WORSE)
    if rule.margin is not None:
        out[open_ & ~rejected & (np.abs(delta) + halves < rule.margin)] = _EQUIVALENT
    if look == rule.plan.looks - 1:
        out[out == _OPEN] = _NOT_DETECTABLE
    return out, halves, level


def decide_round(rule: Rule, decisions: Mapping[K, Decision], looks: Mapping[K, Look]) -> dict[K, Decision]:
    """Every comparison's decision after the next look: ``decisions`` those after the previous look (empty before
    the first), ``looks`` every comparison's values at this look (the frozen ones' are not read and may be left out).
    The look is the round whose replicates per cell the open comparisons' layouts have."""
    keys = list(dict.fromkeys([*decisions, *looks]))
    prior = np.array([[_CODES.index(decisions[k].state) if k in decisions else _OPEN for k in keys]])
    open_keys = [k for k, code in zip(keys, prior[0], strict=True) if code == _OPEN]
    if not open_keys:
        return dict(decisions)
    replicates = {looks[k].arm.shape[0] for k in open_keys} | {looks[k].reference.shape[0] for k in open_keys}
    if len(replicates) != 1:
        raise ValueError(f"an open comparison's cells must have a round's replicates each, but got {replicates}")
    r = replicates.pop()
    look = r - rule.plan.min
    if not 0 <= look < rule.plan.looks:
        raise ValueError(f"a look needs min <= replicates <= max, but got {r} for {rule.plan}")
    evidence = {k: delta_parts(looks[k].arm, looks[k].reference) for k in open_keys}
    null = (np.zeros(()), [Part(np.zeros(()), 1.0)])  # a frozen comparison's place in Holm's count: never read
    codes, halves, level = look_states(rule, look, prior, [evidence.get(k, null) for k in keys])
    out = dict(decisions)
    for i, k in enumerate(keys):
        if k not in evidence:
            continue
        delta, parts = evidence[k]
        d, h, state = float(delta), float(halves[0, i]), _CODES[int(codes[0, i])]
        mde = float(min_detectable_effect(parts, rule.level(look)))
        decided = None if state == OPEN else r
        out[k] = Decision(state, decided, d, d - h, d + h, 1.0 - float(level[0, i]), mde, r)
    return out


def decide(rule: Rule, comparisons: Mapping[K, tuple[C, C]], cells: Mapping[C, np.ndarray]) -> dict[K, Decision]:
    """Every comparison's decision from the replicates run so far, the looks replayed in order: ``comparisons``
    maps each to its (arm cell, reference cell), ``cells`` each cell's (replicates, seeds) values on the table's
    common seeds, in the order its replicates were run. Look k is taken once every comparison open before it has
    m + k replicates on both cells (a round stopped halfway is not judged until it is whole), so replaying after a
    stop gives the same decisions, and a frozen comparison keeps the round it was decided in."""
    decisions: dict[K, Decision] = {}
    for look in range(rule.plan.looks):
        r = rule.plan.replicates(look)
        open_ = [k for k in comparisons if k not in decisions or decisions[k].is_open]
        if not open_ or any(cells[c].shape[0] < r for k in open_ for c in comparisons[k]):
            break
        looks = {k: Look(cells[comparisons[k][0]][:r], cells[comparisons[k][1]][:r]) for k in open_}
        decisions = decide_round(rule, decisions, looks)
    return decisions


def replay(
    rule: Rule, comparisons: Mapping[K, tuple[C, C]], replicates: Mapping[C, Sequence[Mapping[int, float]]]
) -> dict[K, Decision]:
    """Every comparison's decision from the replicates run so far, the looks replayed in order, as a run takes them:
    ``replicates`` holds per cell its complete replicates in the order they ran (replicate r at index r), each its
    final seeds' values by seed. Look k is taken once every comparison open before it has m + k replicates on both
    cells, each comparison on the seeds common to those replicates (so a later replicate that lost a seed never
    changes an earlier look: a resumed run replays the decisions it acted on). A comparison whose replicates share
    fewer than :data:`~study.final.intervals.MIN_SEEDS` seeds cannot be judged at that look: it stays open (``not
    detectable`` at the last look, its interval and minimum detectable effect NaN) and is left out of Holm's count."""
    decisions: dict[K, Decision] = {}
    for look in range(rule.plan.looks):
        r = rule.plan.replicates(look)
        open_ = [k for k in comparisons if k not in decisions or decisions[k].is_open]
        if not open_ or any(len(replicates.get(c, ())) < r for k in open_ for c in comparisons[k]):
            break
        looks: dict[K, Look] = {}
        for k in open_:
            arm, reference = (list(replicates[c])[:r] for c in comparisons[k])
            seeds = sorted(set.intersection(*(set(values) for values in [*arm, *reference])))
            if len(seeds) >= MIN_SEEDS:
                looks[k] = Look(_layout(arm, seeds), _layout(reference, seeds))
        judged = {k: d for k, d in decisions.items() if k in looks or not d.is_open}
        decisions = {**decisions, **(decide_round(rule, judged, looks) if looks else judged)}
        last = look == rule.plan.looks - 1
        for k in (k for k in open_ if k not in looks):
            nan = math.nan
            decisions[k] = (
                Decision(NOT_DETECTABLE, r, nan, nan, nan, nan, nan, r)
                if last
                else Decision(OPEN, None, nan, nan, nan, nan, nan, r)
            )
    return decisions


def _layout(replicates: Sequence[Mapping[int, float]], seeds: Sequence[int]) -> np.ndarray:
    """A (replicates, seeds) layout of ``replicates``' values on ``seeds``."""
    return np.array([[values[s] for s in seeds] for values in replicates], dtype=float)


def cells_to_continue(decisions: Mapping[K, Decision], comparisons: Mapping[K, tuple[C, C]]) -> set[C]:
    """The cells that get another replicate: those of an open comparison (a comparison not judged yet counts as
    open). The reference's cell goes on while any of its comparisons is open; a comparison already frozen is never
    judged again, so the replicates it adds cannot reopen it. At M no comparison is open, so nothing goes on."""
    out: set[C] = set()
    for k, pair in comparisons.items():
        if k not in decisions or decisions[k].is_open:
            out.update(pair)
    return out
