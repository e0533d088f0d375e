"""The final test stage: the search's best configuration retrained on all training classes with several seeds,
evaluated on the test classes, summarised as mean, std and a 95 % confidence interval.

This is the second half of the protocol of "A Metric Learning Reality Check" (Musgrave, Belongie, Lim, ECCV
2020, Sec. 4): the search selects on validation classes carved from the training classes, and the test classes
are used once, here. With ``final.group_by`` the best configuration is chosen, and retrained, once per
combination of the named *condition* values (family, noise ratio, subset, ...), which is how a comparison grid
gets one honest number per cell.

The best configuration is :func:`study.final.best.pick_best`'s (ties to the earliest trial, :func:`creation_order`); the interval is
:func:`study.final.intervals.t_interval` (Student's t over the seeds). The summary's columns are named by
:mod:`trainables.schema.record`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from study.final.best import ranked_full_trials
from study.final.intervals import t_interval
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH, FOLD_ENSEMBLE_PREFIX, TEST_PREFIX, bounds_of, split_per_category
from trainables.schema.spec import FinalSpec, StudySpec
from trainables.schema.trial import CELL_KEY, FINAL_KEY, sampled_values

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ray.tune import Result, ResultGrid

    #: A stage's results: Tune's grid, or a part of one (the search's trials of an experiment that ran final ones too).
    Results = ResultGrid | Sequence[Result]

__all__ = [
    "FinalGroup",
    "results_of",
    "result_trial_id",
    "best_per_group",
    "top_per_group",
    "best_result",
    "best_per_cell",
    "creation_order",
    "final_points",
    "seed_points",
    "point_key",
    "summarize_final",
    "t_interval",
    "summary_csv",
    "category_csv",
]

#: The search-space path of the label noise's seed (set per final seed with ``final.reseed_noise``).
NOISE_SEED = "dataset.noise.seed"
#: Label of the only group when ``final.group_by`` is empty (named with the record: its runs' names leave it out).
ALL = R.GROUP_ALL


def result_trial_id(result: Result) -> str:
    """The Ray trial id of a result (the MLflow ``trial_id`` tag): its directory is ``trial_<id>``. The
    ``trial_id`` key inside Ray's metrics is the id of Ray Train's run, not the trial's."""
    return Path(result.path).name.removeprefix("trial_")


def group_label(spec: StudySpec, sampled: dict[str, Any]) -> str:
    """``family=ms, dataset.noise.ratio=0.2`` for the group_by values of one configuration (``all`` without)."""
    if not spec.final.group_by:
        return ALL
    return ", ".join(f"{name}={sampled.get(name)}" for name in spec.final.group_by)


def results_of(grid: Results) -> list[Result]:
    """The grid's results as a list (``ResultGrid`` is indexable but declares no ``__iter__``)."""
    return [grid[i] for i in range(len(grid))]


def _config(result: Result) -> dict[str, Any]:
    return result.config or {}


def _metrics(result: Result) -> dict[str, Any]:
    return result.metrics or {}


def _finished(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if r.error is None and r.metrics]


def creation_order(order: Mapping[str, int]) -> Callable[[Result], tuple[float, str]]:
    """The tie-break key of a search result: its Optuna trial number (``order``: Ray trial id → number, from the
    trials' ``ray_trial_id`` user attribute), then its Ray trial id. Ray's trial ids are random, so on their own they
    would break a tie differently in two runs of the same study; Optuna numbers trials in the order they were asked."""
    return lambda r: (order.get(result_trial_id(r), math.inf), result_trial_id(r))


def best_result(spec: StudySpec, results: Results, order: Mapping[str, int]) -> Result | None:
    """The study's best search trial: its own cell's (replicate 0's; trials without a cell stamp are its own) pick by
    the final stage's rule (:func:`best_per_cell`). ``None`` for a table, whose cells each have their own."""
    return best_per_cell(spec, results, order).get(spec.name)


