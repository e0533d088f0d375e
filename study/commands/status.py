"""``python -m study.status SPEC.yaml|TABLE.yaml|STUDY_DIR [--set key=value ...]`` (``dmlstudy status``, and
``python -m study.run ... --status``): where a run stands, without starting it. One screen for every plan
(:func:`print_status`): a study is a run of one cell, a table one of many, and the data choose the lines: the trials
over all cells and each failure, a row per cell when there is more than one (:mod:`study.cell_status`), the best so
far with its parameters when there is one.

Reads the run's Optuna storage (trial states, best value so far) and its MLflow parent run (whether a driver is
running it); starts no Ray and writes nothing. Exit 0 when the run exists, 2 when it does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dashboards.compare.verdicts import status_lines
from study.arguments import ArgumentParser, one_line
from study.bill import size_line
from study.cell_status import CellStatus, cells_status, comparison_states, slot_use, winner_text
from study.console import format_table
from study.final.sequential import NOT_DETECTABLE
from study.intake.layout import StudyLayout
from study.intake.load import load_plan
from study.intake.plan import StudyPlan
from study.runtime.driver_run import StageCounts
from study.runtime.lock import driver_text
from study.runtime.slurm_queue import print_job_line, print_unstarted
from study.search.stages import STAGES, counted_stages
from study.tracking import peek as tracking_peek  # not study.tracking.callback: that imports Ray
from trainables.schema import record as R
from trainables.schema.errors import StudyError

__all__ = ["print_status", "main"]


def print_status(plan: StudyPlan) -> int:
    """Print where the run stands; returns the exit code (2: never started, or its storage did not answer)."""
    layout = StudyLayout.for_spec(plan.base)
    try:
        cells = cells_status(plan)
    except StudyError as e:
        # Submitted by dmlstudy slurm, its job still pending: the run's spec file comes when the driver starts.
        if (code := print_unstarted(layout.root, plan.noun)) is not None:
            return code
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # the storage (an object store) did not answer
        print(
            f"error: storage: cannot read the {plan.noun} at {plan.base.storage}: {one_line(str(e))[:300]}",
            file=sys.stderr,
        )
        return 2
    print(f"{plan.noun.capitalize()} {plan.name!r} in {layout.root}")
    print(size_line(plan))
    _print_trials(plan, cells, layout)
    tags = tracking_peek.parent_tags(layout.tracking_uri, plan.name)
    validated = R.SELECTION_VALIDATION if plan.base.validation.enabled else R.SELECTION_TEST
    print(f"  stage: {_stage_text(tags)}; hyperparameters selected on the {tags.get(R.SELECTION, validated)} classes")
    for line in status_lines(tags):  # a finished table's verdicts, as its report tagged the parent run
        print(f"  {line}")
    for line in _round_lines(plan):  # search.replicates {min, max}: each comparison's state, replayed from the stores
        print(f"  {line}")
    if len(cells) == 1 and (best := cells[0]).best_value is not None:
        print(f"  best so far: Optuna trial {best.best_number}: {plan.base.search.objective} = {best.best_value:.4f}")
        for name, value in best.best_params.items():
            print(f"    {name} = {value}")
    parent = tracking_peek.parent_status(layout.tracking_uri, plan.name)
    counts = StageCounts(
        searched=tuple(c.finished + c.failed for c in _started(plan, cells)),
        trials_per_cell=plan.trials_per_cell,
        searched_ok=any(c.finished for c in cells),
        later=tuple(
            (s.tag, sum(c.done.get(s.tag, 0) for c in cells), _planned(tags, s.planned_tag or ""))
            for s in counted_stages(plan)
        ),
    )
    if (driver := driver_text(layout.root, parent, complete=not counts.resumable(parent))) is not None:
        print(f"  driver: {driver}")
    print_job_line(layout.root, indent="  ")  # launched by dmlstudy slurm: what Slurm says of its job
    print(f"  tracking: {layout.tracking_uri}")
    print(f"  optuna:   {layout.optuna_url} (optuna-dashboard {layout.optuna_url})")
    return 0


def _started(plan: StudyPlan, cells: list[CellStatus]) -> list[CellStatus]:
    """The cells the run has to search: every cell, but with ``search.replicates: {min, max}`` a later round's only
    once it started (the rounds decide whether it runs)."""
    if plan.sequential is None:
        return cells
    return [c for c in cells if c.counts or c.cell.replicate < plan.sequential.min]


def _round_lines(plan: StudyPlan) -> list[str]:
    """``comparison spl.p0.2 vs ms.p0.2: open after 3 of ≤ 5 replicates`` or ``… decided after 2: better (Δ +0.0123
    [+0.0040, +0.0206])``: each comparison's state under ``search.replicates: {min, max}`` (none without)."""
    if plan.sequential is None:
        return []
    states = comparison_states(plan)
    low, high = plan.sequential.min, plan.sequential.max
    lines = [
        f"rounds: {low} replicates per cell, then one more per round while a comparison of the cell is open, ≤ {high}"
    ]
    for name, (arm, reference) in plan.comparisons.items():
        d = states.get(name)
        if d is None:
            state = f"open, before its first look (after {low} replicates)"
        elif d.is_open:
            state = f"open after {d.replicates} of ≤ {high} replicates"
        elif d.state == NOT_DETECTABLE:
            mde = "" if d.mde != d.mde else f", minimum detectable effect {d.mde:.4f}"
            state = f"not detectable at this budget after {d.replicates}{mde}"
        else:
            state = f"decided after {d.round}: {d.state} (Δ {d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}])"
        lines.append(f"  comparison {arm} vs {reference}: {state}")
    return lines


