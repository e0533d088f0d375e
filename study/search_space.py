"""Search space (validated spec) → an Optuna define-by-run function and sampler.

Optuna's rules apply: both bounds inclusive, ``log`` needs ``low > 0`` and excludes ``step``. Conditional
parameters (``when:``) are sampled only when the earlier parameters they name took one of the listed values,
so Optuna sees them as genuinely conditional (TPE models them per branch). The function is a picklable
object because Ray checkpoints the searcher with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import optuna

if TYPE_CHECKING:
    from study.spec import ParamSpec, SamplerSpec

__all__ = ["DefineByRun", "to_optuna", "make_sampler", "condition_holds"]


def condition_holds(when: dict[str, Any] | None, values: dict[str, Any]) -> bool:
    """True when every parameter named in ``when`` was sampled with one of its listed values."""
    for name, allowed in (when or {}).items():
        allowed = allowed if isinstance(allowed, list) else [allowed]
        if name not in values or values[name] not in allowed:
            return False
    return True


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


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler without its end-of-grid ``study.stop()``.

    ``Study.stop`` only works inside ``Study.optimize``; Ray Tune asks and tells instead, and it ends the study
    after ``search.num_trials`` (the spec check keeps that within the grid).
    """

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        del study, trial, state, values


def make_sampler(spec: SamplerSpec, space: dict[str, ParamSpec] | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by ``search.sampler.type``, seeded with ``search.sampler.seed``.

    ``grid`` needs the (categorical) ``space``: it enumerates every combination of the choices.
    """
    samplers = optuna.samplers
    if spec.type == "grid":
        grid = {name: list(p.choices) for name, p in (space or {}).items()}  # type: ignore[union-attr]
        return _GridSampler(grid, seed=spec.seed)
    if spec.type == "tpe":
        return samplers.TPESampler(seed=spec.seed)
    if spec.type == "random":
        return samplers.RandomSampler(seed=spec.seed)
    if spec.type == "cmaes":
        return samplers.CmaEsSampler(seed=spec.seed, warn_independent_sampling=False)
    if spec.type == "gp":
        return samplers.GPSampler(seed=spec.seed)
    assert spec.type == "qmc", spec.type
    return samplers.QMCSampler(seed=spec.seed, scramble=True, warn_independent_sampling=False)
