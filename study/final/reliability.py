"""How reliable a cell's choice of its best trial is, from its validation data alone.

A cell picks, among its candidate trials, the one with the best validation score; on a small validation set that
choice is close to a lottery. Three numbers say how close:

- **P(best)**: over a bootstrap of the validation *classes* (each fold's classes drawn with replacement, the same
  draw for every candidate: paired), the probability that the chosen trial is the best candidate; candidates tied at
  the top of a resample share its credit (``1/k`` each of ``k``). Beside it, ``1/n`` for ``n`` candidates: a pure
  lottery's value.
- **Tie set**: the candidates the bootstrap cannot tell from the winner, the winner included: those whose resampled
  score is at least the winner's in at least ``alpha`` of the resamples (a one-sided paired bootstrap test that cannot
  reject "this candidate is as good as the winner").
- **Stability**: Spearman's rank correlation (:func:`scipy.stats.spearmanr`) of the candidates' scores at the last
  two epochs (the training's wobble, which the bootstrap of the validation data does not see).

A candidate's score is the mean over folds (a holdout has one) of its fold's metric, Σ sums / Σ counts over the fold's
classes (:class:`trainables.metrics.per_class.PerClass`); in a resample a class drawn twice counts twice. Classes, not
queries, are resampled because a class's queries share their neighbours and are far from independent.

Which candidates, which winner (:func:`choice`): the trials that trained every epoch, the winner the best of them
(the final stage's rule) or, once the finalist race chose, the race's winner (the trial the final stage retrains).
Under an early-stopping scheduler where fewer than two trained every epoch, the rungs chose: the candidates are the
trials that reached the last rung that held two or more, on their scores at that rung, the winner the one the rung
kept; where their per-class results at that rung are not all known, :class:`RungChoice` says so in one line. Every
place that says how reliable a choice is (the console after the search, ``--status``, the report, ``table.md``, the
parent run's tag) prints the one line :meth:`Reliability.line` (:meth:`RungChoice.line`) writes.

Written by hand: no library offers a paired bootstrap over classes of several retrieval candidates at once (scipy's
``bootstrap`` resamples one statistic's observations, not a ratio of per-class sums shared by many candidates across
independently resampled folds), and the whole computation is a few array products. Pure numpy and scipy: no Ray, no
stores.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np
from scipy import stats

from study.final.best import pick_best
from trainables.metrics.per_class import PerClass, from_record
from trainables.schema import record as R

__all__ = [
    "Reliability",
    "RungChoice",
    "Choice",
    "Candidate",
    "choice",
    "line_tag",
    "reliability",
    "of_trials",
    "RUNG_RECORDS",
    "scores",
    "spearman",
    "DEFAULT_RESAMPLES",
    "DEFAULT_ALPHA",
]

#: The user attribute of a cell's Optuna trial holding its per-class validation results at the rungs it passed
#: (epoch → a :data:`~trainables.schema.record.VAL_PER_CLASS` record), where the searcher keeps them: what lets a
#: choice the rungs made be bootstrapped on the candidates' scores at the rung.
RUNG_RECORDS: Final = R.OPTUNA_RUNG_RECORDS
#: Bootstrap resamples and the tie set's level.
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
        stability: Spearman's ρ of the candidates' scores at the last two epochs (at a rung: at the rung's epoch and
            the one before); ``None`` when unknown (fewer than 3 candidates, a constant or non-finite vector, or no
            scores given).
        resamples: the bootstrap's resamples.
        rung: the epoch of the rung whose candidates these are, when the rungs of an early-stopping scheduler made
            the choice (no two candidates trained every epoch); ``None``: the candidates trained every epoch.
        race_winner: the winner's trial number when the finalist race chose it (``final.race``: the trial the final
            stage retrains); ``None``: the best validation score chose it.
    """

    n: int
    winner: int
    p_best: float
    tie_set: tuple[int, ...]
    stability: float | None
    resamples: int
    rung: int | None = None
    race_winner: int | None = None

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
        who = "the winner" if self.race_winner is None else f"the race winner (trial {self.race_winner})"
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


@dataclass(frozen=True)
class Candidate:
    """One of a cell's trials as its choice reads it, from Optuna (:func:`of_trials`) or from Ray's live trials
    (:mod:`study.progress`): both read the same numbers, so both print the same line.

    Args:
        number: its creation order (Optuna's trial number): ties go to the lower.
        epochs: the epochs it trained (a trial an early-stopping scheduler stopped at a rung: that rung's epoch).
        values: its search metric by epoch (at least its last epoch's; Optuna's intermediate values hold every one).
        records: its search metric per validation class (:data:`~trainables.schema.record.VAL_PER_CLASS`'s
            ``{"folds": [...]}``) by epoch: its last epoch's, and any rung's the searcher kept.
    """

    number: int
    epochs: int
    values: Mapping[int, float]
    records: Mapping[int, Any] = field(default_factory=dict)

    def value_at(self, epoch: int) -> float | None:
        """Its search metric at ``epoch`` (``None``: not known, or not finite)."""
        v = self.values.get(epoch)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def choice(candidates: Sequence[Candidate], mode: str, epochs: int, race_winner: int | None = None) -> Choice | None:
    """How reliable a cell's choice among ``candidates`` (every trial that ended with a finite value) is.

    Where two or more trained every ``epochs``, among those (the final stage's rule: :func:`study.final.best.pick_best`,
    ties to the earliest; ``race_winner``, a trial number, when the finalist race chose). Else, under an early-stopping
    scheduler, among the trials that reached the last rung that held two or more, on their scores at that rung; a
    :class:`RungChoice` where those are not all known. ``None`` when there was no choice (fewer than 2 candidates) or
    the candidates' classes are missing (a run started before they were kept, a metric that is no mean over queries)
    or differ (a spec changed under ``--resume``)."""
    full = sorted((c for c in candidates if c.epochs >= epochs and c.value_at(c.epochs) is not None), key=_order)
    if len(full) >= 2 or not any(c.epochs < epochs for c in candidates):
        return _bootstrapped(full, mode, None, race_winner)
    return _at_rung(candidates, mode)


