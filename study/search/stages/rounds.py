"""Rounds of replicates where the verdict is open (``search.replicates: {min, max}``, :mod:`study.final.sequential`).

The stages before this one ran the plan's first round: ``min`` replicates of every arm × condition
(:attr:`~study.intake.plan.StudyPlan.first_round`). After each round every comparison is judged on its cells' final
values (the final stage's test metric per seed, what the table reports): decided ones are frozen with their round, and
an arm × condition whose comparisons are all decided runs no more; the others get one more replicate each (the
reference's cell goes on while any of its comparisons is open), up to ``max``. A round is the first round's stages
again over its cells, in Ray experiments of its own under ``rounds/<R>/`` (R: the replicates per cell once it
ends), so each round restores exactly as the first does.

Nothing is kept but what the stores hold: a resumed driver restores the first round's stages, then replays the rounds
in order from their finished results (a round whose experiments exist is restored, a finished one returns at once),
taking each look from the same values, so it picks the same cells, and no replicate runs twice. A stop between rounds
ends before the next round writes anything; a stop mid-round leaves that round's experiments to restore.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from study.final.sequential import Decision, Rule, cells_to_continue, replay
from study.final.stage import FinalGroup, summary_csv
from study.runtime.stopping import check_stop
from study.runtime.storage import make_dirs
from study.search.context import StudyContext
from study.search.stages.base import Stage, StageResult, StageRun
from trainables.schema import record as R
from trainables.schema.metric_names import final_metric

if TYPE_CHECKING:
    from collections.abc import Mapping

    from study.intake.plan import PlanCell, StudyPlan
    from study.search.outcome import StudyOutcome

__all__ = ["RoundsStage", "ROUNDS_DIR", "round_rule", "replicate_values", "decisions_of"]

#: The folder of the later rounds' Ray experiments in the study directory: ``rounds/<R>/tune``, ``rounds/<R>/tune_final``.
ROUNDS_DIR = "rounds"


def round_rule(plan: StudyPlan) -> Rule:
    """The sequential rule of a table with ``{min, max}``: its range, the verdict's margin (``verdict.margin``, as the
    report reads it) and the metric's direction."""
    assert plan.sequential is not None, "a rule needs search.replicates: {min, max}"
    margin = (plan.written.get("verdict") or {}).get("margin")
    return Rule(
        plan.sequential,
        margin=None if margin is None else float(margin),
        higher_is_better=plan.base.search.mode == "max",
    )


def replicate_values(plan: StudyPlan, done: Mapping[str, Mapping[int, float]]) -> dict[str, list[Mapping[int, float]]]:
    """Per arm × condition (:attr:`~study.intake.plan.PlanCell.key`) its complete replicates in order, each its final
    values by seed: ``done`` holds a value mapping for every cell label whose round has ended (empty: no value). A
    replicate counts only while every replicate before it does, as the looks need."""
    out: dict[str, list[Mapping[int, float]]] = {}
    for cell in sorted(plan.every_cell, key=lambda c: c.replicate):
        held = out.setdefault(cell.key, [])
        if cell.label in done and len(held) == cell.replicate:
            held.append(done[cell.label])
    return out


def decisions_of(plan: StudyPlan, done: Mapping[str, Mapping[int, float]]) -> dict[str, Decision]:
    """Every comparison's decision from the ended rounds' values (:func:`replicate_values`), the looks replayed."""
    return replay(round_rule(plan), plan.comparisons, replicate_values(plan, done))


def _values(groups: list[FinalGroup], metric: str) -> dict[str, dict[int, float]]:
    """Per final group (a cell's label) its values of ``metric`` by seed."""
    return {g.label: dict(g.by_seed.get(metric, {})) for g in groups}


class RoundsStage(Stage):
    """The later rounds: runs where ``search.replicates`` is ``{min, max}`` (a table's, with a final stage)."""

    tag = "rounds"
    experiment = ROUNDS_DIR
    doing = "replicates where a comparison is open"

    def __init__(self, round_stages: tuple[Stage, ...]) -> None:
        #: What a round runs, in run order: the stages of the first round (those its plan asks for).
        self.round_stages = round_stages

    def runs_in(self, plan: StudyPlan) -> bool:
        return plan.sequential is not None and plan.base.final.seeds > 0

    def planned(self, plan: StudyPlan) -> int:
        """At most: the later rounds' runs of every stage of a round, every later replicate run."""
        least, most = plan.at_least, plan.at_most
        return sum(s.planned(most) - s.planned(least) for s in self.round_stages if s.runs_in(most))

    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        """Round after round while a comparison is open: each round's cells are the next replicate of every arm ×
        condition :func:`~study.final.sequential.cells_to_continue` names. Returns the whole table's outcome (every
        round's final groups); a stop in a round returns where that round stands."""
        assert before is not None, "the rounds follow the first round"
        plan, metric = run.context.plan, final_metric(run.context.spec.search.metric)
        assert plan.sequential is not None, "rounds need search.replicates: {min, max}"
        result, done = before, _values(before.outcome.final, metric)
        # Every cell of the first round has ended: one without a final group (its search failed) has no value.
        done.update({c.label: {} for c in plan.cells if c.label not in done})
        for replicates in range(plan.sequential.min + 1, plan.sequential.max + 1):
            going = cells_to_continue(decisions_of(plan, done), plan.comparisons)
            cells = [c for c in plan.later if c.key in going and c.replicate == replicates - 1]
            if not cells:
                break
            check_stop(f"between replicate rounds, before round {replicates}")
            step = self._round(run, cells, replicates)
            result = StageResult(_merged(result.outcome, step.outcome), result.search)
            if not step.goes_on:
                return result
            done.update({**{c.label: {} for c in cells}, **_values(step.outcome.final, metric)})
        if len(result.outcome.final) > len(before.outcome.final):  # the summary of every round's groups
            run.store.log_text(run.parent, summary_csv(result.outcome.final), R.FINAL_SUMMARY_FILE)
        return result

    def _round(self, run: StageRun, cells: list[PlanCell], replicates: int) -> StageResult:
        """One round of ``cells``: the stages of the first round over them, in their own folder (restored when it
        holds the round's search experiment)."""
        from ray.tune import Tuner  # defers Ray: the bill and --status read a stage's plan only

        context = run.context
        layout = dataclasses.replace(context.layout, root=f"{context.layout.root}/{ROUNDS_DIR}/{replicates}")
        make_dirs(layout.root)
        plan = context.plan.round_of(cells)
        resuming = Tuner.can_restore(layout.tune_dir)
        step = StageRun(StudyContext(context.spec, layout, context.options, resuming, plan), run.store, run.parent)
        result: StageResult | None = None
        for stage in (s for s in self.round_stages if s.runs_in(plan)):
            if result is not None and not result.goes_on:
                break
            result = stage.run(step, result)
        assert result is not None, "every round runs its search"
        return result


def _merged(before: StudyOutcome, step: StudyOutcome) -> StudyOutcome:
    """The table's outcome after one more round: counts and failures added, final groups and winners joined, and
    where the round stands when it did not finish."""
    return dataclasses.replace(
        before,
        num_trials=before.num_trials + step.num_trials,
        num_failed=before.num_failed + step.num_failed,
        interrupted=step.interrupted,
        progress=step.progress,
        final=[*before.final, *step.final],
        failures=[*before.failures, *step.failures],
        cell_bests={**before.cell_bests, **step.cell_bests},
        stage_lines=[*before.stage_lines, *step.stage_lines],
    )
