"""The finalist race (``final.race``): spend compute where a cell's choice is close.

After the search, each group's (a table's cell, a study's ``final.group_by`` group or replicate) ``finalists`` best
search trials (:func:`study.final.stage.top_per_group`: by ``search.objective`` among the trials that trained every
epoch) are retrained with ``seeds`` more seeds each, as search trials: on the same validation classes, reporting the
same objective, never the test classes. A finalist's race score is the mean of its search trial's value and its race
runs' values.

The rule that picks the finalist the final stage retrains. A race run that failed, did not train every epoch or
reported no finite objective is *missing*, and counts against its finalist: the search value is the cell's maximum
by construction, so a finalist whose race runs diverge would otherwise win on it alone. A finalist is *eligible*
when none of its race runs is missing; the eligible finalist with the best score wins (ties to the earlier search
trial, as :func:`study.final.best.pick_best` breaks them). When no finalist of a group is eligible, the one with the
fewest missing runs wins, by its score among those: where every race run of the group is missing, that is the best
search value, and :attr:`Standing.missing` on the winner says that the race did not decide.

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

__all__ = ["Standing", "race_points", "race_key", "standings", "race_csv", "undecided_note", "standing_lines"]


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
    #: Its race runs that count against it: failed, stopped before the last epoch, or without a finite objective.
    missing: int = 0

    @property
    def eligible(self) -> bool:
        """Whether every race run of it trained every epoch to a finite objective (only such a finalist wins while
        one exists in its group)."""
        return self.missing == 0

    @property
    def planned(self) -> int:
        """Its race runs: those that finished and those missing."""
        return len(self.race_values) + self.missing

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
    :class:`Standing`, groups sorted, finalists best first by the search. The winner is the module's rule: the best
    score among the finalists with no race run missing, else among those with the fewest missing."""
    race_spec = spec.final.race
    assert race_spec is not None, "standings needs final.race"
    values = _race_values(spec, race)

    def earlier(s: Standing) -> tuple[float, str]:  # the tie-break of study.final.stage.creation_order
        return (order.get(s.source_trial, math.inf), s.source_trial)

    winners: dict[str, Result] = {}
    table: list[Standing] = []
    for label in sorted(finalists):
        rows = []
        for f in finalists[label]:
            trial = result_trial_id(f)
            finished = values.get((label, trial), {})
            search_value = float((f.metrics or {}).get(spec.search.objective, math.nan))
            missing = max(0, race_spec.seeds - len(finished))
            rows.append(
                Standing(label, trial, order.get(trial), search_value, tuple(finished.values()), False, missing)
            )
        fewest = min((s.missing for s in rows), default=0)
        best = pick_best([s for s in rows if s.missing == fewest], lambda s: s.mean, earlier, spec.search.mode)
        if best is None:
            continue
        winners[label] = next(f for f in finalists[label] if result_trial_id(f) == best.source_trial)
        table += [dataclasses.replace(s, winner=s is best) for s in rows]
    return winners, table


def _race_values(spec: StudySpec, race: Sequence[Result]) -> dict[tuple[str, str], dict[int, float]]:
    """Per (group, finalist) the objective of each race seed whose run trained every epoch to a finite value, in
    seed order (a seed reported twice, as by a retried run, counts once)."""
    objective, epochs = spec.search.objective, spec.train.epochs
    values: dict[tuple[str, str], dict[int, float]] = {}
    for r in race:
        metrics = r.metrics or {}
        if r.error is not None or int(metrics.get(EPOCH, 0)) < epochs or not is_finite_number(metrics.get(objective)):
            continue
        group, trial, seed = race_key((r.config or {})[RACE_KEY])
        values.setdefault((group, trial), {})[seed] = float(metrics[objective])
    return {key: dict(sorted(seeds.items())) for key, seeds in values.items()}


def race_csv(table: Sequence[Standing]) -> str:
    """The parent run's :data:`~trainables.schema.record.RACE_FILE`: one row per finalist (values exact)."""
    lines = [",".join(R.RACE_COLUMNS)]
    for s in table:
        race = " ".join(repr(v) for v in s.race_values)
        number = "" if s.number is None else str(s.number)
        lines.append(
            f'"{s.group}",{s.source_trial},{number},{s.search_value!r},{race},{s.missing},{s.mean!r},'
            f"{str(s.winner).lower()}"
        )
    return "\n".join(lines) + "\n"


def undecided_note(group: Sequence[Standing]) -> str:
    """What a group's standings line adds when the race did not decide it (its winner had race runs missing, so no
    finalist of the group was eligible); empty when it did."""
    winner = next((s for s in group if s.winner), None)
    if winner is None or winner.eligible:
        return ""
    on = "its search value alone" if not winner.race_values else "its mean"
    label = winner.source_trial if winner.number is None else winner.number
    return (
        f"no finalist finished every race run: trial {label}, with the fewest missing "
        f"({winner.missing} of {winner.planned}), won on {on}"
    )


def standing_lines(race: Sequence[Standing], name: str) -> list[str]:
    """The finalist race's standings (``final.race``), one line per group: each finalist's mean over its search run
    and its race runs (validation only), its failed or short race runs, the winner marked as the one the final stage
    retrains, and a note where the race did not decide (:func:`undecided_note`). The report prints them, a table's
    ``table.md`` too."""
    if not race:
        return []
    seeds = max(s.planned for s in race)
    lines = [
        f"race: each group's finalists retrained on {seeds} more seeds (validation only); the best mean wins among "
        "the finalists whose race runs all trained every epoch:"
    ]
    for group in dict.fromkeys(s.group for s in race):
        rows = [s for s in race if s.group == group]
        shown = []
        for s in rows:
            race_values = ", ".join(f"{v:.4f}" for v in s.race_values) or "none finished"
            missing = f"; {s.missing} of {s.planned} failed or short" if s.missing else ""
            mark = " (retrained)" if s.winner else ""
            shown.append(
                f"trial {s.source_trial if s.number is None else s.number} {s.mean:.4f}{mark} "
                f"[search {s.search_value:.4f}; race {race_values}{missing}]"
            )
        label = name if group in (R.GROUP_ALL, name) else group
        note = undecided_note(rows)
        lines.append(f"  {label}: " + "; ".join(shown) + (f" ({note})" if note else ""))
    return lines
