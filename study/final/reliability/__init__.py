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
(the final stage's rule) or, once a stage after the search chose (:class:`Chosen`), its choice (the trial the final
stage retrains).
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

from study.final.best import pick_best
from study.final.reliability._bootstrap import (
    DEFAULT_ALPHA,
    DEFAULT_BOOTSTRAP,
    DEFAULT_RESAMPLES,
    Bootstrap,
    Choice,
    Chosen,
    Reliability,
    RungChoice,
    line_tag,
    reliability,
    scores,
    spearman,
)
from trainables.metrics.per_class import from_record
from trainables.schema import record as R

__all__ = [
    "Reliability",
    "RungChoice",
    "Choice",
    "Chosen",
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
    "Bootstrap",
    "DEFAULT_BOOTSTRAP",
]

#: The user attribute of a cell's Optuna trial holding its per-class validation results at the rungs it passed
#: (epoch → a :data:`~trainables.schema.record.VAL_PER_CLASS` record), where the searcher keeps them: what lets a
#: choice the rungs made be bootstrapped on the candidates' scores at the rung.
RUNG_RECORDS: Final = R.OPTUNA_RUNG_RECORDS


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


def choice(candidates: Sequence[Candidate], mode: str, epochs: int, chosen: Chosen | None = None) -> Choice | None:
    """How reliable a cell's choice among ``candidates`` (every trial that ended with a finite value) is.

    Where two or more trained every ``epochs``, among those (the final stage's rule: :func:`study.final.best.pick_best`,
    ties to the earliest; ``chosen`` when a stage after the search chose). Else, under an early-stopping
    scheduler, among the trials that reached the last rung that held two or more, on their scores at that rung; a
    :class:`RungChoice` where those are not all known. ``None`` when there was no choice (fewer than 2 candidates) or
    the candidates' classes are missing (a run started before they were kept, a metric that is no mean over queries)
    or differ (a spec changed under ``--resume``)."""
    full = sorted((c for c in candidates if c.epochs >= epochs and c.value_at(c.epochs) is not None), key=_order)
    if len(full) >= 2 or not any(c.epochs < epochs for c in candidates):
        return _bootstrapped(full, mode, None, chosen)
    return _at_rung(candidates, mode)


def _order(c: Candidate) -> int:
    return c.number


def _bootstrapped(
    candidates: Sequence[Candidate], mode: str, rung: int | None, chosen: Chosen | None = None
) -> Reliability | None:
    """:func:`reliability` of ``candidates`` (in trial order) on their records at ``rung`` (``None``: each one's last
    epoch), the winner the one a later stage chose or the best value there; the stability over that epoch and the one before."""
    at = [rung if rung is not None else c.epochs for c in candidates]
    records = [c.records.get(e) for c, e in zip(candidates, at, strict=True)]
    if len(candidates) < 2 or any(not isinstance(r, Mapping) or not r.get("folds") for r in records):
        return None
    numbers = [c.number for c in candidates]
    if chosen is not None and chosen.number in numbers:
        winner = numbers.index(chosen.number)
    else:
        chosen = None
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
    return dataclasses.replace(found, rung=rung, chosen=chosen)


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


def of_trials(trials: Sequence[_Trial], mode: str, epochs: int, chosen: Chosen | None = None) -> Choice | None:
    """:func:`choice` of a cell's Optuna trials: its COMPLETE and PRUNED ones (an early-stopping scheduler's stopped
    trials), each with its search metric per validation class (:data:`~trainables.schema.record.VAL_PER_CLASS`,
    stored by the searcher as the trial ended: at its last epoch) and by epoch (Optuna's intermediate values; a trial
    without them: its last two epochs, :data:`~trainables.schema.record.OPTUNA_LAST_TWO`)."""
    return choice([c for t in trials if (c := _candidate(t, epochs)) is not None], mode, epochs, chosen)


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