def best_per_cell(spec: StudySpec, results: Results, order: Mapping[str, int]) -> dict[str, Result]:
    """Per search cell (a replicate, a table's arm × condition; :data:`~trainables.schema.trial.CELL_KEY`), the trial
    the final stage retrains: :func:`best_per_group` by cell. What the console, the parent run's ``best_trial_id`` and
    ``best_<metric>`` name: never a trial a scheduler stopped at an early rung (its last value is of an earlier epoch),
    never the best over several replicates (the optimistic pick replicates exist to avoid)."""
    return best_per_group(spec, results, order, group=lambda config: str(config.get(CELL_KEY) or spec.name))


def best_per_group(
    spec: StudySpec,
    results: Results,
    order: Mapping[str, int],
    group: Callable[[dict[str, Any]], str | None] | None = None,
) -> dict[str, Result]:
    """Per group, the search trial with the best last value of the search metric among those that trained every epoch
    where any did (:func:`study.final.best.pick_best`:
    ties to the earliest trial, so a resumed driver, whose ResultGrid order may differ, and a rerun of the study,
    whose Ray trial ids differ, pick the same).

    ``group`` maps a trial's config to its group (default: the ``final.group_by`` values; a table: its cell)."""
    return {key: top[0] for key, top in top_per_group(spec, results, order, 1, group).items()}


def top_per_group(
    spec: StudySpec,
    results: Results,
    order: Mapping[str, int],
    k: int,
    group: Callable[[dict[str, Any]], str | None] | None = None,
) -> dict[str, list[Result]]:
    """Per group (as :func:`best_per_group` groups), its ``k`` best search trials by the same rule, best first
    (:func:`study.final.best.ranked_full_trials`); groups without one are left out."""
    metric = spec.search.objective  # what ranks a trial (search.select_on)
    label = group or (lambda config: group_label(spec, sampled_values(config)))
    members: dict[str | None, list[Result]] = {}
    for r in _finished(results_of(results)):
        members.setdefault(label(_config(r)), []).append(r)
    picked = {
        key: ranked_full_trials(
            trials,
            lambda r: _metrics(r).get(metric),
            lambda r: int(_metrics(r).get(EPOCH, 0)) >= spec.train.epochs,
            creation_order(order),
            spec.search.mode,
        )[:k]
        for key, trials in members.items()
    }
    return {key: top for key, top in picked.items() if key is not None and top}


def final_points(spec: StudySpec, best: dict[str, Result]) -> list[dict[str, Any]]:
    """The final stage's Ray configs (values of :data:`~trainables.schema.trial.FINAL_KEY`): each group's best sampled
    values with its seeds (:func:`seed_points`), groups in a stable order (so a resumed driver plans the same points)."""
    return [
        point
        for label in sorted(best)
        for point in seed_points(spec.final, label, sampled_values(_config(best[label])), result_trial_id(best[label]))
    ]


def seed_points(final: FinalSpec, label: str, sampled: dict[str, Any], source_trial: str) -> list[dict[str, Any]]:
    """One group's final points: its best configuration's ``sampled`` values with ``seed`` (and, with
    ``final.reseed_noise``, ``dataset.noise.seed``) set to ``final.seed_offset`` … ``final.seed_offset`` +
    ``final.seeds``-1 (the offset 0 where the spec has none: seeds 0 … ``final.seeds``-1, as every earlier run planned,
    so a resumed run plans the same points). Another offset draws other final seeds, which a benchmark that reruns a
    whole table needs; every group of a run gets the same seeds, so its arms stay paired."""
    offset = int(getattr(final, "seed_offset", 0))
    points = []
    for seed in range(offset, offset + final.seeds):
        params = {**sampled, "seed": seed}
        if final.reseed_noise:
            params[NOISE_SEED] = seed
        points.append({R.GROUP: label, R.SOURCE_TRIAL: source_trial, "params": params})
    return points


def point_key(point: dict[str, Any]) -> tuple[str, str, int]:
    """What identifies a final point: its group, the search trial it retrains and its seed."""
    return (str(point[R.GROUP]), str(point[R.SOURCE_TRIAL]), int(point["params"]["seed"]))


