"""The search space of a spec (``search:``): its parameters (float, int, categorical, each with an optional ``when:``
condition), the sampler, the scheduler (one of the kinds of :mod:`trainables.schema.scheduler`), and the rules Optuna's distributions need checked before a study starts.
Re-exported by :mod:`trainables.schema.spec`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from trainables.schema._strict import Seed, _Strict
from trainables.schema.metric_names import VAL_PREFIX, mean_last, recall_at
from trainables.schema.replicates import check_study_replicates
from trainables.schema.scheduler import SchedulerSpec
from trainables.schema.scheduler.halving import halving_rungs

__all__ = [
    "Mode",
    "FloatParam",
    "IntParam",
    "CategoricalParam",
    "ParamSpec",
    "SamplerSpec",
    "SchedulerSpec",
    "SearchSpec",
    "MeanLast",
    "SelectOn",
    "check_select_on",
    "check_mean_last",
    "objective_of",
    "condition_holds",
    "param_extremes",
    "halving_rungs",
]

#: Whether a larger (``max``) or a smaller (``min``) value of the search metric is better.
Mode = Literal["max", "min"]


def condition_holds(when: dict[str, Any] | None, values: dict[str, Any]) -> bool:
    """The one ``when:`` rule: every parameter named in ``when`` took one of its listed values (a single value
    means a list of one). Used by the sampler, the grid and the spec's range probing alike."""
    for name, allowed in (when or {}).items():
        allowed = allowed if isinstance(allowed, list) else [allowed]
        if name not in values or values[name] not in allowed:
            return False
    return True


class _ParamBase(_Strict):
    #: Sample this parameter only when each named (earlier) parameter took one of the given values.
    when: dict[str, Any] | None = None


class FloatParam(_ParamBase):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check_bounds(self) -> FloatParam:
        _check_numeric(self.low, self.high, self.log, self.step)
        return self


class IntParam(_ParamBase):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> IntParam:
        _check_numeric(self.low, self.high, self.log, self.step if self.step != 1 else None)
        return self


class CategoricalParam(_ParamBase):
    type: Literal["categorical"]
    choices: list[bool | int | float | str | None] = Field(min_length=1)


def _check_numeric(low: float, high: float, log: bool, step: float | None) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"low and high must be finite, but got {low=}, {high=}")
    if low > high:
        raise ValueError(f"low <= high must hold, but got {low=}, {high=}")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, but got {low=}")
    if log and step is not None:
        raise ValueError("log: true cannot be combined with step")


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


def param_extremes(param: FloatParam | IntParam | CategoricalParam) -> list[Any]:
    """The values a search-space entry reaches at its extremes: a categorical's choices, else ``[low, high]``."""
    return list(param.choices) if isinstance(param, CategoricalParam) else [param.low, param.high]


#: Sampler settings that only some sampler types take (the others refuse them when a spec sets them).
_SAMPLER_KEYS: dict[str, tuple[str, ...]] = {
    "multivariate": ("tpe",),
    "constant_liar": ("tpe",),
    "n_startup_trials": ("tpe", "gp"),
}


class SamplerSpec(_Strict):
    """The Optuna sampler, every setting that decides its search spelled out here rather than left to Optuna's
    defaults (Optuna 5.0 turned TPE's ``multivariate`` and ``constant_liar`` on by default: the same spec would have
    searched differently under 4.x and 5.x). The defaults are Optuna 4's TPE, under which every study recorded in
    docs/ ran."""

    #: ``grid`` enumerates every combination of the (categorical) space, e.g. family × noise ratio × seed.
    type: Literal["tpe", "random", "cmaes", "gp", "qmc", "grid"] = "tpe"
    seed: Seed | None = 0
    #: tpe: one joint Parzen estimator over the parameters (Falkner et al. 2018) instead of one per parameter.
    multivariate: bool = False
    #: tpe: running trials count as the worst value (fewer duplicate suggestions among concurrent trials).
    constant_liar: bool = False
    #: tpe, gp: trials sampled at random before the model takes over.
    n_startup_trials: int = Field(10, ge=0)

    @model_validator(mode="after")
    def _check_type_keys(self) -> SamplerSpec:
        for key, types in _SAMPLER_KEYS.items():
            # A dumped spec (spec.yaml, a trial's config) states every default: only a changed value is refused.
            if getattr(self, key) != type(self).model_fields[key].default and self.type not in types:
                raise ValueError(f"sampler.{key} applies to {' and '.join(types)} only, not to {self.type!r}")
        return self


class MeanLast(_Strict):
    """``search.select_on: {mean_last: k}``: a trial is ranked by the mean of its last ``k`` epochs' values of
    ``search.metric`` (fewer while it has trained fewer), not by its last value alone."""

    mean_last: int = Field(ge=2)


#: What ranks a trial: ``last``, its last epoch's value of ``search.metric``, or :class:`MeanLast`.
SelectOn = Literal["last"] | MeanLast


