"""A table spec (:mod:`trainables.schema.table`) → its cells, each a validated :class:`~trainables.schema.spec.StudySpec`, and the table's
own study spec (the ``base``: the shared settings under the table's name, which ``study.run`` runs with the table's
search plan).

Every arm × condition becomes one cell; its spec is the table's shared sections with the arm's family, params and
search space and the condition written at its paths, validated by :func:`study.loading.parse_spec` (the registry's
names, the family's rules, every search-space name at both ends of its range), so a table is refused for exactly
what a study would be refused for, with one line naming the arm and cell. What a trial of a cell is given besides
the base spec is the cell's ``fixed`` values (family, condition, the arm's params) and its sampled ones: one Ray
Tune experiment then holds every cell's trials (:mod:`study.table.run`).

With ``search.replicates: R`` every arm × condition is R cells, each a full search of its own with its own sampler
seed (:func:`replicate_seed`): replicate 0 is the table as it was (its labels, Optuna study names and seeds), replicate
r ≥ 1 is labelled ``<arm>.<condition>.r<r>`` (study ``<table>.<arm>.<condition>.r<r>``). Each is a cell like any
other for the driver, the status screen and the final stage; the report groups them back by :attr:`TableCell.key`.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from study.loading import load_study, parse_spec, read_raw
from study.plan import (
    REPLICATE_SEED_STEP,
    VIEW_CELLS,
    PlanCell,
    StudyPlan,
    halving_lag,
    replicate_seed,
    search_cost,
    trial_model_epochs,
)
from study.search.calibration import Calibration
from study.table.asha_cost import asymptotic_share, halving_rule_rungs, milestones
from study.table.bill import Bill, Priced, assumed_bill, measured_bill
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.spec import StudySpec
from trainables.schema.table import TableSpec
from trainables.schema.trial import set_path, spec_error

__all__ = [
    "TableCell",
    "Table",
    "RunSpec",
    "is_table",
    "load_run",
    "load_table",
    "parse_table",
    "replicate_seed",
    "REPLICATE_SEED_STEP",
]

#: Keys of a table spec that are not a study's.
_TABLE_ONLY = ("reference", "arms", "cells", "extra_cells")
#: Keys of a table's ``search`` that its cells leave at their defaults (the table prices, bounds and replicates them).
_TABLE_SEARCH_ONLY = ("max_hours", "epoch_seconds", "replicates")


@dataclass(frozen=True)
class TableCell:
    """One arm on one condition: searched by its own Optuna study (``study_name``), retrained as group ``label``."""

    arm: str
    condition: dict[str, Any]
    #: What a trial of this cell sets over the base spec: ``family``, the condition's paths, the arm's params.
    fixed: dict[str, Any]
    #: The cell as a study (its search space, sampler, budget), validated like any spec.
    spec: StudySpec
    #: The condition keys this cell sets itself (the others are at the shared value): its label shows these.
    named: tuple[str, ...]
    #: Which of ``search.replicates`` independent searches of this arm × condition (0: the table's own).
    replicate: int = 0

    @property
    def key(self) -> str:
        """The arm × condition the cell searches, the same for all its replicates: ``bspml.p0.2``."""
        return f"{self.arm}.{condition_label({k: self.condition[k] for k in self.named})}"

    @property
    def label(self) -> str:
        """The cell's own name (its final group, its row on ``--status``): :attr:`key`, ``.r<r>`` for replicate r ≥ 1."""
        return self.key + (f".r{self.replicate}" if self.replicate else "")

    @property
    def study_name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Table:
    spec: TableSpec
    #: The table as one study: shared settings, the reference arm's family, no search space of its own.
    base: StudySpec
    cells: list[TableCell]

    def plan(self) -> StudyPlan:
        """The table as the one driver runs it: one cell per arm × condition, ``num_trials`` each, lost trials replaced
        (every cell keeps its budget), each cell's best retrained as its final group, a row per cell live."""
        return StudyPlan(
            base=self.base,
            cells=tuple(PlanCell(c.label, c.fixed, c.spec) for c in self.cells),
            trials_per_cell=self.spec.search.num_trials,
            lag=self.cell_lag,
            replace_lost=True,
            groups_are_cells=True,
            view=VIEW_CELLS,
            search_share=self.search_share(),
            title=f"table {self.spec.name}",
        )

    @property
    def replicates(self) -> int:
        """``search.replicates``: the searches per arm × condition; :attr:`cells` holds every replicate's cell, so
        :attr:`search_trials` and :attr:`final_runs` count them (R × the search, R × the final stage)."""
        return self.spec.search.replicates

    @property
    def reference_family(self) -> str:
        return self.spec.arms[self.spec.reference].family

    @property
    def search_trials(self) -> int:
        return len(self.cells) * self.spec.search.num_trials

    @property
    def cell_lag(self) -> int:
        """``search.reproducible`` per cell: a cell's trial i is asked once its trials <= i − lag have ended
        (:mod:`study.search.ordered_sampler`). ``max_concurrent`` slots over n cells need at most ⌈c / n⌉ trials of one
        cell in flight, so a table of more cells than slots samples each trial from all its cell's earlier ones at
        no cost in idle slots (the dispatcher gives a free slot to a cell that may ask). Under ``halving`` the lag is
        the cell's budget: a rung waits for every trial of its cell, so all are asked before any ends, each sampled
        from none of its cell's outcomes (:func:`study.plan.halving_lag`)."""
        s = self.spec.search
        return halving_lag(s.scheduler, s.num_trials) or max(1, math.ceil(s.max_concurrent / len(self.cells)))

    @property
    def final_runs(self) -> int:
        return len(self.cells) * self.spec.final.seeds

    def search_cost(self) -> float:
        """One search trial's training, in models trained on all training classes (:func:`study.plan.search_cost`)."""
        return search_cost(self.spec.validation)

    @property
    def trial_model_epochs(self) -> float:
        """One search trial run to the end, in models × epochs as a trial records its cost (k folds: k models)."""
        return trial_model_epochs(self.base)

    @property
    def scheduled(self) -> bool:
        """Whether the search stops trials early (``search.scheduler.type``: ``asha`` or ``halving``, per cell)."""
        return self.spec.search.scheduler.type != "fifo"

    def search_share(self) -> float:
        """The expected share of the search's model-epochs its trials train: 1 without a scheduler; with ASHA per
        cell, Ray's rule on a cell of ``num_trials`` trials (:func:`study.table.asha_cost.expected_share`); with
        halving, its exact share (:func:`study.table.asha_cost.halving_share`)."""
        return self.priced().share()

    def model_epochs(self, scheduled: bool | None = None) -> float:
        """The table's whole training, in model-epochs on all training classes; ``scheduled`` (default: whether the
        table has a scheduler) counts the search at its expected share under early stopping."""
        share = self.search_share() if (self.scheduled if scheduled is None else scheduled) else 1.0
        return (self.search_trials * self.search_cost() * share + self.final_runs) * self.spec.train.epochs

    def bill(self, calibration: Calibration | None = None) -> Bill | None:
        """The table's price per arm: measured (``calibration``), else the spec's assumed ``search.epoch_seconds``,
        else none (:mod:`study.table.bill`)."""
        if calibration is not None:
            return measured_bill(calibration, self.search_cost())
        if (seconds := self.spec.search.epoch_seconds) is not None:
            return assumed_bill(list(self.spec.arms), seconds, self.search_cost())
        return None

    def priced(self) -> Priced:
        """What the table's bill multiplies: its cells' arms, ``num_trials`` and ``final.seeds`` each."""
        s = self.spec
        return Priced(
            tuple(c.arm for c in self.cells),
            s.search.num_trials,
            s.final.seeds,
            s.train.epochs,
            s.search.max_concurrent,
            s.search.scheduler,
        )

    def stage_hours(self, bill: Bill, scheduled: bool | None = None) -> tuple[float, float]:
        """The search's and the final stage's hours on ``max_concurrent`` slots under ``bill``; ``scheduled`` as for
        :meth:`model_epochs`."""
        return self.priced().stage_hours(bill, scheduled)

    def estimated_hours(self, scheduled: bool | None = None, bill: Bill | None = None) -> float | None:
        """The whole table's hours on its slots under ``bill`` (default: the spec's assumed one; ``None``: no bill)."""
        bill = bill or self.bill()
        return None if bill is None else self.priced().hours(bill, scheduled)

    def _scheduler_text(self, bill: Bill | None = None) -> str:
        """``; with asha per cell (…): the search ≈ 45 % of its model-epochs …, 1 234 model-epochs in all, ≈ 5.1 h``;
        halving's share is exact (every rung keeps a fixed number of trials)."""
        sch, s = self.spec.search.scheduler, self.spec
        if sch.type == "halving":
            rungs = ", ".join(str(r) for r in halving_rule_rungs(s.train.epochs, sch.first_rung, sch.reduction_factor))
            text = (
                f"; with halving per cell (first rung {sch.first_rung}, η {sch.reduction_factor:g}, hedge {sch.hedge}, "
                f"rungs at epoch {rungs} of {s.train.epochs}): the search = {self.search_share():.0%} of its "
                f"model-epochs (exact for {s.search.num_trials} trials a cell), "
            )
        else:
            rungs = ", ".join(f"{m:g}" for m in milestones(s.train.epochs, sch.grace_period, sch.reduction_factor))
            asymptote = asymptotic_share(s.train.epochs, sch.grace_period, sch.reduction_factor)
            text = (
                f"; with asha per cell (grace {sch.grace_period}, η {sch.reduction_factor:g}, rungs at epoch {rungs} of "
                f"{s.train.epochs}): the search ≈ {self.search_share():.0%} of its model-epochs "
                f"(expected for {s.search.num_trials} trials a cell; {asymptote:.0%} for many), "
            )
        hours = self.estimated_hours(True, bill)
        return (
            text
            + f"{self.model_epochs(True):.0f} model-epochs in all"
            + ("" if hours is None else f", ≈ {hours:.1f} h")
        )

    def size_line(self, bill: Bill | None = None) -> str:
        """The table's size in one line, priced by ``bill`` (default: the spec's assumed ``epoch_seconds``, if any):
        FIFO's hours, then the scheduler's."""
        s, arms = self.spec, len(self.spec.arms)
        v = s.validation
        bill = bill or self.bill()
        models = {"kfold": f"{v.folds} folds", "holdout": "holdout"}.get(v.kind, "test selection")
        grid = math.prod(len(v) for v in s.cells.values())
        extra = len(self.cells) // self.replicates - arms * grid
        replicated = f" × {self.replicates} replicates" if self.replicates > 1 else ""
        line = (
            f"Table {s.name}: {arms} arms × {grid} cells{f' + {extra} extra' if extra else ''}{replicated} × "
            f"{s.search.num_trials} trials × {s.train.epochs} epochs = "
            f"{self.search_trials} search trials ({models}), then {len(self.cells)} × {s.final.seeds} final seeds = "
            f"{self.final_runs} final runs; {s.search.max_concurrent} at a time"
        )
        line += f"; every trial to the end (FIFO): {self.model_epochs(False):.0f} model-epochs"
        if bill is not None:
            line += (
                f", ≈ {self.estimated_hours(False, bill):.1f} h on {s.search.max_concurrent} slots {bill.unit_text()}"
            )
        if self.scheduled:
            line += self._scheduler_text(bill)
        sampler = s.search.sampler
        searched = any(arm.space for arm in s.arms.values())
        if searched and sampler.type in ("tpe", "gp") and s.search.num_trials <= sampler.n_startup_trials:
            line += (
                f"; every trial of a cell is the {sampler.type} sampler's random start-up "
                f"(search.sampler.n_startup_trials {sampler.n_startup_trials} ≥ {s.search.num_trials}): a random search"
            )
        return line

    def check_budget(self, bill: Bill | None = None) -> None:
        """Refuse, before anything starts, a table whose bill (measured, else assumed) exceeds ``search.max_hours``;
        the refusal names FIFO's bill and the cheaper scheduled one (the table's scheduler, else halving)."""
        self.priced().check(bill or self.bill(), self.spec.search.max_hours, "table")


