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
    from collections.abc import Callable

    from trainables.schema.spec import ParamSpec, SamplerSpec

__all__ = ["ConditionalGridSampler", "DefineByRun", "SAMPLERS", "make_sampler", "to_optuna"]


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


def _grid(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    return ConditionalGridSampler(space, seed=spec.seed)


def _tpe(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    # Every setting that decides the search is the spec's (trainables/schema/space.py), never the installed Optuna's
    # default.
    return optuna.samplers.TPESampler(
        seed=spec.seed,
        multivariate=spec.multivariate,
        constant_liar=spec.constant_liar,
        n_startup_trials=spec.n_startup_trials,
    )


def _random(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=spec.seed)


def _cmaes(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.CmaEsSampler(seed=spec.seed, warn_independent_sampling=False)


def _gp(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GPSampler(seed=spec.seed, n_startup_trials=spec.n_startup_trials)


def _qmc(spec: SamplerSpec, space: dict[str, ParamSpec]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.QMCSampler(seed=spec.seed, scramble=True, warn_independent_sampling=False)


#: ``search.sampler.type`` → its builder (the spec and the search space → the Optuna sampler). A new sampler is one
#: function here and its name in :class:`~trainables.schema.space.SamplerSpec`'s ``type``
#: (``tests/study/search/test_sampler_settings.py`` holds the two to the same names).
SAMPLERS: dict[str, Callable[[SamplerSpec, dict[str, ParamSpec]], optuna.samplers.BaseSampler]] = {
    "tpe": _tpe,
    "random": _random,
    "cmaes": _cmaes,
    "gp": _gp,
    "qmc": _qmc,
    "grid": _grid,
}


def make_sampler(spec: SamplerSpec, space: dict[str, ParamSpec] | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by ``search.sampler.type`` (:data:`SAMPLERS`), seeded with ``search.sampler.seed``,
    with the spec's settings (``multivariate``, ``constant_liar``, ``n_startup_trials``) where the type takes them.

    ``grid`` needs the (categorical) ``space``: it visits every combination of the choices once.
    """
    return SAMPLERS[spec.type](spec, space or {})
