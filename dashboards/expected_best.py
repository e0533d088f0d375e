"""Would more trials change the answer? The expected best validation score of a cell against its number of trials.

From a cell's own n trials (no extra training), ``E[best of k]`` for k = 1 … n: what a search of k trials would
expect to find (Dodge et al., EMNLP 2019, "Show Your Work"; Findings of EMNLP 2021, "Expected Validation Performance
and Estimation of a Random Variable's Maximum", https://aclanthology.org/2021.findings-emnlp.342).

Two estimators over the sorted scores v_(1) ≤ … ≤ v_(n), each a weighted sum of order statistics:

- :data:`WITH_REPLACEMENT` (the default): the best of k draws *with* replacement from the n scores,
  Σ_i v_(i) · [(i/n)^k − ((i−1)/n)^k] (Dodge et al. 2019). Biased low at large k, and of lower variance: it spreads
  the weight of k = n over the top order statistics instead of putting all of it on the sample maximum. Dodge et al.
  2021 measured the unbiased estimator to have the highest variance of the three they studied, and the biased ones to
  give the fewest wrong "which is better" calls; that is the question a table asks, so this is the curve shown.
- :data:`WITHOUT_REPLACEMENT`: the U-statistic, the best of k draws *without* replacement,
  Σ_i v_(i) · C(i−1, k−1) / C(n, k): unbiased for E[max of k i.i.d. trials], and at k = n the sample maximum itself.

Both assume the n scores are independent draws from one distribution, which holds for random search only: a TPE
search's trials after its start-up depend on the trials before them (it samples where the earlier ones scored well),
so its curve describes the trials it ran, not what a search of k trials would find. Under an early-stopping scheduler
(halving, ASHA) only the trials that trained every epoch have a full score; a trial stopped at a rung is left out
(:func:`full_scores` counts both), so the curve is over the trials the rungs let through.

The band (:func:`curve`): E[best of k] ± 1.96 bootstrap standard deviations, the sd over bootstrap resamples of the
trials (the n scores drawn with replacement, the curve recomputed, 1000 times, seeded): how much the curve itself would
move with another draw of n trials, which is what the climbing rule and a crossing need. Measured by simulation
(tests/dashboards/test_expected_best.py, n = 8 … 50): it holds the estimator's expectation 0.86–0.94 of the time for
scores with a bounded or light upper tail (uniform; a reflected exponential, scores crowding under a ceiling, as
validation scores do), about 0.8 for normal scores at large k, and as little as 0.6 for a heavy upper tail (Student's t
with 3 degrees of freedom): the bootstrap of a maximum's estimate is too narrow there, so read the band as a lower bound
on the uncertainty. Percentile bands of the same resamples are worse (0.3–0.6 at k = n: a resample holds fewer distinct
top scores, so its curve sits low). Dodge et al. 2019 shade ± the standard deviation of the best of k draws instead:
the spread of one search's outcome, which does not shrink as n grows, so it says how lucky a search can be, not how
well its curve is known.

Pure numpy: no stores, no Optuna import (a trial is read through its attributes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np

from trainables.schema.space import Mode

__all__ = [
    "WITH_REPLACEMENT",
    "WITHOUT_REPLACEMENT",
    "DEFAULT_RESAMPLES",
    "MIN_TRIALS",
    "Curve",
    "FullScores",
    "Budget",
    "CellCurve",
    "weights",
    "expected_best",
    "curve",
    "full_scores",
    "tie_spread",
    "budget",
    "of_trials",
    "crossings",
    "curves_cross",
    "crossing_line",
]

WITH_REPLACEMENT: Final = "with_replacement"
WITHOUT_REPLACEMENT: Final = "without_replacement"
#: Bootstrap resamples of the band, and its normal quantile (95 %).
DEFAULT_RESAMPLES: Final = 1000
_Z: Final = 1.959963984540054
#: Fewer trials that trained every epoch than this: no climbing/flat line (half of 3 is one trial).
MIN_TRIALS: Final = 4
#: Two curve values closer than this (relative to their size, at least 1) are equal: no leader at that k.
_TIE: Final = 1e-12


def _log_comb(a: np.ndarray, b: np.ndarray, log_fact: np.ndarray) -> np.ndarray:
    """log C(a, b), elementwise over broadcast ``a`` and ``b`` (−inf where a < b)."""
    a, b = np.broadcast_arrays(a, b)
    out = np.full(a.shape, -np.inf)
    ok = a >= b
    out[ok] = log_fact[a[ok]] - log_fact[b[ok]] - log_fact[a[ok] - b[ok]]
    return out


def weights(n: int, estimator: str = WITH_REPLACEMENT) -> np.ndarray:
    """The n × n matrix W with ``W[k − 1, i − 1]`` the weight of the i-th smallest of n scores in E[best of k]: each
    row sums to 1, so ``W @ sorted(values)`` is the curve (the module docstring's two estimators)."""
    if n < 1:
        raise ValueError(f"weights need at least one score, got {n=}")
    i = np.arange(1, n + 1)[None, :]
    k = np.arange(1, n + 1)[:, None]
    if estimator == WITH_REPLACEMENT:
        return (i / n) ** k - ((i - 1) / n) ** k
    if estimator == WITHOUT_REPLACEMENT:
        # In logs: C(n, k) overflows a float from n ≈ 1030 on.
        log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
        return np.exp(_log_comb(i - 1, k - 1, log_fact) - _log_comb(np.full_like(k, n), k, log_fact))
    raise ValueError(f"estimator must be {WITH_REPLACEMENT!r} or {WITHOUT_REPLACEMENT!r}, got {estimator!r}")


def _oriented(values: Sequence[float] | np.ndarray, mode: Mode) -> np.ndarray:
    """Larger is better: ``min`` negated; a clear ValueError on an empty or non-finite vector or another mode."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"the expected best needs a non-empty vector of finite scores, got {x.shape} {x[:5]}")
    return x if mode == "max" else -x


def expected_best(
    values: Sequence[float] | np.ndarray, mode: Mode = "max", estimator: str = WITH_REPLACEMENT
) -> np.ndarray:
    """E[best of k] for k = 1 … n of the n ``values`` (``mode``: which way is better), in the values' units."""
    x = _oriented(values, mode)
    out = weights(len(x), estimator) @ np.sort(x)
    return out if mode == "max" else -out


@dataclass(frozen=True)
class Curve:
    """A cell's expected best against its trials, k = 1 … n (each array has n entries, in the scores' units).

    Args:
        mode: ``max`` or ``min``: which way is better.
        mean: E[best of k].
        low, high: the band: ``mean`` ∓ 1.96 ``sd``.
        sd: the standard deviation of the curve over bootstrap resamples of the trials.
        estimator: :data:`WITH_REPLACEMENT` or :data:`WITHOUT_REPLACEMENT`.
    """

    mode: Mode
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    sd: np.ndarray
    estimator: str = WITH_REPLACEMENT

    @property
    def n(self) -> int:
        return len(self.mean)

    def oriented(self) -> np.ndarray:
        """The mean curve with larger better (``min`` negated)."""
        return self.mean if self.mode == "max" else -self.mean


def curve(
    values: Sequence[float] | np.ndarray,
    mode: Mode = "max",
    *,
    estimator: str = WITH_REPLACEMENT,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Curve:
    """:func:`expected_best` of ``values`` with its bootstrap band (the module docstring; seeded, so repeatable)."""
    if resamples < 2:
        raise ValueError(f"the band needs at least 2 resamples, got {resamples=}")
    x = _oriented(values, mode)
    w = weights(len(x), estimator)
    mean = w @ np.sort(x)
    rng = np.random.default_rng(seed)
    drawn = np.sort(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    sd = (drawn @ w.T).std(axis=0, ddof=1)
    low, high = mean - _Z * sd, mean + _Z * sd
    if mode == "min":
        mean, low, high = -mean, -high, -low
    return Curve(mode, mean, low, high, sd, estimator)


class _Trial(Protocol):
    """What :func:`full_scores` reads of a trial (an Optuna ``FrozenTrial``)."""

    @property
    def number(self) -> int: ...

    @property
    def value(self) -> float | None: ...

    @property
    def intermediate_values(self) -> dict[int, float]: ...

    @property
    def state(self) -> Any: ...


@dataclass(frozen=True)
class FullScores:
    """A cell's trials that trained every epoch, with a finite score (in trial-number order), and how many ended."""

    values: tuple[float, ...]
    numbers: tuple[int, ...]
    #: Trials that ended: COMPLETE, PRUNED (a scheduler stopped them at a rung) or FAIL.
    ended: int

    def text(self) -> str:
        """``18 of 20 ended trials trained every epoch``."""
        return f"{len(self.values)} of {self.ended} ended trials trained every epoch"


_ENDED: Final = ("COMPLETE", "PRUNED", "FAIL")


def full_scores(trials: Sequence[_Trial], epochs: int) -> FullScores:
    """The scores (``trial.value``: what ranked the trial, ``search.select_on`` applied) of the ``trials`` that trained
    every one of ``epochs``: COMPLETE or PRUNED with a finite value whose last reported epoch (Optuna's intermediate
    values; a COMPLETE trial without them: ``epochs``) is ``epochs`` or more: the candidates a cell's choice is among
    (:func:`study.final.reliability.choice`)."""
    kept: list[tuple[int, float]] = []
    ended = 0
    for t in trials:
        state = getattr(t.state, "name", str(t.state))
        ended += state in _ENDED
        if state not in ("COMPLETE", "PRUNED") or t.value is None or not math.isfinite(t.value):
            continue
        steps = t.intermediate_values or {}
        last = max(int(s) for s in steps) if steps else (epochs if state == "COMPLETE" else 0)
        if last >= epochs:
            kept.append((t.number, float(t.value)))
    kept.sort()
    return FullScores(tuple(v for _, v in kept), tuple(n for n, _ in kept), ended)


def tie_spread(values: Sequence[float] | np.ndarray, mode: Mode, tie_set: int) -> float:
    """The spread of a cell's tie set: the best score minus the ``tie_set``-th best. The tie set
    (:class:`study.final.reliability.Reliability`) holds the winner and the candidates its bootstrap cannot tell from
    it, which are, but for rare resamples, the ``tie_set`` best; taking the best ones makes the spread computable from
    what the parent run stores (the tie set's size), so the report and the dashboard say the same."""
    x = np.sort(_oriented(values, mode))[::-1]
    m = min(max(int(tie_set), 1), len(x))
    return float(x[0] - x[m - 1])


@dataclass(frozen=True)
class Budget:
    """Whether a cell's expected best still climbed over the last half of its trials.

    Args:
        label: the cell.
        n: its trials that trained every epoch.
        half: the budget the rise is measured from (n // 2).
        rise: E[best of n] − E[best of half], oriented (positive: better).
        threshold: what the rise is held against: the tie set's spread, else the bootstrap sd of E[best of n].
        against: says which threshold, for the line.
        scores: the trials it reads (:class:`FullScores`).
    """

    label: str
    n: int
    half: int
    rise: float
    threshold: float
    against: str
    scores: FullScores

    @property
    def climbing(self) -> bool | None:
        """True: still climbing at n; False: flat; None: too few trials to say."""
        return None if self.n < MIN_TRIALS else self.rise > self.threshold

    def line(self) -> str:
        """``budget: ms.p0.2: still climbing at n = 20: the last 10 trials improved the expected best by 0.0123, more
        than the tie set's spread 0.0040 (3 candidates); 20 of 22 ended trials trained every epoch``."""
        head = f"budget: {self.label}: "
        if self.climbing is None:
            return head + f"too few trials to say whether more would help ({self.scores.text()}; {MIN_TRIALS} needed)"
        verdict = f"still climbing at n = {self.n}" if self.climbing else f"flat at n = {self.n}"
        compared = "more than" if self.climbing else "not more than"
        return (
            f"{head}{verdict}: the last {self.n - self.half} trials improved the expected best by {self.rise:.4f}, "
            f"{compared} {self.against}; {self.scores.text()}"
        )


def budget(label: str, found: Curve, scores: FullScores, tie_set: int | None = None) -> Budget:
    """The climbing/flat rule of a cell's curve ``found`` over its ``scores``: still climbing at n when the last half
    of the trials (E[best of n] − E[best of n // 2]) improved the expected best by more than the tie set's spread
    (:func:`tie_spread`, given the tie set's size: two or more candidates); without such a tie set (none computed, a
    choice the rungs made, or a clear winner, whose spread of 0 would call any rise a climb), by more than the
    bootstrap standard deviation of E[best of n]."""
    n = found.n
    half = max(n // 2, 1)
    mean = found.oriented()
    rise = float(mean[-1] - mean[half - 1])
    if tie_set is not None and tie_set >= 2 and n >= 2:
        spread = tie_spread(scores.values, found.mode, tie_set)
        return Budget(label, n, half, rise, spread, f"the tie set's spread {spread:.4f} ({tie_set} candidates)", scores)
    sd = float(found.sd[-1])
    why = "no tie set of two or more" if tie_set is None else "the winner is clear"
    against = f"the bootstrap sd of E[best of {n}] {sd:.4f} ({why}: no tie set's spread)"
    return Budget(label, n, half, rise, sd, against, scores)


@dataclass(frozen=True)
class CellCurve:
    """One cell's curve (``None`` with no trial that trained every epoch) and its climbing/flat rule."""

    label: str
    scores: FullScores
    curve: Curve | None
    budget: Budget | None

    def line(self) -> str:
        if self.budget is not None:
            return self.budget.line()
        return f"budget: {self.label}: no expected best: no trial trained every epoch ({self.scores.text()})"


def of_trials(label: str, trials: Sequence[_Trial], epochs: int, mode: Mode, tie_set: int | None = None) -> CellCurve:
    """A cell's :class:`CellCurve` from its Optuna trials (:func:`full_scores`, :func:`curve`, :func:`budget`)."""
    scores = full_scores(trials, epochs)
    if not scores.values:
        return CellCurve(label, scores, None, None)
    found = curve(scores.values, mode)
    return CellCurve(label, scores, found, budget(label, found, scores, tie_set))


def _signs(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    """sign(a − b) over k = 1 … min(len): 0 where the two are equal up to :data:`_TIE`."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = min(len(x), len(y))
    x, y = x[:n], y[:n]
    scale = np.maximum(1.0, np.maximum(np.abs(x), np.abs(y)))
    d = x - y
    return np.where(np.abs(d) <= _TIE * scale, 0, np.sign(d)).astype(int)


def crossings(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[int, ...]:
    """The budgets k (1-based) at which the leader of two expected-best curves changes: where sign(a − b) differs from
    its last non-zero sign before k. Over k = 1 … min(len(a), len(b)): the budget both arms ran. Orientation does not
    matter: a crossing is one under ``max`` and ``min`` alike."""
    out = []
    last = 0
    for k, s in enumerate(_signs(a, b), start=1):
        if s == 0:
            continue
        if last and s != last:
            out.append(k)
        last = s
    return tuple(out)


def curves_cross(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> bool:
    """Whether two arms' expected-best curves (k = 1, 2, …) cross inside the budget both ran."""
    return bool(crossings(a, b))


def crossing_line(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    names: tuple[str, str] = ("A", "B"),
    mode: Mode = "max",
) -> str:
    """One line on two arms' expected-best curves ``a`` and ``b`` (named ``names``): ``the curves cross at k = 3: a
    verdict that flips with the budget (bspml leads at k = 1, ms at k = 20)``, or ``the curves do not cross within
    k = 1 … 20: bspml leads at every budget``."""
    signs = _signs(a, b)
    n = len(signs)
    if n == 0:
        return "no curves to compare: an arm has no trial that trained every epoch"
    better = 1 if mode == "max" else -1

    def leader(s: int) -> str:
        return names[0] if s * better > 0 else names[1]

    found = crossings(a, b)
    led = [(k, int(s)) for k, s in enumerate(signs, start=1) if s]
    if found:
        (k0, first), (k1, last) = led[0], led[-1]
        at = ", ".join(str(k) for k in found)
        return (
            f"the curves cross at k = {at}: a verdict that flips with the budget ({leader(first)} leads at k = {k0}, "
            f"{leader(last)} at k = {k1})"
        )
    if not led:
        return f"the curves coincide over k = 1 … {n}: no arm leads at any budget"
    return f"the curves do not cross within k = 1 … {n}: {leader(led[0][1])} leads at every budget"
