"""The plan of a run: what the one driver (:func:`study.search.driver.run_study`) searches, decided once at intake.

A study is a table of one cell. A study spec becomes :meth:`StudyPlan.of_study`, the one-arm, one-cell case; a table
spec becomes its own plan (:func:`study.intake.cells.parse_table`, one cell per arm × condition). From the plan the driver
builds one search Tuner: one dispatching searcher over the cells' Optuna studies
(:class:`~study.search.cell_search.CellSearch`), one scheduler with rungs per cell
(:class:`~study.search.cell_asha.CellASHA`), one progress view, and the final stage's grouping. Nothing downstream asks
"study or table?" again: what differs is data here (the cells, their budget and lag, whether a lost trial is replaced,
what a final group is, which live view suits the run).

Each search trial carries its cell's label in its config (:data:`~trainables.schema.trial.CELL_KEY`, stamped by the
searcher when it asks), so the scheduler, the progress view and the final stage read it; only a trial asked before
cells were stamped (a run started then and resumed now) is found by its cell's fixed values instead (:meth:`StudyPlan.cell_of`).

Pure data over validated specs: no Ray, no stores (the command line builds a plan before anything starts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from study.final.sequential import SequentialPlan
from trainables.schema import record as R
from trainables.schema.grid import grid_points
from trainables.schema.space import CategoricalParam, FloatParam, IntParam, SearchSpec
from trainables.schema.spec import StudySpec, ValidationSpec
from trainables.schema.trial import CELL_KEY, FINAL_KEY

__all__ = [
    "PlanCell",
    "StudyPlan",
    "VIEW_TRIALS",
    "VIEW_CELLS",
    "group_count",
    "search_cost",
    "trial_model_epochs",
    "replicate_seed",
    "REPLICATE_SEED_STEP",
]

#: The live view of a run: one row per trial (a study), or one row per cell (a table).
VIEW_TRIALS, VIEW_CELLS = "trials", "cells"

#: Replicate r's sampler seed is the arm's + r × this, mod 2³² (:func:`replicate_seed`): 1, so replicate r of a table
#: is the table run with ``search.sampler.seed`` + r, which anyone can rerun as a plain table (R = 3 at seed 0 is the
#: three searches at seeds 0, 1 and 2 of the replicates' first measurement, docs/notebook/tables.md); no two replicates of an arm share a seed.
REPLICATE_SEED_STEP = 1


def replicate_seed(seed: int, replicate: int) -> int:
    """Replicate ``replicate``'s sampler seed from its arm's ``seed``: ``(seed + replicate × REPLICATE_SEED_STEP) mod
    2³²``; replicate 0 keeps ``seed`` exactly (an existing table or study resumes and reruns unchanged). A study's
    replicate r is the study at ``search.sampler.seed`` + r. Since the arm's seed is
    the table's + CRC-32 of its name (:func:`study.intake.cells.arm_sampler`), replicate r of every arm is the table as it would run with
    ``search.sampler.seed`` + r: replicate r of the whole table is one complete table, the one at that seed."""
    return (seed + replicate * REPLICATE_SEED_STEP) % 2**32


#: The most points :func:`group_count` enumerates; a larger space is counted as one group per trial.
_MAX_GROUP_POINTS = 10_000


def group_count(search: SearchSpec, group_by: tuple[str, ...]) -> int:
    """How many ``final.group_by`` groups one search can form, each retrained by the final stage (and raced): the
    distinct values of the ``group_by`` entries over the search space, as the final stage labels a trial
    (:func:`study.final.stage.group_label`: an entry its ``when:`` left out counts as ``None``), at most
    ``num_trials`` (a group needs a trial). An upper bound: a search that samples fewer combinations forms fewer.
    1 without ``group_by``; an entry of unbounded values (a float range without ``step``) leaves the trials' bound."""
    if not group_by:
        return 1
    space = search.space
    needed = set(group_by)
    for name in reversed(list(space)):  # ``when:`` names earlier entries only: one backward pass closes the set
        if name in needed:
            needed.update(space[name].when or {})
    finite = {name: _as_categorical(space[name]) for name in space if name in needed}
    sizes = [len(p.choices) if p is not None else math.inf for p in finite.values()]
    if math.prod(sizes) > _MAX_GROUP_POINTS:
        return search.num_trials
    points = grid_points({name: p for name, p in finite.items() if p is not None})
    return min(len({tuple(point.get(name) for name in group_by) for point in points}), search.num_trials)