def _stage_text(tags: dict[str, str]) -> str:
    """``final (retraining the best configurations: 12 runs planned)``: the stage the driver tagged the parent run
    with, and what it does with the runs it planned as it started."""
    tag = tags.get(R.STAGE, R.STAGE_SEARCH)
    kind = next((stage for stage in STAGES if stage.tag == tag), None)
    if kind is None or kind.planned_tag is None:
        return tag
    return f"{tag} ({kind.doing}: {int(tags.get(kind.planned_tag, 0))} runs planned)"


def _planned(tags: dict[str, str], tag: str) -> int | None:
    """A stage's planned runs, as its driver tagged the parent run when the stage started (``None``: not started)."""
    return int(tags[tag]) if tags.get(tag, "").isdigit() else None


def _print_trials(plan: StudyPlan, cells: list[CellStatus], layout: StudyLayout) -> None:
    """The trials over every cell and each failed one; with more than one cell, a row per cell and the slot use."""
    count = {k: sum(c.counts.get(k, 0) for c in cells) for k in ("COMPLETE", "PRUNED", "RUNNING", "FAIL")}
    nonfinite = sum(c.nonfinite for c in cells)
    print(
        f"  trials: {count['COMPLETE'] + count['PRUNED']} done ({count['COMPLETE']} complete, {count['PRUNED']} "
        f"pruned), {count['RUNNING']} running, {count['FAIL']} failed{f' ({nonfinite} nan)' if nonfinite else ''}, "
        f"of {plan.search_trials}"
    )
    for stage in counted_stages(plan) if len(cells) == 1 else []:  # a table's cells each show theirs in their row
        if stage.searches:  # runs that train as search trials: counted beside them
            print(
                f"  {stage.tag}: {cells[0].done.get(stage.tag, 0)} of {stage.planned(plan)} {stage.runs_noun} finished"
            )
    for trial_id, stage_name, reason in tracking_peek.failures(layout.tracking_uri, plan.name):
        print(f"    failed ({stage_name}): trial {trial_id}: {reason}")
    if len(cells) > 1:
        rows = _rows(plan, cells)
        print(format_table(rows, list(rows[0])))
    if (use := slot_use(cells, plan.base.search.max_concurrent, plan.final_with_search)) is not None:
        print(use.text())
    _print_choices(plan, cells)


def _print_choices(plan: StudyPlan, cells: list[CellStatus]) -> None:
    """Per cell, the trial a stage after the search chose (what the final stage retrains) once it chose, and how
    reliable the cell's choice is (its selection line: validation classes resampled, test never read)."""
    chooser = next((s for s in counted_stages(plan) if s.winner_name), None)
    for cell in cells:
        if cell.chosen is not None and chooser is not None:
            number, score = cell.chosen
            print(
                f"  {chooser.winner_name}: {cell.cell.label}: Optuna trial {number}, {plan.base.search.objective} "
                f"{score:.4f} (its {chooser.tag} score); the final stage retrains it"
            )
    for cell in cells:
        if cell.reliability is not None:
            print(f"  {cell.reliability.line(cell.cell.label)}")


def _rows(plan: StudyPlan, cells: list[CellStatus]) -> list[dict[str, object]]:
    metric = plan.base.search.objective
    return [
        {
            "cell": c.cell.label,
            "optuna study": c.cell.study_name,
            "finished": f"{c.finished}/{plan.trials_per_cell}",
            "stopped early": c.pruned,
            "failed": c.failed_text(),
            "running": c.counts.get("RUNNING", 0),
            **c.cost_columns(),
            f"best {metric}": "" if c.best_value is None else f"{c.best_value:.4f}",
            **{s.column: f"{c.done.get(s.tag, 0)}/{s.per_cell(plan)}" for s in counted_stages(plan) if s.column},
            "best parameters": winner_text(c),
        }
        for c in cells
    ]


def main(argv: list[str] | None = None, prog: str = "python -m study.status") -> int:
    p = ArgumentParser(prog=prog, description="Show where a study or a table stands.")
    p.add_argument("study", help="YAML study or table spec, or the study's directory (storage/<name>/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    try:
        folder = Path(args.study)
        # A job's directory (dmlstudy slurm), its study not started yet?
        unstarted = folder.is_dir() and not (folder / R.SPEC_FILE).exists()
        if unstarted and (code := print_unstarted(str(folder))) is not None:
            return code
        plan = load_plan(args.study, args.overrides, family_rules=False)  # reads the stores: no trainer (torch)
    except StudyError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    return print_status(plan)


if __name__ == "__main__":
    sys.exit(main())
