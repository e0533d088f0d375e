"""``python -m study.run TABLE.yaml``: a paper table as one study (docs/tables.md).

A table is the one driver (:func:`study.search.driver.run_study`) on the table's plan
(:meth:`study.table.spec.Table.plan`): every arm × condition cell is searched by its own Optuna study
(``<table>.<arm>.<condition>`` in the table's Optuna storage) with ``search.num_trials`` trials, all cells' trials in
**one** Ray Tune experiment whose searcher dispatches to the cells (:class:`study.search.cell_search.CellSearch`; why
one experiment: that module's docstring), so they share the cluster under the table's ``max_concurrent`` and the table
resumes as a whole at trial granularity. Then each cell's best configuration (:func:`study.final.best.pick_best`) is
retrained with the final seeds (noise reseeded per seed: the arms are paired) by the final stage, as one group per
cell. What is the table's own is here: its spec file beside the study's, kept across resumes. The comparison table is
rendered by :mod:`dashboards.table_report`.

Files beside a study's (:mod:`study.layout`): ``table.yaml`` (the table spec it was started with; a resume refuses
another), ``spec.yaml`` (its base spec, so ``dashboards.compare.cli`` reads the directory like any study's).
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from study.layout import StudyLayout
from study.runtime.storage import read_bytes, write_bytes
from study.search.context import RunOptions
from study.search.driver import StudyOutcome, run_study
from study.search.resume import OPERATIONAL_KEYS
from study.table.spec import RunSpec, Table
from study.tracking.credentials import redacted_spec
from study.tracking.preflight import preflight_stores
from trainables.schema.errors import StudyExistsError
from trainables.schema.space import SchedulerSpec
from trainables.schema.trial import flatten

__all__ = ["run_plan", "run_table"]


def _table_text(table: Table) -> bytes:
    return yaml.safe_dump(redacted_spec(table.spec), sort_keys=False).encode()  # type: ignore[arg-type]


def _check_saved_table(table: Table, layout: StudyLayout, resume: bool) -> None:
    """A resumed table keeps the spec it was started with, except what says how to run it, not what it is (as a
    study's resume: :data:`study.search.resume.OPERATIONAL_KEYS`, e.g. ``tracking.outage_budget_s``)."""
    saved = read_bytes(layout.table_file)
    if not resume or saved is None:
        return
    # A table started before tables took a scheduler saved none: it ran FIFO, today's default; one started before
    # replicates saved none: it searched each cell once, today's default.
    before = flatten({"search": {"scheduler": SchedulerSpec().model_dump(mode="json"), "replicates": 1}})
    old = {**before, **flatten(yaml.safe_load(saved) or {})}
    new = flatten(yaml.safe_load(_table_text(table)))
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in OPERATIONAL_KEYS)
    if changed:
        raise StudyExistsError(
            f"--resume: the table differs from the one {table.spec.name!r} was started with at "
            f"{', '.join(changed[:5])}; a resumed table must keep its spec"
        )


def run_table(
    table: Table, *, options: RunOptions | None = None, on_start: Callable[[], None] | None = None
) -> StudyOutcome:
    """Run (or resume) the table to its final stage; raises :class:`~trainables.schema.errors.StudyError` before anything is
    written for bad input, a budget over ``search.max_hours``, or a resumed table whose spec changed."""
    options = RunOptions() if options is None else options
    table.check_budget()
    layout = StudyLayout.for_spec(table.base)
    # The study's pre-flight of its stores (run_study repeats it: cheap, and idempotent), before the table reads its
    # own file there: an unreachable bucket or server is one line and exit 2, as for a study.
    preflight_stores(layout, table.base.name)
    _check_saved_table(table, layout, options.resume)

    def started() -> None:
        if on_start is not None:
            on_start()
        layout.mkdir()
        if read_bytes(layout.table_file) is None:
            write_bytes(layout.table_file, _table_text(table))

    return run_study(table.base, options=options, on_start=started, plan=table.plan())


def run_plan(
    target: RunSpec, *, options: RunOptions | None = None, on_start: Callable[[], None] | None = None
) -> StudyOutcome:
    """Run (or resume) what :func:`study.table.spec.load_run` read: a table with its own file kept beside the study's
    (:func:`run_table`), a study as the one-cell plan it is."""
    if target.table is not None:
        return run_table(target.table, options=options, on_start=on_start)
    return run_study(target.base, options=options, on_start=on_start, plan=target.plan)
