"""How reliable a cell's choice of its best trial is, from its validation data alone (issue 59).

A cell picks, among its candidate trials, the one with the best validation score; on a small validation set that
choice is close to a lottery. Three numbers say how close:

- **P(best)**: over a bootstrap of the validation *classes* (each fold's classes drawn with replacement, the same
  draw for every candidate: paired), the probability that the chosen trial is the best candidate; candidates tied at
  the top of a resample share its credit (``1/k`` each of ``k``). Beside it, ``1/n`` for ``n`` candidates: a pure
  lottery's value.
- **Tie set**: the candidates the bootstrap cannot tell from the winner, the winner included: those whose resampled
  score is at least the winner's in at least ``alpha`` of the resamples (a one-sided paired bootstrap test that cannot
  reject "this candidate is as good as the winner").
- **Stability**: Spearman's rank correlation of the candidates' scores at the last two reported epochs (the training's
  wobble, which the bootstrap of the validation data does not see).

A candidate's score is the mean over folds (a holdout has one) of its fold's metric, Σ sums / Σ counts over the fold's
classes (:class:`trainables.metrics.per_class.PerClass`); in a resample a class drawn twice counts twice. Classes, not
queries, are resampled because a class's queries share their neighbours and are far from independent.

Written by hand: no library offers a paired bootstrap over classes of several retrieval candidates at once (scipy's
``bootstrap`` resamples one statistic's observations, not a ratio of per-class sums shared by many candidates across
independently resampled folds), and the whole computation is a few array products. Pure numpy: no Ray, no stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from study.final.best import pick_best
from trainables.metrics.per_class import PerClass, from_record
from trainables.schema import record as R

__all__ = [
    "Reliability",
    "reliability",
    "of_trials",
    "scores",
    "spearman",
    "DEFAULT_RESAMPLES",
    "DEFAULT_ALPHA",
]

#: Bootstrap resamples and the tie set's level (the brief of issue 59).
DEFAULT_RESAMPLES = 1000
DEFAULT_ALPHA = 0.05
#: Two scores closer than this (relative to their size, at least 1) are equal: identical candidates' sums, multiplied
#: by the same class weights in a different order, may differ in the last bits.
_TIE = 1e-12


@dataclass(frozen=True)
class Reliability:
    """How reliable a cell's choice is.

    Args:
        n: the candidates.
        winner: the chosen candidate's index.
        p_best: the bootstrap probability that the winner is the best candidate (ties share the credit).
        tie_set: the candidates the bootstrap cannot tell from the winner: the winner first, then by full-data score
            (best first, ties to the lower index).
        stability: Spearman's ρ of the candidates' scores at the last two epochs; ``None`` when unknown (fewer than 3
            candidates, a constant or non-finite vector, or no scores given).
        resamples: the bootstrap's resamples.
    """

    n: int
    winner: int
    p_best: float
    tie_set: tuple[int, ...]
    stability: float | None
    resamples: int

    def metrics(self, label: str) -> dict[str, float]:
        """As metrics of the run's parent MLflow run (:func:`trainables.schema.record.selection_metric`)."""
        out = {
            "p_best": self.p_best,
            "chance": 1.0 / self.n,
            "candidates": float(self.n),
            "tie_set": float(len(self.tie_set)),
        }
        if self.stability is not None:
            out["stability"] = self.stability
        return {R.selection_metric(label, k): v for k, v in out.items()}

    def line(self, label: str) -> str:
        """One plain line, e.g. ``ms.p0.2: the winner is one of 5 indistinguishable candidates (P(best) 0.24, 1/n
        0.13); rank stability over the last two epochs ρ 0.41``."""
        if len(self.tie_set) > 1:
            what = f"the winner is one of {len(self.tie_set)} indistinguishable candidates"
        else:
            what = "the winner is clear"
        text = f"{label}: {what} (P(best) {self.p_best:.2f}, 1/n {1 / self.n:.2f})"
        if self.stability is not None:
            text += f"; rank stability over the last two epochs ρ {self.stability:.2f}"
        return text