def _as_categorical(param: FloatParam | IntParam | CategoricalParam) -> CategoricalParam | None:
    """A search-space entry as the finite list of values it can take (``when:`` kept); ``None`` for a float range
    without ``step`` or a range of more than :data:`_MAX_GROUP_POINTS` values."""
    if isinstance(param, CategoricalParam):
        return param
    step = param.step
    if step is None or (param.high - param.low) / step >= _MAX_GROUP_POINTS:
        return None
    values = [param.low + i * step for i in range(math.floor((param.high - param.low) / step + 1e-9) + 1)]
    return CategoricalParam(type="categorical", choices=values, when=param.when)


def search_cost(validation: ValidationSpec) -> float:
    """One search trial's training, in models trained on all training classes (k folds train k models on (k−1)/k of
    the classes each; a holdout one on 1 − fraction): the unit a study's and a table's costs are counted in."""
    v = validation
    return float(v.folds - 1) if v.kind == "kfold" else (1.0 - v.fraction if v.kind == "holdout" else 1.0)


def replicate_spec(spec: StudySpec, replicate: int) -> StudySpec:
    """Replicate ``replicate`` of a study as one search: named ``<name>.r<r>`` (replicate 0: the study's own name), at
    sampler seed + r (an unseeded sampler stays unseeded), one replicate."""
    s = spec.search
    seed = s.sampler.seed if s.sampler.seed is None else replicate_seed(s.sampler.seed, replicate)
    search = s.model_copy(update={"replicates": 1, "sampler": s.sampler.model_copy(update={"seed": seed})})
    return spec.model_copy(update={"name": R.replicate_label(spec.name, replicate), "search": search})


def trial_model_epochs(spec: StudySpec) -> float:
    """One search trial run to the end, in models × epochs as a trial records its cost (k folds: k models)."""
    v = spec.validation
    return float((v.folds if v.kind == "kfold" else 1) * spec.train.epochs)


