"""Search space (validated spec) → an Optuna define-by-run function and sampler.

Optuna's rules apply: both bounds inclusive, ``log`` needs ``low > 0`` and excludes ``step``. Conditional
parameters (``when:``) are sampled only when the earlier parameters they name took one of the listed values,
so Optuna sees them as genuinely conditional (TPE models them per branch). The function is a picklable
object because Ray checkpoints the searcher with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from study.runtime.compat import storage_trial_id, study_storage
from trainables.schema.grid import grid_points
from trainables.schema.space import condition_holds

if TYPE_CHECKING:
    from trainables.schema.spec import ParamSpec, SamplerSpec

__all__ = ["ConditionalGridSampler", "DefineByRun", "make_sampler", "to_optuna"]


def suggest(trial: optuna.Trial, name: str, param: ParamSpec) -> Any:
    if param.type == "float":
        return trial.suggest_float(name, param.low, param.high, log=param.log, step=param.step)
    if param.type == "int":
        return trial.suggest_int(name, param.low, param.high, log=param.log, step=param.step)
    return trial.suggest_categorical(name, param.choices)


class DefineByRun:
    """Callable Optuna define-by-run space: ``space(trial)`` suggests every active parameter."""

    def __init__(self, space: dict[str, ParamSpec]) -> None:
        self.space = dict(space)

    def __call__(self, trial: optuna.Trial) -> None:
        values: dict[str, Any] = {}
        for name, param in self.space.items():
            if condition_holds(param.when, values):
                values[name] = suggest(trial, name, param)


def to_optuna(space: dict[str, ParamSpec]) -> DefineByRun:
    return DefineByRun(space)


class ConditionalGridSampler(optuna.samplers.BaseSampler):
    """Visits the points of :func:`~trainables.schema.grid.grid_points` once each, in a seeded random order.

    Optuna's ``GridSampler`` takes a Cartesian product (no conditional parameters) and calls ``study.stop()``
    when the grid is exhausted, which only works inside ``Study.optimize``; Ray Tune asks and tells instead and
    ends the study after ``search.num_trials`` (the spec check keeps that within the grid). Each trial's point
    is stored as the system attribute ``grid_id``, so a resumed study (same RDB storage) skips the points its
    earlier trials took; a point whose trials all FAILED is offered again once no fresh point is left.
    """

    def __init__(self, space: dict[str, ParamSpec], seed: int | None = None) -> None:
        self.points = grid_points(space)
        self._order = np.random.default_rng(seed).permutation(len(self.points)).tolist()

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        taken: set[int] = set()
        failed: set[int] = set()
        for t in study.get_trials(deepcopy=False):
            if "grid_id" in t.system_attrs and t.number != trial.number:
                (failed if t.state == optuna.trial.TrialState.FAIL else taken).add(t.system_attrs["grid_id"])
        # Fresh points first; then points whose every trial failed (an orphan FAILed by a resume, a crash), so
        # a replacement trial re-runs that cell; past the end of the grid, points repeat in order.
        fresh = [i for i in self._order if i not in taken and i not in failed]
        retry = [i for i in self._order if i not in taken]
        grid_id = (fresh or retry or [self._order[trial.number % len(self._order)]])[0]
        study_storage(study).set_trial_system_attr(storage_trial_id(trial), "grid_id", grid_id)

    def sample_independent(self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any) -> Any:
        point = self.points[trial.system_attrs["grid_id"]]
        if param_name not in point:
            raise ValueError(f"grid sampler: {param_name!r} is not active at grid point {point}")
        return point[param_name]


def make_sampler(spec: SamplerSpec, space: dict[str, ParamSpec] | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by ``search.sampler.type``, seeded with ``search.sampler.seed``, with the spec's
    settings (``multivariate``, ``constant_liar``, ``n_startup_trials``) where the type takes them.

    ``grid`` needs the (categorical) ``space``: it visits every combination of the choices once.
    """
    samplers = optuna.samplers
    if spec.type == "grid":
        return ConditionalGridSampler(space or {}, seed=spec.seed)
    if spec.type == "tpe":
        # Every setting that decides the search is the spec's (trainables/schema/space.py), never the installed Optuna's default.
        return samplers.TPESampler(
            seed=spec.seed,
            multivariate=spec.multivariate,
            constant_liar=spec.constant_liar,
            n_startup_trials=spec.n_startup_trials,
        )
    if spec.type == "random":
        return samplers.RandomSampler(seed=spec.seed)
    if spec.type == "cmaes":
        return samplers.CmaEsSampler(seed=spec.seed, warn_independent_sampling=False)
    if spec.type == "gp":
        return samplers.GPSampler(seed=spec.seed, n_startup_trials=spec.n_startup_trials)
    assert spec.type == "qmc", spec.type
    return samplers.QMCSampler(seed=spec.seed, scramble=True, warn_independent_sampling=False)
