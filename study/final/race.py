"""The finalist race (``final.race``, issue 59 part 3): spend compute where a cell's choice is close.

After the search, each group's (a table's cell, a study's ``final.group_by`` group or replicate) ``finalists`` best
search trials (:func:`study.final.stage.top_per_group`: by ``search.objective`` among the trials that trained every
epoch) are retrained with ``seeds`` more seeds each, as search trials: on the same validation classes, reporting the
same objective, never the test classes. A finalist's race score is the mean of its search trial's value and its race
runs' values; the final stage then retrains the finalist with the best score (ties to the earlier search trial, as
:func:`study.final.best.pick_best` breaks them). A race run that failed or did not train every epoch is left out of
its finalist's mean (its search value always counts).

The race seeds continue from the finalist's own: seed ``s + 1 … s + seeds`` where ``s`` is its search trial's seed
(``seed``, or the spec's). The label noise is the search's (a race never reseeds it): the finalists are compared on
the data they were chosen on.

Pure: Ray results in, points and standings out. The driver runs the race's Tuner (:mod:`study.search.driver`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from study.final.best import is_finite_number, pick_best
from study.final.stage import result_trial_id
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH
from trainables.schema.trial import RACE_KEY, sampled_values

if TYPE_CHECKING:
    from ray.tune import Result

    from trainables.schema.spec import StudySpec

__all__ = ["Standing", "race_points", "race_key", "standings", "race_csv"]


def race_points(spec: StudySpec, finalists: Mapping[str, Sequence[Result]], order: Mapping[str, int]) -> list[dict]:
    """The race's Ray configs (values of :data:`~trainables.schema.trial.RACE_KEY`): per group (sorted) and finalist
    (best first), its sampled values with each race seed over ``seed``; ``number`` is the finalist's Optuna number
    (its runs' names). The same results give the same points, so a resumed driver plans the same race."""
    race = spec.final.race
    assert race is not None, "race_points needs final.race"
    points = []
    for label in sorted(finalists):
        for result in finalists[label]:
            sampled = sampled_values(result.config or {})
            own = int(sampled.get("seed", spec.seed))
            trial = result_trial_id(result)
            for i in range(1, race.seeds + 1):
                params = {**sampled, "seed": own + i}
                points.append({R.GROUP: label, R.SOURCE_TRIAL: trial, "number": order.get(trial), "params": params})
    return points


def race_key(point: dict[str, Any]) -> tuple[str, str, int]:
    """What identifies a race point: its group, the search trial it retrains and its seed."""
    return (str(point[R.GROUP]), str(point[R.SOURCE_TRIAL]), int(point["params"]["seed"]))


@dataclass(frozen=True)
class Standing:
    """One finalist of one group after the race: its search trial's value and its race runs' values."""

    group: str
    source_trial: str
    #: The finalist's Optuna trial number (``None`` where Optuna does not know it).
    number: int | None
    search_value: float
    race_values: tuple[float, ...]
    winner: bool = False

    @property
    def mean(self) -> float:
        """Its race score: the mean of its search value and its race values."""
        values = (self.search_value, *self.race_values)
        return sum(values) / len(values)


def standings(
    spec: StudySpec,
    finalists: Mapping[str, Sequence[Result]],
    race: Sequence[Result],
    order: Mapping[str, int],
) -> tuple[dict[str, Result], list[Standing]]:
    """Per group the winner (the finalist's search result, what the final stage retrains) and every finalist's
    :class:`Standing`, groups sorted, finalists best first by the search."""
    objective, epochs = spec.search.objective, spec.train.epochs
    values: dict[tuple[str, str], list[float]] = {}
    for r in race:
        metrics = r.metrics or {}
        if r.error is not None or int(metrics.get(EPOCH, 0)) < epochs or not is_finite_number(metrics.get(objective)):
            continue
        group, trial, _ = race_key((r.config or {})[RACE_KEY])
        values.setdefault((group, trial), []).append(float(metrics[objective]))

    def earlier(s: Standing) -> tuple[float, str]:  # the tie-break of study.final.stage.creation_order
        return (order.get(s.source_trial, math.inf), s.source_trial)

    winners: dict[str, Result] = {}
    table: list[Standing] = []
    for label in sorted(finalists):
        rows = [
            Standing(
                label,
                result_trial_id(f),
                order.get(result_trial_id(f)),
                float((f.metrics or {}).get(objective, math.nan)),
                tuple(values.get((label, result_trial_id(f)), [])),
            )
            for f in finalists[label]
        ]
        best = pick_best(rows, lambda s: s.mean, earlier, spec.search.mode)
        if best is None:
            continue
        winners[label] = next(f for f in finalists[label] if result_trial_id(f) == best.source_trial)
        table += [dataclasses.replace(s, winner=s is best) for s in rows]
    return winners, table


def race_csv(table: Sequence[Standing]) -> str:
    """The parent run's :data:`~trainables.schema.record.RACE_FILE`: one row per finalist (values exact)."""
    lines = [",".join(R.RACE_COLUMNS)]
    for s in table:
        race = " ".join(repr(v) for v in s.race_values)
        number = "" if s.number is None else str(s.number)
        lines.append(
            f'"{s.group}",{s.source_trial},{number},{s.search_value!r},{race},{s.mean!r},{str(s.winner).lower()}'
        )
    return "\n".join(lines) + "\n"