def _order(c: Candidate) -> int:
    return c.number


def _bootstrapped(
    candidates: Sequence[Candidate], mode: str, rung: int | None, race_winner: int | None = None
) -> Reliability | None:
    """:func:`reliability` of ``candidates`` (in trial order) on their records at ``rung`` (``None``: each one's last
    epoch), the winner the race's or the best value there; the stability over that epoch and the one before."""
    at = [rung if rung is not None else c.epochs for c in candidates]
    records = [c.records.get(e) for c, e in zip(candidates, at, strict=True)]
    if len(candidates) < 2 or any(not isinstance(r, Mapping) or not r.get("folds") for r in records):
        return None
    numbers = [c.number for c in candidates]
    if race_winner is not None and race_winner in numbers:
        winner = numbers.index(race_winner)
    else:
        race_winner = None
        scored = list(range(len(candidates)))
        best = pick_best(scored, lambda i: candidates[i].value_at(at[i]), lambda i: numbers[i], mode)
        if best is None:
            return None
        winner = best
    pairs = [(c.value_at(e - 1), c.value_at(e)) for c, e in zip(candidates, at, strict=True)]
    last_two = [(b, a) for b, a in pairs if b is not None and a is not None]
    try:
        found = reliability(
            [[from_record(f) for f in r["folds"]] for r in records if isinstance(r, Mapping)],
            mode,
            winner,
            last_two if len(last_two) == len(candidates) else None,
        )
    except ValueError:  # candidates whose folds hold other classes: nothing to say
        return None
    return dataclasses.replace(found, rung=rung, race_winner=race_winner)


def _at_rung(candidates: Sequence[Candidate], mode: str) -> Choice | None:
    """The choice at the last rung that held two or more candidates (a rung: an epoch where the scheduler stopped
    a trial); ``None`` when none did."""
    for epoch in sorted({c.epochs for c in candidates}, reverse=True):
        held = sorted((c for c in candidates if c.epochs >= epoch), key=_order)
        if len(held) < 2:
            continue
        kept = sum(c.epochs > epoch for c in held)
        if why := _unknown(held, epoch):
            return RungChoice(epoch, len(held), kept, why)
        found = _bootstrapped(held, mode, epoch)
        if found is None:  # classes that differ between the candidates
            return RungChoice(epoch, len(held), kept, "the candidates' per-class validation results do not match")
        return found
    return None


def _unknown(held: Sequence[Candidate], epoch: int) -> str:
    """Why the candidates' per-class validation results or scores at ``epoch`` are not all known (``""``: they are).
    Counts, not trial numbers: the console (Ray's trials) and ``--status`` (Optuna's) say the same."""
    unkept = [c for c in held if not isinstance(c.records.get(epoch), Mapping)]
    if on := sum(c.epochs > epoch for c in unkept):
        return (
            f"the per-class validation results are kept at a trial's last epoch only, and {on} of the candidates "
            f"trained past epoch {epoch}"
        )
    if unkept:
        return f"{len(unkept)} of the candidates kept no per-class validation results"
    if missing := sum(c.value_at(epoch) is None for c in held):
        return f"the search metric at epoch {epoch} is not known for {missing} of the candidates"
    return ""


class _Trial(Protocol):
    """What :func:`of_trials` reads of a cell's trial (an Optuna ``FrozenTrial``)."""

    @property
    def number(self) -> int: ...

    @property
    def value(self) -> float | None: ...

    @property
    def user_attrs(self) -> dict[str, Any]: ...

    @property
    def intermediate_values(self) -> dict[int, float]: ...

    @property
    def state(self) -> Any: ...


def of_trials(trials: Sequence[_Trial], mode: str, epochs: int, race_winner: int | None = None) -> Choice | None:
    """:func:`choice` of a cell's Optuna trials: its COMPLETE and PRUNED ones (an early-stopping scheduler's stopped
    trials), each with its search metric per validation class (:data:`~trainables.schema.record.VAL_PER_CLASS`,
    stored by the searcher as the trial ended: at its last epoch) and by epoch (Optuna's intermediate values; a trial
    without them: its last two epochs, :data:`~trainables.schema.record.OPTUNA_LAST_TWO`)."""
    return choice([c for t in trials if (c := _candidate(t, epochs)) is not None], mode, epochs, race_winner)


def _candidate(trial: _Trial, epochs: int) -> Candidate | None:
    """The trial as a :class:`Candidate`; ``None`` unless it ended COMPLETE or PRUNED with a value."""
    state = getattr(trial.state, "name", str(trial.state))
    if state not in ("COMPLETE", "PRUNED") or trial.value is None:
        return None
    values = {int(k): float(v) for k, v in (trial.intermediate_values or {}).items()}
    last = max(values) if values else (epochs if state == "COMPLETE" else 0)
    values.setdefault(last, float(trial.value))
    pair = trial.user_attrs.get(R.OPTUNA_LAST_TWO)
    if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (int, float)) and last - 1 not in values:
        values[last - 1] = float(pair[0])
    records: dict[int, Any] = {int(k): v for k, v in (trial.user_attrs.get(RUNG_RECORDS) or {}).items()}
    if isinstance(record := trial.user_attrs.get(R.VAL_PER_CLASS), dict):
        records[last] = record
    return Candidate(trial.number, last, values, records)