def check_select_on(value: Any) -> Any:
    """One line for a ``select_on`` that is neither form (pydantic's union would print two)."""
    if value == "last" or isinstance(value, MeanLast):
        return value
    k = value.get("mean_last") if isinstance(value, dict) and set(value) == {"mean_last"} else None
    if isinstance(k, int) and not isinstance(k, bool) and k >= 2:
        return value
    raise ValueError(
        f"got {value!r}; use last (a trial's last epoch) or {{mean_last: k}} with an integer k >= 2 (the mean of its "
        "last k epochs)"
    )


def objective_of(metric: str, select_on: SelectOn) -> str:
    """The name of what ranks a trial: ``metric`` itself under ``last``, else :func:`mean_last`'s name for it."""
    return metric if select_on == "last" else mean_last(select_on.mean_last, metric)


#: A study's ``search`` keys gained after studies were started (``replicates`` … a table had them alone at first;
#: ``select_on`` came later): their defaults are not dumped.
_STUDY_KEYS_ADDED_LATER = ("replicates", "max_hours", "epoch_seconds", "select_on")


class SearchSpec(_Strict):
    num_trials: int = Field(8, ge=1)
    max_concurrent: int = Field(1, ge=1)
    #: Default: ``val/recall_at_1`` (``test/recall_at_1`` with ``validation.kind: none``), filled in by StudySpec.
    metric: str = VAL_PREFIX + recall_at(1)
    mode: Mode = "max"
    #: What ranks a trial, for the searcher, the scheduler's rungs and the final stage's choice alike:
    #: ``last`` (its last epoch's ``metric``) or ``{mean_last: k}`` (the mean of its last k epochs' ``metric``, which
    #: evens out the epoch-to-epoch wobble of a small validation set). The trials report it as :attr:`objective`.
    select_on: SelectOn = "last"
    sampler: SamplerSpec = SamplerSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    space: dict[str, ParamSpec] = {}
    #: Trial *i* is sampled knowing the outcomes of trials 0 … i − ``max_concurrent`` only (the others are pending),
    #: so timing never changes the study (study/search/ordered_sampler.py). ``false``: the sampler sees whichever trials
    #: happen to have finished (no waiting, results depend on timing).
    reproducible: bool = True
    #: The search's own variance, as a table's (docs/notebook/tables.md): the study is searched ``replicates`` times, each with
    #: the full ``num_trials`` and its own sampler seed (``seed`` + r; replicate 0 is the study as it runs without), and
    #: each replicate's winner is retrained on the same final seeds (:meth:`study.intake.plan.StudyPlan.of_study`).
    replicates: int = Field(1, ge=1)
    #: Refuse a study whose bill exceeds this many hours on its ``max_concurrent`` slots: measured on this machine
    #: before it starts (study/search/calibration.py), or priced from ``epoch_seconds`` when set.
    max_hours: float | None = Field(None, gt=0)
    #: Optional override of the measured bill: seconds one model takes per epoch on all training classes; set, nothing
    #: is measured and the size line says "assumed".
    epoch_seconds: float | None = Field(None, gt=0)

    _select_on = field_validator("select_on", mode="before")(check_select_on)
    _replicates = field_validator("replicates", mode="before")(check_study_replicates)

    @property
    def objective(self) -> str:
        """The reported value that ranks a trial (:func:`objective_of`): ``metric`` under ``select_on: last``."""
        return objective_of(self.metric, self.select_on)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Keys gained after studies were started are dumped only when set: a study's saved spec.yaml and the
        # spec in its Ray experiment's param space, both written before, stay what this version writes (a resume
        # compares the one, Ray's Tuner.restore the keys of the other).
        data: dict[str, Any] = handler(self)
        for key in _STUDY_KEYS_ADDED_LATER:
            if getattr(self, key) == type(self).model_fields[key].default:
                data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _check_conditions(self) -> SearchSpec:
        seen: dict[str, Any] = {}
        for name, param in self.space.items():
            for other, values in (param.when or {}).items():
                if other not in seen:
                    raise ValueError(f"space.{name}.when refers to {other!r}, which is not an earlier parameter")
                allowed = values if isinstance(values, list) else [values]
                possible = seen[other]
                if possible is not None and not any(v in possible for v in allowed):
                    raise ValueError(f"space.{name}.when: {other} never takes {allowed}; choices are {possible}")
            seen[name] = param.choices if isinstance(param, CategoricalParam) else None
        return self


def check_mean_last(select_on: SelectOn, epochs: int) -> None:
    """``search.select_on: {mean_last: k}`` averages a trial's last k epochs: more than ``train.epochs`` would be
    named ``mean_last_k`` and average fewer; :class:`ValueError` with one line (for a study and a table alike)."""
    if isinstance(select_on, MeanLast) and select_on.mean_last > epochs:
        raise ValueError(
            f"search.select_on.mean_last {select_on.mean_last} must be at most train.epochs {epochs}: a trial has "
            f"only {epochs} epochs to average"
        )
