"""A paper table as one study: arms (a family, its fixed params, its own search space) × cells (noise conditions),
every cell searched with the same budget, then retrained with the same final seeds (``python -m study.run
TABLE.yaml``; docs/notebook/tables.md).

What is shared by construction lives once at the top level (data, model, training, validation folds, final
seeds, resources, storage): an arm holds only ``family``, ``params`` and ``space``, and a cell only conditions
under ``dataset.noise`` and ``dataset.subset``. A key that would give one arm its own budget or folds is refused
with one line naming it. These models know no registry; :mod:`study.intake.cells` builds each cell's
:class:`~trainables.schema.spec.StudySpec` and validates it with the study's own rules.

What an arm may fix (``params``) or search (``space``) is an allow-list, so a setting added to the spec later is
refused per arm until someone decides it is fair: the family's own hyperparameters (bare names) and
:data:`ARM_TRAINING_KNOBS`, the optimiser's step size, weight decay and momentum. Those three decide how a method
uses the table's fixed budget of gradient steps, and the right values differ between losses (a loss's scale sets
its effective step size: Multi-Similarity's gradients are not a proxy loss's), so holding them equal would favour
the loss they were tuned for; the Reality Check's protocol lets each method tune them too. Everything else is the
cell's and the same for every arm: the budget (epochs, batches per epoch, the P×K batch), the data and its noise
(``dataset.*``), the model, the validation (``validation.*``: its folds, and ``labels: clean``, an oracle), the final
stage, seeds (``seed``), the optimiser's kind and the learning-rate schedule, resources and stores.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from trainables.schema._strict import Seed, _Strict
from trainables.schema.plain_text import PlainText
from trainables.schema.replicates import Replicates
from trainables.schema.space import Mode, ParamSpec, SamplerSpec, SchedulerSpec, SelectOn, check_select_on
from trainables.schema.spec import (
    DatasetSpec,
    DiagnosticsSpec,
    ModelSpec,
    RaceSpec,
    ResourcesSpec,
    TrackingSpec,
    TrainSpec,
    ValidationSpec,
    check_race,
    drop_unset_race,
)

__all__ = [
    "ArmSpec",
    "ExtraCell",
    "TableSearchSpec",
    "TableFinalSpec",
    "VerdictSpec",
    "TableSpec",
    "SHARED_KEYS",
    "CELL_KEYS",
    "ARM_TRAINING_KNOBS",
]

#: Sections every arm shares: an arm naming one would get its own budget, data, folds or seeds.
SHARED_KEYS = (
    "search",
    "num_trials",
    "max_concurrent",
    "sampler",
    "scheduler",
    "validation",
    "train",
    "dataset",
    "model",
    "final",
    "seed",
    "resources",
    "diagnostics",
)
#: Spec paths a cell may set (its condition); everything else is the same in every cell.
CELL_KEYS = ("dataset.noise.", "dataset.subset")
#: The dotted names an arm's ``params`` and ``space`` may hold besides its family's own (bare) names: the training
#: knobs a method may tune for itself (why these three: the module docstring). An allow-list: anything else is refused.
ARM_TRAINING_KNOBS = ("train.optimizer.lr", "train.optimizer.weight_decay", "train.optimizer.momentum")
#: Bare names that are no family parameter but a top-level key of a trial (trainables.schema.trial.param_path).
_TOP_LEVEL_NAMES = ("seed", "family")


class ArmSpec(_Strict):
    """One row of the table: a family with its fixed hyperparameters and its own search space (bare names are
    family params; a dotted name such as ``train.optimizer.lr`` is that path, searched per arm)."""

    family: str
    params: dict[str, Any] = {}
    space: dict[str, ParamSpec] = {}

    @model_validator(mode="before")
    @classmethod
    def _no_shared_keys(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            for key in raw:
                if key in SHARED_KEYS:
                    raise ValueError(
                        f"{key!r} cannot be set per arm: every arm shares the table's budget, data, model, training, "
                        f"folds and final seeds (set it once at the top level)"
                    )
        return raw

    @model_validator(mode="after")
    def _own_knobs_only(self) -> ArmSpec:
        for where, names in (("space", self.space), ("params", self.params)):
            for name in names:
                if name in ARM_TRAINING_KNOBS or ("." not in name and name not in _TOP_LEVEL_NAMES):
                    continue
                raise ValueError(
                    f"{where}: {name!r} is not an arm's to {'search' if where == 'space' else 'set'}: it is the "
                    "table's, the same for every arm (an arm names its family's parameters and "
                    f"{', '.join(ARM_TRAINING_KNOBS)} only)"
                )
        return self

    @model_validator(mode="after")
    def _fixed_or_searched(self) -> ArmSpec:
        both = sorted(set(self.params) & set(self.space))
        if both:
            raise ValueError(f"{both[0]!r} is both fixed (params) and searched (space)")
        return self


def _check_condition(condition: dict[str, Any], where: str) -> None:
    for key in condition:
        if not (key.startswith(CELL_KEYS[0]) or key == CELL_KEYS[1]):
            raise ValueError(
                f"{where}: {key!r} would make cells differ in more than their condition; a cell may set "
                "dataset.noise.* and dataset.subset only"
            )


class ExtraCell(_Strict):
    """A cell beyond the grid, for some arms only (e.g. the ``clean_only`` topline of ``ms``)."""

    arms: tuple[str, ...] = Field(min_length=1)
    set: dict[str, Any] = Field(min_length=1)

    @model_validator(mode="after")
    def _keys(self) -> ExtraCell:
        _check_condition(self.set, "extra_cells.set")
        return self


class TableSearchSpec(_Strict):
    """The search of every cell: ``num_trials`` is the budget *per cell*, the same for every arm."""

    num_trials: int = Field(8, ge=1)
    #: Trials of all cells running at once (they share the cluster).
    max_concurrent: int = Field(1, ge=1)
    #: Default: ``val/recall_at_1`` (``test/recall_at_1`` with ``validation.kind: none``).
    metric: str | None = None
    mode: Mode = "max"
    #: What ranks a cell's trials (``last`` or ``{mean_last: k}``: :attr:`trainables.schema.space.SearchSpec.select_on`),
    #: the same for every arm.
    select_on: SelectOn = "last"
    sampler: SamplerSpec = SamplerSpec()
    #: Each cell's trial *i* is sampled knowing the outcomes of the cell's trials 0 … i − lag only (lag: ⌈
    #: ``max_concurrent`` / cells⌉), so timing never changes what a cell samples (study/search/ordered_sampler.py).
    #: ``false``: each cell's sampler sees whichever of its trials happen to have finished.
    reproducible: bool = True
    #: Early stopping per cell (docs/notebook/tables.md): ``asha`` keeps separate rungs for every cell, so a trial is compared
    #: only with trials of its own cell, on the validation metric (study/search/cell_asha.py); ``halving`` ranks every
    #: trial of a cell at each rung (synchronous, study/search/halving.py). The same for every arm, and a trial it
    #: stops counts as a finished trial of its cell. Default ``fifo``: every trial runs to the end.
    scheduler: SchedulerSpec = SchedulerSpec()
    #: The search's own variance (docs/notebook/tables.md): each cell is searched ``replicates`` times, each replicate with the
    #: full per-cell budget and its own sampler seed (:func:`study.intake.plan.replicate_seed`; replicate 0 keeps the
    #: table's seeds, names and labels), and each replicate's winner is retrained on the same final seeds. ``{min: m,
    #: max: M}``: m replicates per cell, then one more per round while a comparison of the cell is open, up to M
    #: (:class:`~trainables.schema.replicates.ReplicateRange`, the sequential rule of study/final/sequential.py).
    replicates: Replicates = 1
    #: Refuse a table whose bill exceeds this many hours on its ``max_concurrent`` slots: the bill measured on this
    #: machine before the table starts (study/search/calibration.py), or priced from ``epoch_seconds`` when set.
    max_hours: float | None = Field(None, gt=0)
    #: Optional override of the measured bill: seconds one model takes per epoch on all training classes with
    #: ``resources`` (e.g. a previous study's ``epoch_time_s``); set, nothing is measured and the size line says
    #: "assumed".
    epoch_seconds: float | None = Field(None, gt=0)

    _select_on = field_validator("select_on", mode="before")(check_select_on)


class TableFinalSpec(_Strict):
    """Each cell's best configuration retrained with seeds 0 … ``seeds``−1 (``reseed_noise``: seed *s* draws the
    noise too, so every arm's seed *s* sees the same noisy labels and the differences are paired)."""

    seeds: int = Field(5, ge=1)
    reseed_noise: bool = True
    #: The finalist race before the final stage (:class:`~trainables.schema.spec.RaceSpec`): the same for every arm.
    race: RaceSpec | None = None
    #: The first final seed (:attr:`~trainables.schema.spec.FinalSpec.seed_offset`): seeds ``seed_offset`` …
    #: ``seed_offset + seeds - 1``, the same for every arm.
    seed_offset: int = Field(0, ge=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return drop_unset_race(handler(self))  # a table's table.yaml as it was written before the race existed


class VerdictSpec(_Strict):
    """How the table's report decides its comparisons (dashboards/compare/verdicts.py)."""

    #: The equivalence margin δ (in the primary metric's units): a comparison that is neither better nor worse and whose
    #: Holm interval lies inside ±δ is ``equivalent within ±δ``. Unset: no comparison is called equivalent.
    margin: float | None = Field(None, gt=0)


class TableSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=96)
    #: The arm every other is compared with (the comparison's reference family).
    reference: str
    arms: dict[str, ArmSpec] = Field(min_length=1)
    #: The grid of conditions: each dotted key's list of values, every combination a cell of every arm.
    cells: dict[str, list[Any]] = Field(min_length=1)
    extra_cells: list[ExtraCell] = []
    seed: Seed = 0
    dataset: DatasetSpec = DatasetSpec()
    model: ModelSpec = ModelSpec()
    train: TrainSpec = TrainSpec()
    search: TableSearchSpec = TableSearchSpec()
    validation: ValidationSpec = ValidationSpec()
    final: TableFinalSpec = TableFinalSpec()
    diagnostics: DiagnosticsSpec = DiagnosticsSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: PlainText = "runs"
    tracking: TrackingSpec = TrackingSpec()
    #: The report's verdicts (``verdict.margin``); read by the report only, never by a cell.
    verdict: VerdictSpec | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("verdict") is None:  # a table's table.yaml as it was written before verdicts existed
            data.pop("verdict", None)
        return data

    @model_validator(mode="after")
    def _check(self) -> TableSpec:
        for name in self.arms:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"arms: {name!r}: an arm name is letters, digits, '_' and '-'")
        if self.reference not in self.arms:
            raise ValueError(f"reference {self.reference!r} is not an arm; arms: {', '.join(self.arms)}")
        families = [a.family for a in self.arms.values()]
        twice = sorted({f for f in families if families.count(f) > 1})
        if twice:
            raise ValueError(
                f"arms: family {twice[0]!r} is in two arms; the comparison's rows are families, so a table holds "
                "each family once"
            )
        _check_condition(self.cells, "cells")
        self.search.scheduler.check_table(self.train.epochs, self.search.num_trials, self.validation.enabled)
        check_race(self.final.race, self.final.seeds, self.search.num_trials, self.validation.enabled)
        for key, values in self.cells.items():
            if not values or len(values) != len({repr(v) for v in values}):
                raise ValueError(f"cells.{key}: a non-empty list of distinct values")
        for extra in self.extra_cells:
            unknown = [a for a in extra.arms if a not in self.arms]
            if unknown:
                raise ValueError(f"extra_cells: {unknown[0]!r} is not an arm")
        return self
