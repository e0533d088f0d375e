"""What a finished run found, printed after it (``python -m study.run`` ends with it): one entry,
:func:`report`, for every plan. The data choose the sections:

- one arm × condition (a study, with or without replicates): the best trial of each replicate (the one the final
  stage retrains) and the final stage per group, mean ± std [95 % CI] over the seeds; with replicates, the test
  metrics over replicates × seeds;
- more than one (a table): the comparison, written to ``<study dir>/table.md`` and the parent run's artifacts
  (:mod:`dashboards.table_report`: the paired differences against the reference arm, the winners per cell, and with
  replicates the search's own variance);
- how reliable each cell's choice is (:mod:`study.final.reliability`: its validation classes resampled, the test
  classes never read), printed and logged as metrics of the parent run (``selection/<cell>/p_best`` …);
- what the stages after the search reported (:attr:`~study.search.outcome.StudyOutcome.stage_lines`: a stage that
  retrained finalists, how each fared);
- whether more trials would change the answer: per cell, ``still climbing`` or ``flat`` at its n trials, from the
  expected best validation score against the number of trials (:mod:`dashboards.expected_best`, read from the cells'
  Optuna trials: :func:`cell_curves`);
- the cost when the run was priced or holds more than one cell: slot use, and the bill against the actual cost.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from dashboards.expected_best import CellCurve, of_trials
from dashboards.table_report import study_cost_report, write_table_report
from study.arguments import one_line
from study.cell_status import CellStatus, cells_status
from study.final.intervals import left_out_line, left_out_replicates, replicated_mean, t_interval
from study.final.reliability import Choice, Reliability, line_tag
from study.tracking.doors import load_optuna_study, optuna_storage, optuna_study_names
from trainables.schema import record as R
from trainables.schema.metric_names import bounds_of

if TYPE_CHECKING:
    from study.bill import Bill
    from study.final.stage import FinalGroup
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from study.runtime.driver_run import RunWall
    from study.search.outcome import StudyOutcome

__all__ = ["report", "print_final", "selection_lines", "cell_curves", "budget_lines"]

T = TypeVar("T")

#: The test metrics a report prints (each with its interval): the others are in MLflow and the dashboard.
_PRINTED = ("recall_at_1", "map_at_r", "nmi")


def report(plan: StudyPlan, layout: StudyLayout, outcome: StudyOutcome, bill: tuple[Bill | None, RunWall]) -> None:
    """Print what the run found, as its data choose (the module's docstring). Raises what writing the comparison
    raised (the runs are stored: the caller says how to write it again); what the cells' stores say besides (the
    selection, the cost) only warns when it cannot be read back or logged."""
    cells = _read_back(plan, lambda: cells_status(plan), "cell status") or []
    _read_back(plan, lambda: _log_selection(layout, outcome.parent_run_id, cells), "selection")
    curves = _read_back(plan, lambda: cell_curves(plan, layout, cells), "expected best") or {}
    if len(plan.keys) > 1:
        if outcome.final:
            where, text = write_table_report(
                plan,
                layout,
                outcome.parent_run_id,
                bill=bill,
                cells=cells or None,
                stage_lines=outcome.stage_lines,
                curves=curves,
            )
            print()
            print(text)
            print(f"Written to {where}")
        else:
            for line in budget_lines(curves):
                print(f"  {line}")
        return
    _print_best(plan, outcome)
    for line in selection_lines(cells):
        print(f"  {line}")
    for line in budget_lines(curves):
        print(f"  {line}")
    for line in outcome.stage_lines:
        print(f"  {line}")
    if outcome.final:
        print_final(outcome.final)
        if len(outcome.final) > 1 and plan.replicates > 1:
            _print_replicated(outcome.final)
    if bill[0] is not None or len(plan.cells) > 1:
        for line in _read_back(plan, lambda: study_cost_report(plan, layout.root, bill, cells or None), "cost") or []:
            print(line)


def selection_lines(cells: list[CellStatus]) -> list[str]:
    """Each cell's selection line (:meth:`study.final.reliability.Reliability.line`, the one the console and
    ``--status`` print): one per cell whose choice could be said."""
    return [c.reliability.line(c.cell.label) for c in cells if c.reliability is not None]


def _tie_set(choice: Choice | None) -> int | None:
    """The size of a choice's tie set where it is among the trials that trained every epoch (the ones the expected
    best reads); ``None`` for a choice the rungs made or none."""
    return len(choice.tie_set) if isinstance(choice, Reliability) and choice.rung is None else None


def cell_curves(plan: StudyPlan, layout: StudyLayout, cells: list[CellStatus]) -> dict[str, CellCurve]:
    """Per cell label, its expected best validation score against its trials and whether it still climbed
    (:func:`dashboards.expected_best.of_trials` over the cell's Optuna trials, held against its tie set's spread from
    ``cells``' reliability); a cell whose Optuna study does not exist yet is left out."""
    storage = optuna_storage(layout.optuna_url)
    names = set(optuna_study_names(storage, plan.name))
    ties = {c.cell.label: _tie_set(c.reliability) for c in cells}
    base = plan.base
    out = {}
    for cell in plan.cells:
        if cell.study_name not in names:
            continue
        trials = load_optuna_study(cell.study_name, storage).get_trials(deepcopy=False)
        out[cell.label] = of_trials(cell.label, trials, base.train.epochs, base.search.mode, ties.get(cell.label))
    return out


def budget_lines(curves: dict[str, CellCurve]) -> list[str]:
    """One line per cell: still climbing at n or flat (:meth:`dashboards.expected_best.CellCurve.line`)."""
    return [c.line() for c in curves.values()]


def _log_selection(layout: StudyLayout, parent_run_id: str, cells: list[CellStatus]) -> None:
    """Each cell's reliability as metrics of the parent run (what the dashboard's table page reads) and its selection
    line as a tag (:func:`study.final.reliability.line_tag`)."""
    chosen = [c for c in cells if c.reliability is not None]
    if not chosen or not parent_run_id:
        return
    from study.tracking.doors import mlflow_client  # the one door to MLflow (deferred: after the run only)

    client = mlflow_client(layout.tracking_uri)
    for c in chosen:
        assert c.reliability is not None
        for key, value in c.reliability.metrics(c.cell.label).items():
            client.log_metric(parent_run_id, key, value)
        client.set_tag(parent_run_id, line_tag(c.cell.label), c.reliability.line(c.cell.label))


def _print_best(plan: StudyPlan, outcome: StudyOutcome) -> None:
    """The best search trial (the final stage's pick: never one a scheduler stopped early); with replicates, each
    replicate's winner, the first being replicate 0's."""
    if outcome.best_value is None:
        return
    metric = plan.base.search.objective
    of = " (replicate 0)" if len(outcome.cell_bests) > 1 else ""
    print(f"Best trial{of} {outcome.best_trial_id}: {metric} = {outcome.best_value:.4f}")
    for name, value in outcome.best_params.items():
        print(f"  {name} = {value}")
    for label, (trial_id, value) in sorted(outcome.cell_bests.items(), key=lambda c: R.replicate_of(c[0])):
        if label != plan.name:
            print(f"Best trial (replicate {R.replicate_of(label)}) {trial_id}: {metric} = {value:.4f}")


def _print_replicated(groups: list[FinalGroup]) -> None:
    """The final stage over all replicates: each test metric's mean over replicates × seeds with its crossed
    replicates × seeds t-interval (:func:`study.final.intervals.replicated_mean`), and the replicates' spread; a
    replicate without final values is left out of the pool, and one line says which (:func:`left_out_line`)."""
    print(
        f"Over the {len(groups)} replicates (each search's winner on the same seeds; 95 % interval: Student's t over "
        "replicates and seeds, each part at its own t quantile):"
    )
    names = sorted({name for g in groups for name in g.by_seed})
    for name in names:
        if not name.removeprefix("test/").startswith(_PRINTED):
            continue
        reps = [g.by_seed.get(name, {}) for g in groups]
        if (missing := left_out_line(name, reps)) is not None:
            print(f"    {missing}")
        pooled = replicated_mean(reps, bounds_of(name))
        if pooled is None:
            continue
        mean, low, high, seeds = pooled
        pooled_over = len(groups) - len(left_out_replicates(reps))
        means = [sum(r.values()) / len(r) for r in reps if r]
        print(
            f"    {name} = {mean:.4f} [{low:.4f}, {high:.4f}] over {pooled_over} replicate{'s' if pooled_over > 1 else ''} × "
            f"{seeds} seeds; "
            f"replicates' means {min(means):.4f} to {max(means):.4f} (the search's own spread {max(means) - min(means):.4f})"
        )


def print_final(groups: list[FinalGroup]) -> None:
    """The final test stage: per group, each test metric's mean ± std [95 % CI] over the seeds."""
    print("Final test stage (best configuration retrained on all training classes, evaluated on the test classes):")
    for g in groups:
        print(f"  {g.label} (from trial {g.source_trial}, {g.num_seeds} seeds)")
        for name in sorted(g.values):
            if name.removeprefix("test/").startswith(_PRINTED):
                s = g.summary()
                print(
                    f"    {name} = {s[name + '_mean']:.4f} ± {s[name + '_std']:.4f} "
                    f"[{s[name + '_ci95_low']:.4f}, {s[name + '_ci95_high']:.4f}]"
                )
        for name, value in sorted(g.fold_ensemble.items()):
            if name.removeprefix("test/").startswith("recall_at_1"):
                print(f"    fold ensemble {name} = {value:.4f}")
        if rows := g.per_category():
            print("    per category (mean ± std [95 % CI] over the seeds):")
            for category, metric, vals in rows:
                mean, std, low, high = t_interval(vals, bounds_of(metric))
                print(f"      {category:<16} {metric:<12} {mean:.4f} ± {std:.4f} [{low:.4f}, {high:.4f}]")


def _read_back(plan: StudyPlan, read: Callable[[], T], what: str) -> T | None:
    """``read()``, or ``None`` and one warning line: the run is done and stored, so lines about its cells' selection
    and cost (read back from its stores, or logged to them) must not fail it."""
    try:
        return read()
    except Exception as e:
        print(
            f"warning: the {plan.noun}'s {what} was not read back: {type(e).__name__}: {one_line(str(e))[:300]}",
            file=sys.stderr,
        )
        return None