@dataclass
class FinalGroup:
    """One group's final-stage result: per test metric, the values over seeds and their summary."""

    label: str
    source_trial: str
    values: dict[str, list[float]] = field(default_factory=dict)
    fold_ensemble: dict[str, float] = field(default_factory=dict)
    #: Per test metric, seed → value (what pairs a seed across groups: a study's replicates).
    by_seed: dict[str, dict[int, float]] = field(default_factory=dict)

    @property
    def num_seeds(self) -> int:
        return max((len(v) for v in self.values.values()), default=0)

    def per_category(self) -> list[tuple[str, str, list[float]]]:
        """``(category, metric, values over seeds)`` of the per-category test metrics, sorted."""
        split = ((split_per_category(name), vals) for name, vals in self.values.items())
        return sorted((c[0], c[1], vals) for c, vals in split if c is not None)

    def summary(self) -> dict[str, float]:
        """``test/recall_at_1_mean``, ``..._std``, ``..._ci95_low``, ``..._ci95_high`` (:data:`~trainables.schema.record.
        SUMMARY_SUFFIXES`) for every test metric."""
        out: dict[str, float] = {}
        for name, vals in sorted(self.values.items()):
            if split_per_category(name) is not None:  # their own table: category_csv
                continue
            for suffix, value in zip(R.SUMMARY_SUFFIXES, t_interval(vals, bounds_of(name))):
                out[name + suffix] = value
        out.update({FOLD_ENSEMBLE_PREFIX + k: v for k, v in sorted(self.fold_ensemble.items())})
        return out


def summarize_final(spec: StudySpec, results: Results, best: dict[str, Result]) -> list[FinalGroup]:
    """Group the final trials that trained every epoch and collect their last ``test/`` metrics; attach the
    fold ensemble's test metrics of each group's best search trial (reported at its last epoch)."""
    groups = {
        label: FinalGroup(
            label,
            result_trial_id(r),
            fold_ensemble={
                k: float(v)
                for k, v in _metrics(r).items()
                if k.startswith(TEST_PREFIX) and isinstance(v, (int, float)) and spec.validation.kind == "kfold"
            },
        )
        for label, r in sorted(best.items())
    }
    for r in results_of(results):
        if r.error is not None or int(_metrics(r).get(EPOCH, 0)) < spec.train.epochs:
            continue
        group = groups.get(_config(r)[FINAL_KEY][R.GROUP])
        if group is None:
            continue
        seed = int(point_key(_config(r)[FINAL_KEY])[2])
        for key, value in _metrics(r).items():
            if key.startswith(TEST_PREFIX) and isinstance(value, (int, float)) and "/fold" not in key:
                group.values.setdefault(key, []).append(float(value))
                group.by_seed.setdefault(key, {})[seed] = float(value)
    return list(groups.values())


def summary_csv(groups: list[FinalGroup]) -> str:
    """One row per group and column per summary value, for the parent run's :data:`~trainables.schema.record.FINAL_SUMMARY_FILE`.

    Values are written exactly (shortest round-trip text): the dashboards show this file, so a 4-decimal cell must
    round the same number the study computed, not a 6-digit copy of it."""
    columns = sorted({k for g in groups for k in g.summary()})
    lines = [",".join([*R.FINAL_SUMMARY_KEY_COLUMNS, *columns])]
    for g in groups:
        s = g.summary()
        lines.append(
            ",".join(
                [f'"{g.label}"', g.source_trial, str(g.num_seeds), *(repr(float(s.get(c, math.nan))) for c in columns)]
            )
        )
    return "\n".join(lines) + "\n"


def category_csv(groups: list[FinalGroup]) -> str | None:
    """The parent run's :data:`~trainables.schema.record.FINAL_CATEGORY_FILE`: per group, category and metric the mean, std
    and t interval over the final seeds (values exact, as :func:`summary_csv`); ``None`` without categories."""
    lines = [",".join(R.FINAL_CATEGORY_COLUMNS)]
    for g in groups:
        for category, metric, vals in g.per_category():
            stats = ",".join(repr(float(v)) for v in t_interval(vals, bounds_of(metric)))
            lines.append(f'"{g.label}","{category}",{metric},{len(vals)},{stats}')
    return "\n".join(lines) + "\n" if len(lines) > 1 else None