def condition_label(condition: dict[str, Any]) -> str:
    """``p0.3``, ``per_class_p0.3``, ``clean_only_p0.3``: the condition's values, readably."""
    parts = []
    for key, value in condition.items():
        if key == "dataset.noise.ratio":
            parts.append(f"p{value:g}" if isinstance(value, (int, float)) else f"p{value}")
        elif key in ("dataset.noise.kind", "dataset.subset"):
            parts.append(str(value))
        else:
            parts.append(f"{key.rsplit('.', 1)[-1]}{value}")
    return re.sub(r"[^A-Za-z0-9_.-]", "-", "_".join(parts))


@dataclass(frozen=True)
class RunSpec:
    """What a spec file asks to run, decided once (:func:`load_run`): its plan (a study's one cell, a table's cells),
    and the table when it is one (its size, budget, cells' specs and comparison)."""

    plan: StudyPlan
    table: Table | None = None

    @property
    def base(self) -> StudySpec:
        """The run as one study: its name, stores, resources, training and final stage."""
        return self.plan.base

    @property
    def specs(self) -> list[StudySpec]:
        """Every spec the run holds: the base, then each cell's."""
        return [self.base, *(c.spec for c in self.plan.cells if c.spec is not self.base)]


def load_run(path: str | Path, overrides: list[str] | None = None, *, family_rules: bool = True) -> RunSpec:
    """The one place "study or table?" is decided, for every command (``study.run``, ``study.status``,
    ``dmlstudy slurm`` and ``kuberay``): a table spec (it names ``arms``) → its :class:`Table` and plan; a study spec
    file or a study's directory (:func:`study.loading.load_study`) → the one-cell plan of it
    (:meth:`study.plan.StudyPlan.of_study`). ``family_rules=False``: see :func:`study.loading.parse_spec`."""
    if "://" in str(path) or Path(path).is_dir():  # a study's directory, local or on an object store
        return RunSpec(StudyPlan.of_study(load_study(path, overrides, family_rules=family_rules)))
    raw = read_raw(path, overrides)
    if is_table(raw):
        table = parse_table(raw, str(path))
        return RunSpec(table.plan(), table)
    return RunSpec(StudyPlan.of_study(parse_spec(raw, str(path), family_rules=family_rules)))