def _folds(candidates: Sequence[Sequence[PerClass]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per fold, ``(sums, counts)``, each candidates × classes; a clear ValueError unless every candidate has the same
    folds with the same classes."""
    if len(candidates) == 0:
        raise ValueError("reliability needs at least one candidate")
    n_folds = len(candidates[0])
    if n_folds == 0:
        raise ValueError("candidate 0 has no folds")
    out = []
    for f in range(n_folds):
        classes = candidates[0][f].classes
        if len(classes) == 0:
            raise ValueError(f"fold {f} has no classes")
        for c, folds in enumerate(candidates):
            if len(folds) != n_folds:
                raise ValueError(f"candidate {c} has {len(folds)} folds, candidate 0 has {n_folds}")
            if not np.array_equal(folds[f].classes, classes):
                raise ValueError(
                    f"candidate {c}'s fold {f} has other classes than candidate 0's "
                    f"({len(folds[f].classes)} vs {len(classes)} classes): candidates must share each fold's classes"
                )
        sums = np.stack([folds[f].sums for folds in candidates]).astype(np.float64)
        counts = np.stack([folds[f].counts for folds in candidates]).astype(np.float64)
        out.append((sums, counts))
    return out


def _ratio(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``sums / counts``, NaN where nothing counts."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)


def _scores(folds: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The candidates' full-data scores: the mean over folds of Σ sums / Σ counts."""
    return np.mean([_ratio(s.sum(axis=1), n.sum(axis=1)) for s, n in folds], axis=0)


def scores(candidates: Sequence[Sequence[PerClass]]) -> list[float]:
    """Each candidate's full-data score: the mean over its folds of Σ sums / Σ counts over the fold's classes (NaN
    for a fold where nothing counts)."""
    return [float(s) for s in _scores(_folds(candidates))]


def _resampled_scores(folds: list[tuple[np.ndarray, np.ndarray]], resamples: int, seed: int) -> np.ndarray:
    """resamples × candidates: each fold's classes drawn with replacement (class-count weights, the same for every
    candidate), the score the mean over folds of the weighted Σ sums / Σ counts."""
    rng = np.random.default_rng(seed)
    total = np.zeros((resamples, len(folds[0][0])))
    for sums, counts in folds:
        n_classes = sums.shape[1]
        weights = rng.multinomial(n_classes, np.full(n_classes, 1.0 / n_classes), size=resamples).astype(np.float64)
        total += _ratio(weights @ sums.T, weights @ counts.T)
    return total / len(folds)


def _oriented(values: np.ndarray, mode: str) -> np.ndarray:
    """Larger is better: ``min`` negated, NaN (nothing counted) the worst."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    out = values if mode == "max" else -values
    return np.where(np.isnan(out), -np.inf, out)


def _at_least(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a >= b`` up to :data:`_TIE` (relative, at least absolute)."""
    scale = np.maximum(1.0, np.maximum(np.abs(np.where(np.isfinite(a), a, 0)), np.abs(np.where(np.isfinite(b), b, 0))))
    return (a >= b) | (np.isfinite(a) & np.isfinite(b) & (a >= b - _TIE * scale))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank (scipy's ``rankdata`` default)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(before: Sequence[float], after: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two score vectors; ``None`` with fewer than 3 entries, a non-finite entry or a
    constant vector (undefined)."""
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman needs two vectors of one length, got shapes {a.shape} and {b.shape}")
    if len(a) < 3 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(np.corrcoef(_average_ranks(a), _average_ranks(b))[0, 1])


def _winner(full: np.ndarray, winner: int | None) -> int:
    """The given winner (checked), else the best full-data score, ties to the lowest index."""
    if winner is not None:
        if not 0 <= winner < len(full):
            raise ValueError(f"winner {winner} is not a candidate's index (0..{len(full) - 1})")
        return int(winner)
    return int(np.flatnonzero(_at_least(full, np.max(full)))[0])


def _bootstrap(boot: np.ndarray, chosen: int, alpha: float) -> tuple[float, np.ndarray]:
    """P(best) of ``chosen`` and, per candidate, whether it is at least ``chosen``'s in ``alpha`` of the resamples,
    from resamples × candidates oriented scores. A resample where no candidate's score counts (a fold that drew only
    classes without counting queries: NaN for all) says nothing and is left out; with none left, all are tied."""
    boot = boot[np.isfinite(boot).any(axis=1)]
    if len(boot) == 0:
        return 1.0 / boot.shape[1], np.ones(boot.shape[1], dtype=bool)
    top = _at_least(boot, boot.max(axis=1, keepdims=True))
    p_best = float(np.mean(top[:, chosen] / top.sum(axis=1)))
    return p_best, _at_least(boot, boot[:, [chosen]]).mean(axis=0) >= alpha


def reliability(  # noqa: PLR0913 - the bootstrap's settings (resamples, alpha, seed) are plain keyword defaults
    candidates: Sequence[Sequence[PerClass]],
    mode: str = "max",
    winner: int | None = None,
    last_two: Sequence[tuple[float, float]] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
) -> Reliability:
    """How reliable the choice of ``winner`` among ``candidates`` is (module docstring).

    Args:
        candidates: per candidate, one :class:`PerClass` of the search metric per fold (a holdout has one); every
            candidate has the same folds, and each fold the same classes (else ValueError).
        mode: ``max`` (larger is better) or ``min``.
        winner: the chosen candidate's index; default the best full-data score, ties to the lowest index (the final
            stage's rule: ties to the earliest trial, when the candidates are in trial order).
        last_two: per candidate, its score at the second-to-last and at the last epoch: the stability.
        resamples: bootstrap resamples; alpha: the tie set's level; seed: the generator's seed (reproducible).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
    folds = _folds(candidates)
    full = _oriented(_scores(folds), mode)
    chosen = _winner(full, winner)
    p_best, as_good = _bootstrap(_oriented(_resampled_scores(folds, resamples, seed), mode), chosen, alpha)
    others = sorted((c for c in np.flatnonzero(as_good) if c != chosen), key=lambda c: (-full[c], c))
    stability = None
    if last_two is not None:
        if len(last_two) != len(full):
            raise ValueError(f"last_two has {len(last_two)} entries for {len(full)} candidates")
        stability = spearman([p[0] for p in last_two], [p[1] for p in last_two])
    return Reliability(
        n=len(full),
        winner=chosen,
        p_best=p_best,
        tie_set=(chosen, *(int(c) for c in others)),
        stability=stability,
        resamples=resamples,
    )


class _Trial(Protocol):
    """What :func:`of_trials` reads of a cell's trial (an Optuna ``FrozenTrial``)."""

    @property
    def number(self) -> int: ...

    @property
    def value(self) -> float | None: ...

    @property
    def user_attrs(self) -> dict[str, Any]: ...


def of_trials(trials: Sequence[_Trial], mode: str = "max", seed: int = 0) -> Reliability | None:
    """The reliability of a cell's choice among its candidates, ``trials`` (its COMPLETE Optuna trials): each
    carries its search metric per validation class (:data:`~trainables.schema.record.VAL_PER_CLASS`, stored by the
    searcher as the trial ended) and at its last two epochs (:data:`~trainables.schema.record.OPTUNA_LAST_TWO`); the
    winner is the final stage's (:func:`study.final.best.pick_best`: the best value, ties to the earliest trial).
    ``None`` when the choice cannot be bootstrapped: fewer than 2 candidates, or one without its classes (a trial
    that selected on the test classes, one of a run started before they were kept, a metric that is no mean over
    queries)."""
    ordered = sorted((t for t in trials if t.value is not None), key=lambda t: t.number)
    records = [t.user_attrs.get(R.VAL_PER_CLASS) for t in ordered]
    if len(ordered) < 2 or any(not isinstance(r, dict) or not r.get("folds") for r in records):
        return None
    best = pick_best(ordered, lambda t: t.value, lambda t: t.number, mode)
    if best is None:
        return None
    candidates = [[from_record(fold) for fold in r["folds"]] for r in records if isinstance(r, dict)]
    pairs = [t.user_attrs.get(R.OPTUNA_LAST_TWO) for t in ordered]
    known = all(isinstance(p, list) and len(p) == 2 and None not in p for p in pairs)
    last_two = [(float(p[0]), float(p[1])) for p in pairs] if known else None  # type: ignore[index]
    try:
        return reliability(candidates, mode, ordered.index(best), last_two, seed=seed)
    except ValueError:  # candidates whose folds hold other classes (a spec changed under --resume): nothing to say
        return None