@dataclass(frozen=True)
class PlanCell:
    """One cell: searched by its own Optuna study (``spec.name``); ``fixed`` is what each of its trials sets over the
    run's base spec besides the sampled values (a table's family, condition and arm params; nothing for a study).

    A table's cell is one arm on one condition, replicate ``replicate`` of its search; a study's cell is its one arm
    (its family) on its one condition (none), replicate ``replicate``. An older study's ``tuner.pkl`` holds plans only
    inside callbacks a restored driver drops unread (:mod:`study.runtime.shells`): no field needs a default for it."""

    label: str
    fixed: dict[str, Any]
    #: The cell as a study: its search space, sampler and budget, validated like any spec.
    spec: StudySpec
    #: The arm the cell searches: a table's arm name; a study's family.
    arm: str
    #: The arm × condition, the same for all its replicates (``bspml.p0.2``; a study's name): :attr:`label` is this,
    #: ``.r<r>`` for replicate r ≥ 1.
    key: str
    #: The values the condition sets at their dotted paths (every key any cell of the table sets; none for a study).
    condition: dict[str, Any]
    #: The condition keys this cell sets itself (the others are at the shared value): its label shows these.
    named: tuple[str, ...]
    #: Which of ``search.replicates`` independent searches of this arm × condition (0: the spec's own).
    replicate: int

    @property
    def study_name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class StudyPlan:
    """What one run searches and how its trials group.

    Args:
        base: the run as one study (its name, stores, resources, training, metric, ``max_concurrent``, final seeds).
        cells: the cells, in the order the dispatcher breaks ties.
        trials_per_cell: each cell's budget of evaluated trials.
        lag: ``search.reproducible``: a cell's trial i is asked once its trials <= i − lag have ended.
        replace_lost: a trial lost for a reason outside its configuration (node lost, retries spent) is replaced
            within its cell's bound (a table keeps every cell's budget, :mod:`study.search.cell_search`); a study's
            contract is ``num_trials`` trials, failed ones included.
        groups_are_cells: the final stage retrains each cell's best (a table), else each ``final.group_by`` group of
            the one cell (a study).
        view: the live view, :data:`VIEW_TRIALS` or :data:`VIEW_CELLS`.
        search_share: the share of the search's model-epochs its trials are expected to train (early stopping), for
            the live view's ETA.
        title: how the run names itself in the live view (``table NAME``).
        noun: what the run calls itself in its lines (``study``, ``table``).
        reference: the family the comparison is against (a table's reference arm's; a study's own).
        replicates: ``search.replicates``, the searches per arm × condition (every one is a cell).
        grid: the conditions of the grid every arm runs (a table's extra cells are the keys beyond arms × grid).
        max_hours: ``search.max_hours``, the run's bound on its bill (:mod:`study.bill`).
        epoch_seconds: ``search.epoch_seconds``, the bill the spec assumes.
        written: the spec as written, where it is not the base (a table's, kept as ``table.yaml`` and held to on
            ``--resume``); empty for a study, whose ``spec.yaml`` is the base.
        sequential: a table's ``search.replicates: {min, max}`` (:mod:`study.final.sequential`): :attr:`cells` holds
            every replicate up to ``max`` (the most the table can run), :attr:`first_round` the ``min`` it runs first.
        later: on a first round's plan, the cells a later round may add (replicates ``min`` … ``max − 1``).

    No field has a default for an older pickle's sake (see :class:`PlanCell`).
    """

    base: StudySpec
    cells: tuple[PlanCell, ...]
    trials_per_cell: int
    lag: int
    replace_lost: bool
    groups_are_cells: bool
    view: str
    search_share: float
    title: str
    noun: str
    reference: str
    replicates: int
    grid: int
    max_hours: float | None
    epoch_seconds: float | None
    written: dict[str, Any]
    sequential: SequentialPlan | None
    later: tuple[PlanCell, ...]

    @classmethod
    def of_study(cls, spec: StudySpec) -> StudyPlan:
        """A study: one cell, its own Optuna study (named as the study), ``num_trials`` trials asked ``max_concurrent``
        apart (:mod:`study.search.ordered_sampler`), its final groups by ``final.group_by``.

        With ``search.replicates`` R > 1 it is R cells, as a table's arm × condition is: replicate r is the study at
        sampler seed + r (:func:`replicate_seed`), its Optuna study and cell ``<name>.r<r>`` (replicate 0 keeps the
        study's own name), ``num_trials`` each; each replicate's winner is retrained on the same final seeds (its
        final group is its cell), and the live view has a row per replicate. The base stays the study's spec as written
        (its directory's ``spec.yaml``, which ``--resume`` reads back): :attr:`search_trials` counts all R."""
        s = spec.search
        replicates = s.replicates
        # One replicate: the spec itself, so :attr:`specs` tells the base by identity.
        specs = [replicate_spec(spec, i) for i in range(replicates)] if replicates > 1 else [spec]
        cells = tuple(
            PlanCell(c.name, {}, c, arm=spec.family, key=spec.name, condition={}, named=(), replicate=i)
            for i, c in enumerate(specs)
        )
        return cls(
            base=spec,
            cells=cells,
            trials_per_cell=s.num_trials,
            lag=s.scheduler.lag(s.num_trials) or max(1, math.ceil(s.max_concurrent / replicates)),
            replace_lost=False,
            groups_are_cells=replicates > 1,
            view=VIEW_CELLS if replicates > 1 else VIEW_TRIALS,
            title=f"study {spec.name}" + (f" × {replicates} replicates" if replicates > 1 else ""),
            noun="study",
            search_share=s.scheduler.share(spec.train.epochs, s.num_trials),
            reference=spec.family,
            replicates=replicates,
            grid=1,
            max_hours=s.max_hours,
            epoch_seconds=s.epoch_seconds,
            written={},  # a study's spec.yaml is its base
            sequential=None,
            later=(),
        )

    @property
    def specs(self) -> list[StudySpec]:
        """Every spec the run holds: the base, then each cell's."""
        return [self.base, *(c.spec for c in self.cells if c.spec is not self.base)]

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms, in the cells' order: a table's arm names; a study's family."""
        return tuple(dict.fromkeys(c.arm for c in self.cells))

    @property
    def keys(self) -> tuple[str, ...]:
        """The arm × condition searches, each once however many replicates it has."""
        return tuple(dict.fromkeys(c.key for c in self.cells))

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def scheduled(self) -> bool:
        """Whether the search stops trials early (its scheduler kind's :attr:`stops_early`: ``asha``, ``halving``)."""
        return self.base.search.scheduler.stops_early

    @property
    def trial_model_epochs(self) -> float:
        """One search trial run to the end, in models × epochs as a trial records its cost (k folds: k models)."""
        return trial_model_epochs(self.base)

    @property
    def search_trials(self) -> int:
        return len(self.cells) * self.trials_per_cell

    @property
    def groups_per_cell(self) -> int:
        """The final stage's groups in one cell's search: 1 where the groups are the cells (a table, replicates),
        else the ``final.group_by`` groups the search can form (:func:`group_count`)."""
        return 1 if self.groups_are_cells else group_count(self.base.search, self.base.final.group_by)

    @property
    def finals_per_cell(self) -> int:
        """Final runs per cell: each of its groups' best retrained on ``final.seeds`` seeds."""
        return self.groups_per_cell * self.base.final.seeds

    @property
    def final_runs(self) -> int:
        return len(self.cells) * self.finals_per_cell

    @property
    def later_runs(self) -> tuple[tuple[str, int, bool], ...]:
        """The runs of the stages after the search, in run order, each ``(stage tag, runs, trained as search trials)``:
        a finalist race's (validation only), then the final stage's; a stage that runs nothing is left out."""
        runs = ((R.STAGE_RACE, self.race_runs, True), (R.STAGE_FINAL, self.final_runs, False))
        return tuple(r for r in runs if r[1])

    @property
    def final_unit(self) -> str:
        """What the final stage retrains (and a race races) the best of: ``cell``, or ``group`` (``final.group_by``)."""
        return "cell" if self.groups_are_cells or not self.base.final.group_by else "group"

    @property
    def race_per_cell(self) -> int:
        """Race runs per cell (``final.race``; 0 without a race), each a search trial to the end: each group's
        ``finalists`` best trials (fewer where the group has fewer candidates: the trials that trained every epoch, or
        all its trials where none did) × ``seeds``. Over a cell's groups that is at most ``groups × finalists`` and at
        most its trials; with one group, at most the trials its scheduler lets train every epoch (halving: exactly
        its last rung's survivors)."""
        race = self.base.final.race
        if race is None:
            return 0
        groups, b = self.groups_per_cell, self.base
        full = b.search.scheduler.full_trials(b.train.epochs, self.trials_per_cell)
        return min(groups * race.finalists, full if groups == 1 else self.trials_per_cell) * race.seeds

    @property
    def race_runs(self) -> int:
        return len(self.cells) * self.race_per_cell

    def search_cost(self) -> float:
        """One search trial's training, in models trained on all training classes (:func:`search_cost`)."""
        return search_cost(self.base.validation)

    @property
    def final_with_search(self) -> bool:
        """Each cell's final seeds start as soon as its search ends, in the search's experiment
        (:class:`~study.search.cell_search.CellSearch`): a table's groups are its cells, each known once its own
        trials have ended. A study's ``final.group_by`` groups share one search, which ends all at once. With a finalist
        race (``final.race``) the final seeds wait for the race, its own stage after the search."""
        return self.groups_are_cells and self.base.final.seeds > 0 and self.base.final.race is None

    def cell_of(self, config: dict[str, Any]) -> PlanCell | None:
        """The cell of a search trial's config: the one its stamp names; a trial asked before cells were stamped
        (resumed from then) by the fixed values it carries. A final trial (in the search's experiment) has none."""
        if FINAL_KEY in config:
            return None
        label = config.get(CELL_KEY)
        if label is not None:
            return next((c for c in self.cells if c.label == label), None)
        return next((c for c in self.cells if all(config.get(k) == v for k, v in c.fixed.items())), None)

    def group(self, config: dict[str, Any]) -> str | None:
        """The final-stage group of a search trial when groups are cells: its cell's label."""
        cell = self.cell_of(config)
        return None if cell is None else cell.label

    @property
    def every_cell(self) -> tuple[PlanCell, ...]:
        """The cells this plan runs and those a later round may add (a first round's :attr:`later`)."""
        return self.cells + self.later

    @property
    def first_round(self) -> StudyPlan:
        """What the driver runs first: with ``search.replicates: {min, max}`` the ``min`` replicates of every cell
        (the rest held as :attr:`later`), else the plan itself."""
        if self.sequential is None:
            return self
        first = [c for c in self.cells if c.replicate < self.sequential.min]
        later = tuple(c for c in self.cells if c.replicate >= self.sequential.min) + self.later
        return replace(self.round_of(first), sequential=self.sequential, later=later)

    def round_of(self, cells: list[PlanCell]) -> StudyPlan:
        """A round of ``cells`` as a plan of its own (no later rounds): its lag from its own cells, as
        :func:`study.intake.cells.parse_table` computes a table's (the scheduler's, else ⌈max_concurrent / cells⌉)."""
        s = self.base.search
        lag = s.scheduler.lag(self.trials_per_cell) or max(1, math.ceil(s.max_concurrent / max(1, len(cells))))
        return replace(self, cells=tuple(cells), lag=lag, sequential=None, later=())

    @property
    def at_most(self) -> StudyPlan:
        """The plan at its most: every replicate of every cell (the plan itself without ``{min, max}``)."""
        return replace(self, cells=self.every_cell, later=())

    @property
    def at_least(self) -> StudyPlan:
        """The plan at its least: ``min`` replicates of every cell (the plan itself without ``{min, max}``)."""
        return replace(self.first_round, later=())

    @property
    def comparisons(self) -> dict[str, tuple[str, str]]:
        """A table's comparisons as its report makes them (:func:`dashboards.compare.cells.reference_cell`): every
        arm × condition (its :attr:`PlanCell.key`, the comparison's name) against the reference arm's on the same
        noise and the full training set (at noise 0: the reference's clean cell), as (arm key, reference key); a
        study has none."""
        if not self.groups_are_cells or self.noun != "table":
            return {}
        firsts = [c for c in self.every_cell if c.replicate == 0]
        ours = [c for c in firsts if c.spec.family == self.reference]
        out: dict[str, tuple[str, str]] = {}
        for cell in firsts:
            noise = _noise(cell)
            ref = next((c for c in ours if _noise(c) == noise and c.spec.dataset.subset == "all"), None)
            if ref is not None and ref.key != cell.key:
                out[cell.key] = (cell.key, ref.key)
        return out


def _noise(cell: PlanCell) -> tuple[str, float]:
    """A cell's noise as the report's columns name it: at ratio 0 the kind means nothing (one clean column)."""
    noise = cell.spec.dataset.noise
    return (noise.kind if noise.ratio > 0 else "none", noise.ratio)