def is_table(raw: Any) -> bool:
    """A raw spec mapping that describes a table (it names ``arms``)."""
    return isinstance(raw, dict) and "arms" in raw


def load_table(path: str | Path, overrides: list[str] | None = None) -> Table:
    return parse_table(read_raw(path, overrides), str(path))


def parse_table(raw: Any, source: str = "table") -> Table:
    """Validate a table mapping and build its cells; :class:`SpecError` with one line naming ``source``."""
    try:
        spec = TableSpec.model_validate(raw)
    except ValidationError as e:
        raise spec_error(e).within(source) from None
    shared = {k: v for k, v in raw.items() if k not in _TABLE_ONLY and k != "search"}
    search = {k: v for k, v in (raw.get("search") or {}).items() if k not in _TABLE_SEARCH_ONLY}
    search.update(num_trials=spec.search.num_trials, max_concurrent=spec.search.max_concurrent)
    final = {"seeds": spec.final.seeds, "reseed_noise": spec.final.reseed_noise}
    base_tree = {
        **shared,
        "family": spec.arms[spec.reference].family,
        "params": {},
        "search": {**search, "space": {}},
        "final": final,
    }
    sections = _Sections(shared, search, final)
    replicates = range(spec.search.replicates)
    cells = [_cell(spec, sections, point, r, source) for point in _conditions(spec, base_tree) for r in replicates]
    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        dup = next(label for label in labels if labels.count(label) > 1)
        raise SpecError(f"cell {dup!r} is listed twice (grid and extra_cells)", "extra_cells", source)
    base_tree["search"]["num_trials"] = len(cells) * spec.search.num_trials
    base = parse_spec(base_tree, source)
    return Table(spec, base, cells)


