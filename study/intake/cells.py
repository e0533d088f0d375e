"""A table spec (:mod:`trainables.schema.table`) → its plan: every arm × condition × replicate a cell, each a validated
:class:`~trainables.schema.spec.StudySpec`, and the table's own study spec (the ``base``: the shared settings under the
table's name, which the driver runs with the table's cells).

Every arm × condition becomes one cell; its spec is the table's shared sections with the arm's family, params and
search space and the condition written at its paths, validated by :func:`study.intake.spec_reader.parse_spec` (the
registry's names, the family's rules, every search-space name at both ends of its range), so a table is refused for
exactly what a study would be refused for, with one line naming the arm and cell. What a trial of a cell is given
besides the base spec is the cell's ``fixed`` values (family, condition, the arm's params) and its sampled ones: one
Ray Tune experiment then holds every cell's trials (:mod:`study.search.cell_search`).

With ``search.replicates: R`` every arm × condition is R cells, each a full search of its own with its own sampler
seed (:func:`study.intake.plan.replicate_seed`): replicate 0 is the table as it was (its labels, Optuna study names
and seeds), replicate r ≥ 1 is labelled ``<arm>.<condition>.r<r>`` (study ``<table>.<arm>.<condition>.r<r>``). Each is
a cell like any other for the driver, the status screen and the final stage; the report groups them back by
:attr:`~study.intake.plan.PlanCell.key`. With ``search.replicates: {min, max}`` the plan holds every replicate up to
``max``; the driver runs its :attr:`~study.intake.plan.StudyPlan.first_round` (``min`` each) and then one round at a
time while a comparison is open (:mod:`study.search.stages.rounds`).
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from study.final.sequential import SequentialPlan
from study.intake.plan import VIEW_CELLS, PlanCell, StudyPlan, replicate_seed
from study.intake.spec_reader import parse_spec
from study.tracking.credentials import redacted_spec
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.replicates import ReplicateRange, replicate_bounds
from trainables.schema.spec import StudySpec
from trainables.schema.table import TableSpec
from trainables.schema.trial import set_path, spec_error

__all__ = ["parse_table", "condition_label", "arm_sampler"]

#: Keys of a table spec that are not a study's.
_TABLE_ONLY = ("reference", "arms", "cells", "extra_cells", "verdict")
#: Keys of a table's ``search`` that its cells leave at their defaults (the table prices, bounds and replicates them).
_TABLE_SEARCH_ONLY = ("max_hours", "epoch_seconds", "replicates")


def _plan(spec: TableSpec, base: StudySpec, cells: tuple[PlanCell, ...]) -> StudyPlan:
    """The table as the one driver runs it: one cell per arm × condition × replicate, ``num_trials`` each, lost trials
    replaced (every cell keeps its budget), each cell's best retrained as its final group, a row per cell live.

    The lag is ``search.reproducible`` per cell: a cell's trial i is asked once its trials <= i − lag have ended
    (:mod:`study.search.ordered_sampler`). ``max_concurrent`` slots over n cells need at most ⌈c / n⌉ trials of one cell
    in flight, so a table of more cells than slots samples each trial from all its cell's earlier ones at no cost in
    idle slots (the dispatcher gives a free slot to a cell that may ask). Under ``halving`` the lag is the cell's
    budget (:meth:`~trainables.schema.scheduler.SchedulerSpec.lag`)."""
    s = spec.search
    written = redacted_spec(spec)  # type: ignore[arg-type]
    return StudyPlan(
        base=base,
        cells=cells,
        trials_per_cell=s.num_trials,
        lag=s.scheduler.lag(s.num_trials) or max(1, math.ceil(s.max_concurrent / len(cells))),
        replace_lost=True,
        groups_are_cells=True,
        view=VIEW_CELLS,
        search_share=s.scheduler.share(spec.train.epochs, s.num_trials),
        title=f"table {spec.name}",
        noun="table",
        reference=spec.arms[spec.reference].family,
        replicates=replicate_bounds(s.replicates)[1],
        grid=math.prod(len(v) for v in spec.cells.values()),
        max_hours=s.max_hours,
        epoch_seconds=s.epoch_seconds,
        written=written,
        sequential=SequentialPlan(s.replicates.min, s.replicates.max)
        if isinstance(s.replicates, ReplicateRange)
        else None,
        later=(),
    )


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


def parse_table(raw: Any, source: str = "table") -> StudyPlan:
    """Validate a table mapping and build its plan; :class:`SpecError` with one line naming ``source``."""
    try:
        spec = TableSpec.model_validate(raw)
    except ValidationError as e:
        raise spec_error(e).within(source) from None
    shared = {k: v for k, v in raw.items() if k not in _TABLE_ONLY and k != "search"}
    search = {k: v for k, v in (raw.get("search") or {}).items() if k not in _TABLE_SEARCH_ONLY}
    search.update(num_trials=spec.search.num_trials, max_concurrent=spec.search.max_concurrent)
    # Every arm's cells end alike (a table stays fair); a key at its zero or unset is not written, so an old table's
    # cells dump as before.
    final = {k: v for k, v in spec.final.model_dump().items() if v or k in ("seeds", "reseed_noise")}
    base_tree = {
        **shared,
        "family": spec.arms[spec.reference].family,
        "params": {},
        "search": {**search, "space": {}},
        "final": final,
    }
    sections = _Sections(shared, search, final)
    replicates = range(replicate_bounds(spec.search.replicates)[1])  # {min, max}: every replicate up to max
    cells = [_cell(spec, sections, point, r, source) for point in _conditions(spec, base_tree) for r in replicates]
    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        dup = next(label for label in labels if labels.count(label) > 1)
        raise SpecError(f"cell {dup!r} is listed twice (grid and extra_cells)", "extra_cells", source)
    base_tree["search"]["num_trials"] = len(cells) * spec.search.num_trials
    return _plan(spec, parse_spec(base_tree, source), tuple(cells))


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
    sets (the others at the shared value), so two cells of an arm never look alike to :meth:`study.intake.plan.StudyPlan.cell_of` (a trial asked before cells
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
    first glyphs table, docs/notebook/tables.md: its two one-parameter arms, PRISM and kNN rejection, drew the same 8
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
) -> PlanCell:
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
    key = f"{arm_name}.{condition_name}"
    label = R.replicate_label(key, replicate)
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
    return PlanCell(label, fixed, cell_spec, arm_name, key, condition, named, replicate)
