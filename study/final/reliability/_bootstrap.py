"""The paired bootstrap over validation classes (:func:`reliability`) and what it finds (:class:`Reliability`, or a
:class:`RungChoice` where it cannot run); re-exported by :mod:`study.final.reliability`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from trainables.metrics.per_class import PerClass
from trainables.schema import record as R

#: Bootstrap resamples and the tie set's level.
DEFAULT_RESAMPLES = 1000
DEFAULT_ALPHA = 0.05
#: Two scores closer than this (relative to their size, at least 1) are equal: identical candidates' sums, multiplied
#: by the same class weights in a different order, may differ in the last bits.
_TIE = 1e-12


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap's settings: its ``resamples``, the tie set's level ``alpha`` and the generator's ``seed`` (the same
    seed, the same result)."""

    resamples: int = DEFAULT_RESAMPLES
    alpha: float = DEFAULT_ALPHA
    seed: int = 0


#: The settings every place that prints a selection line uses.
DEFAULT_BOOTSTRAP = Bootstrap()


@dataclass(frozen=True)
class Chosen:
    """The trial a stage after the search chose for the final stage to retrain, instead of the best validation score
    (:meth:`study.search.stages.base.Stage.chosen`): its Optuna number and what the stage calls it (:attr:`~study.search.stages.base.Stage.winner_name`)."""

    number: int
    by: str


@dataclass(frozen=True)
class Reliability:
    """How reliable a cell's choice is.

    Args:
        n: the candidates.
        winner: the chosen candidate's index.
        p_best: the bootstrap probability that the winner is the best candidate (ties share the credit).
        tie_set: the candidates the bootstrap cannot tell from the winner: the winner first, then by full-data score
            (best first, ties to the lower index).
        stability: Spearman's ρ of the candidates' scores at the last two epochs (at a rung: at the rung's epoch and
            the one before); ``None`` when unknown (fewer than 3 candidates, a constant or non-finite vector, or no
            scores given).
        resamples: the bootstrap's resamples.
        rung: the epoch of the rung whose candidates these are, when the rungs of an early-stopping scheduler made
            the choice (no two candidates trained every epoch); ``None``: the candidates trained every epoch.
        chosen: the winner when a stage after the search chose it (:class:`Chosen`: the trial the final stage
            retrains); ``None``: the best validation score chose it.
    """

    n: int
    winner: int
    p_best: float
    tie_set: tuple[int, ...]
    stability: float | None
    resamples: int
    rung: int | None = None
    chosen: Chosen | None = None

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
        if self.rung is not None:
            out["rung_epoch"] = float(self.rung)
        return {R.selection_metric(label, k): v for k, v in out.items()}

    def line(self, label: str) -> str:
        """The cell's one selection line, the same wherever it is printed or logged (the console after the search,
        ``--status``, the report, ``table.md``, the parent run's tag :func:`line_tag`), e.g. ``selection: ms.p0.2:
        the winner is one of 5 indistinguishable candidates (P(best) 0.24, 1/n 0.13); rank stability over the last
        two epochs ρ 0.41``."""
        who = "the winner" if self.chosen is None else f"the {self.chosen.by} (trial {self.chosen.number})"
        if len(self.tie_set) > 1:
            what = f"{who} is one of {len(self.tie_set)} indistinguishable candidates"
        else:
            what = f"{who} is clear"
        where = "" if self.rung is None else f" at the rung of epoch {self.rung}"
        text = f"selection: {label}: {what}{where} (P(best) {self.p_best:.2f}, 1/n {1 / self.n:.2f})"
        if self.stability is not None:
            epochs = "the last two epochs" if self.rung is None else f"epochs {self.rung - 1} and {self.rung}"
            text += f"; rank stability over {epochs} ρ {self.stability:.2f}"
        return text


@dataclass(frozen=True)
class RungChoice:
    """A choice the rungs of an early-stopping scheduler made where its reliability cannot be bootstrapped: the
    ``kept`` of ``candidates`` trials that reached the rung of epoch ``epoch`` trained on; ``why`` says what is
    missing."""

    epoch: int
    candidates: int
    kept: int
    why: str

    def metrics(self, label: str) -> dict[str, float]:
        """As metrics of the run's parent MLflow run: the candidates and the rung (no P(best))."""
        out = {"candidates": float(self.candidates), "rung_epoch": float(self.epoch)}
        return {R.selection_metric(label, k): v for k, v in out.items()}

    def line(self, label: str) -> str:
        """``selection: bspml.p0.2: the rungs chose: 1 of 2 candidates at the rung of epoch 2 trained on; no
        P(best): …``."""
        return (
            f"selection: {label}: the rungs chose: {self.kept} of {self.candidates} candidates at the rung of epoch "
            f"{self.epoch} trained on; no P(best): {self.why}"
        )


#: What a cell's choice says of itself: bootstrapped, or made by the rungs where it cannot be.
Choice = Reliability | RungChoice


def line_tag(label: str) -> str:
    """The parent run's tag holding cell ``label``'s :meth:`Reliability.line` (beside its metrics)."""
    return R.selection_metric(label, R.SELECTION_LINE)


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


def spearman(before: Sequence[float], after: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two score vectors (:func:`scipy.stats.spearmanr`: tied scores get their average
    rank); ``None`` where it is undefined: fewer than 3 entries (two points always correlate ±1), a non-finite entry,
    or a constant vector (no ranks to correlate; scipy would warn and return NaN)."""
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman needs two vectors of one length, got shapes {a.shape} and {b.shape}")
    if len(a) < 3 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(stats.spearmanr(a, b).statistic)


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


def reliability(
    candidates: Sequence[Sequence[PerClass]],
    mode: str = "max",
    winner: int | None = None,
    last_two: Sequence[tuple[float, float]] | None = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> Reliability:
    """How reliable the choice of ``winner`` among ``candidates`` is (module docstring).

    Args:
        candidates: per candidate, one :class:`PerClass` of the search metric per fold (a holdout has one); every
            candidate has the same folds, and each fold the same classes (else ValueError).
        mode: ``max`` (larger is better) or ``min``.
        winner: the chosen candidate's index; default the best full-data score, ties to the lowest index (the final
            stage's rule: ties to the earliest trial, when the candidates are in trial order).
        last_two: per candidate, its score at the second-to-last and at the last epoch: the stability.
        bootstrap: its resamples, the tie set's level and the generator's seed (reproducible).
    """
    resamples, alpha, seed = bootstrap.resamples, bootstrap.alpha, bootstrap.seed
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