def _default(tree: dict[str, Any], key: str) -> Any:
    """The value at a dotted path of the shared spec, else the schema's default."""
    try:
        node: Any = StudySpec.model_validate({"name": "x", "family": "x", **tree}).model_dump(mode="json")
    except ValidationError as e:  # a shared value the table's own schema let through (storage: ftp://…): one line
        raise spec_error(e) from None
    for part in key.split("."):
        node = node[part]
    return node


def _conditions(spec: TableSpec, base_tree: dict[str, Any]) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """Every (arm, condition): the grid for every arm, then the extra cells. Each condition names every key any cell
    sets (the others at the shared value), so two cells of an arm never look alike to :meth:`study.plan.StudyPlan.cell_of` (a trial asked before cells
    were stamped is found by them)."""
    keys = list(spec.cells)
    for extra in spec.extra_cells:
        keys += [k for k in extra.set if k not in keys]
    shared = {k: v for k, v in base_tree.items() if k not in ("family", "params", "search", "final")}
    defaults = {k: _default(shared, k) for k in keys}
    grid = [dict(zip(spec.cells, values)) for values in itertools.product(*spec.cells.values())]
    out = [(arm, {**defaults, **point}, tuple(point)) for arm in spec.arms for point in grid]
    out += [(arm, {**defaults, **extra.set}, tuple(extra.set)) for extra in spec.extra_cells for arm in extra.arms]
    return out


def arm_sampler(spec: TableSpec, arm_name: str, replicate: int = 0) -> dict[str, Any]:
    """The sampler settings of an arm's cells: the table's, seeded per arm with ``search.sampler.seed`` + CRC-32 of the
    arm's name (mod 2³²); replicate r ≥ 1 of the arm's cells: that seed moved by :func:`replicate_seed`.

    Why per arm: with one seed every arm's random start-up draws the same quantiles of its ranges (measured on the
    first glyphs table, docs/tables.md: its two one-parameter arms, PRISM and kNN rejection, drew the same 8
    quantiles, 0.42–0.89 of their ranges, so neither ever tried the lower 42 %, PRISM's small memory weights
    included; every arm's first trial sat at 0.55 of its first range). One seed per arm makes those draws
    independent between arms, while the cells of an arm keep one seed: at every condition an arm
    starts from the same configurations, a paired design across the noise ratios. CRC-32, not ``hash``: Python
    salts ``hash`` per process, and a resumed or repeated table must draw the same."""
    sampler = spec.search.sampler.model_dump(mode="json")
    if sampler["seed"] is not None:
        sampler["seed"] = replicate_seed((sampler["seed"] + zlib.crc32(arm_name.encode())) % 2**32, replicate)
    return sampler


@dataclass(frozen=True)
class _Sections:
    """What every cell's spec shares: the table's shared sections, its search settings (no space), its final stage."""

    shared: dict[str, Any]
    search: dict[str, Any]
    final: dict[str, Any]


def _cell(
    spec: TableSpec,
    sections: _Sections,
    point: tuple[str, dict[str, Any], tuple[str, ...]],
    replicate: int,
    source: str,
) -> TableCell:
    """One (arm, condition, the condition keys it names) of :func:`_conditions`, replicate ``replicate``, as a
    validated cell."""
    arm_name, condition, named = point
    arm = spec.arms[arm_name]
    tree = copy.deepcopy(sections.shared)
    for key, value in condition.items():
        set_path(tree, tuple(key.split(".")), value, f"cells.{key}")
    for key, value in arm.params.items():  # an allowed training knob (trainables.schema.table), fixed for this arm
        if "." in key:
            set_path(tree, tuple(key.split(".")), value, f"arms.{arm_name}.params.{key}")
    condition_name = condition_label({k: condition[k] for k in named})
    label = R.replicate_label(f"{arm_name}.{condition_name}", replicate)
    tree.update(
        name=f"{spec.name}.{label}",
        family=arm.family,
        params={k: v for k, v in arm.params.items() if "." not in k},
        search={
            **sections.search,
            "sampler": arm_sampler(spec, arm_name, replicate),
            "space": {k: v.model_dump(mode="json") for k, v in arm.space.items()},
        },
        final=sections.final,
    )
    try:
        cell_spec = parse_spec(tree)
    except SpecError as e:
        where = f"arms.{arm_name} in cell {condition_name}"
        raise SpecError(e.message, f"{where}: {e.key}" if e.key else where, source) from None
    fixed = {"family": arm.family, **condition, **arm.params}
    return TableCell(arm_name, condition, fixed, cell_spec, named, replicate)
