"""The bill of a run (a table, or a study: a table of one arm) before it starts: hours on its ``max_concurrent`` slots, per arm from a measured
:class:`~study.search.calibration.Calibration` (or from the spec's assumed ``search.epoch_seconds``), for FIFO and for
its scheduler; after the run, the same bill beside what the trials actually cost (docs/notebook/tables.md, "The measured bill").

A trial is priced as its start-up plus its epochs: a search trial ``startup + share · epochs · search_epoch_s``, a
final run ``startup + epochs · final_epoch_s``, summed over every cell and divided by the slots. A cell's runs after
its search are counted per final group (:attr:`~study.intake.plan.StudyPlan.groups_per_cell`: a ``final.group_by``
study retrains each group's best), as the stages make them (:func:`~study.search.stages.counted_stages`). ``share`` is the
scheduler's expected share of the search's epochs (1 for FIFO). An assumed ``epoch_seconds`` is the old unit: a model-
epoch on all training classes, no start-up, so a search trial's epoch is ``search_cost`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from study.intake.plan import StudyPlan
from study.search.calibration import ArmCalibration, Calibration, calibrate
from study.search.stages import counted_stages
from trainables.schema.errors import SpecError
from trainables.schema.space import SchedulerSpec
from trainables.schema.spec import StudySpec

__all__ = [
    "ArmPrice",
    "Bill",
    "Priced",
    "measured_bill",
    "assumed_bill",
    "priced",
    "bill_of",
    "arm_specs",
    "calibrate_plan",
    "model_epochs",
    "estimated_hours",
    "size_line",
    "check_budget",
    "run_bill",
]


@dataclass(frozen=True)
class ArmPrice:
    """What a trial of one arm costs, in seconds: before its first epoch, per search-trial epoch, per final epoch."""

    startup_s: float
    search_epoch_s: float
    final_epoch_s: float

    @classmethod
    def of(cls, arm: ArmCalibration) -> ArmPrice:
        return cls(arm.startup_s, arm.search_epoch_s, arm.final_epoch_s)


@dataclass(frozen=True)
class Bill:
    """Per arm its price; ``measured`` says whether it came from a calibration on ``device`` or from the spec."""

    prices: dict[str, ArmPrice]
    measured: bool
    device: str = ""
    #: The spec's ``search.epoch_seconds`` when the bill is assumed.
    epoch_seconds: float | None = None
    #: A search trial's epoch in model-epochs on all training classes (``Table.search_cost``), for the per-arm unit.
    search_cost: float = 1.0

    def trial_s(self, arm: str, epochs: float, final: bool = False) -> float:
        """One trial of ``arm`` that trains ``epochs`` epochs (a search trial's, or a final run's)."""
        p = self.prices[arm]
        return p.startup_s + epochs * (p.final_epoch_s if final else p.search_epoch_s)

    def unit_text(self) -> str:
        """``at 3 s per model-epoch (assumed)``, or ``measured on cpu: ms 2.1 s, bspml 2.6 s per model-epoch (…)``."""
        if not self.measured:
            return f"at {self.epoch_seconds:g} s per model-epoch (assumed: search.epoch_seconds)"
        per_arm = ", ".join(f"{a} {p.search_epoch_s / self.search_cost:.3g} s" for a, p in self.prices.items())
        startup = ", ".join(f"{p.startup_s:.2g}" for p in self.prices.values())
        return f"measured on {self.device}: {per_arm} per model-epoch (training and evaluation), start-up {startup} s a trial"


def measured_bill(calibration: Calibration, search_cost: float) -> Bill:
    return Bill(
        {a: ArmPrice.of(c) for a, c in calibration.arms.items()}, True, calibration.device, search_cost=search_cost
    )


def assumed_bill(arms: list[str], epoch_seconds: float, search_cost: float) -> Bill:
    """The spec's constant: a model-epoch on all training classes costs ``epoch_seconds``, a trial starts for free."""
    price = ArmPrice(0.0, search_cost * epoch_seconds, epoch_seconds)
    return Bill(dict.fromkeys(arms, price), False, epoch_seconds=epoch_seconds, search_cost=search_cost)


@dataclass(frozen=True)
class Priced:
    """What a run's bill multiplies, a table's or a study's (a table of one arm): one arm name per cell (every
    replicate is a cell), each cell's ``trials``, its ``finals`` (final runs: its groups × ``final.seeds``), the
    ``epochs``, the ``slots`` (``max_concurrent``) and the scheduler, whose expected share prices the scheduled
    search."""

    arms: tuple[str, ...]
    trials: int
    finals: int
    epochs: int
    slots: int
    scheduler: SchedulerSpec
    #: Each cell's runs of the later stages that train as search trials to the end (validation only:
    #: :attr:`~study.search.stages.base.Stage.searches`).
    searched_after: int = 0

    @property
    def scheduled(self) -> bool:
        return self.scheduler.stops_early

    def share(self) -> float:
        """The expected share of the search's model-epochs its trials train (its scheduler's, 1 for FIFO)."""
        return self.scheduler.share(self.epochs, self.trials)

    def stage_hours(self, bill: Bill, scheduled: bool | None = None) -> tuple[float, float]:
        """The search's (with the later stages' search trials) and the final stage's hours on the slots under ``bill``;
        ``scheduled`` (default: whether there is a scheduler) prices the search at its expected share."""
        share = self.share() if (self.scheduled if scheduled is None else scheduled) else 1.0
        search = sum(bill.trial_s(a, share * self.epochs) for a in self.arms) * self.trials
        # No scheduler stops a later stage's run: each trains every epoch.
        after = sum(bill.trial_s(a, self.epochs) for a in self.arms) * self.searched_after
        final = sum(bill.trial_s(a, self.epochs, final=True) for a in self.arms) * self.finals
        return (search + after) / self.slots / 3600.0, final / self.slots / 3600.0

    def hours(self, bill: Bill, scheduled: bool | None = None) -> float:
        return sum(self.stage_hours(bill, scheduled))

    def cheaper(self, bill: Bill) -> str:
        """``FIFO ≈ 12.3 h; with halving ≈ 4.1 h``: the run's scheduler, or the one its FIFO spec suggests (halving,
        :meth:`~trainables.schema.scheduler.SchedulerSpec.cheaper`)."""
        fifo = f"FIFO ≈ {self.hours(bill, False):.1f} h"
        other = self.scheduler.cheaper(self.epochs, self.trials)
        if other is None:
            return fifo
        if other is self.scheduler:
            return f"{fifo}; with {other.type} ≈ {self.hours(bill, True):.1f} h"
        search, final = self.stage_hours(bill, False)
        startup_h = sum(bill.prices[a].startup_s for a in self.arms) * self.trials / self.slots / 3600.0
        stopped = startup_h + (search - startup_h) * other.share(self.epochs, self.trials) + final
        return f"{fifo}; with {other.type} (search.scheduler: {other.inline()}) ≈ {stopped:.1f} h"

    def check(self, bill: Bill | None, max_hours: float | None, what: str) -> None:
        """Refuse, before anything starts, a run (``what``: ``table``, ``study``) whose bill exceeds ``max_hours``: one
        line naming FIFO's bill and the cheaper scheduled one (:meth:`cheaper`)."""
        if bill is None or max_hours is None or (hours := self.hours(bill)) <= max_hours:
            return
        raise SpecError(
            f"the {what} needs ≈ {hours:.1f} h on {self.slots} slots ({bill.unit_text()}) but search.max_hours is "
            f"{max_hours:g}: {self.cheaper(bill)}; lower search.num_trials, final.seeds or train.epochs, stop trials "
            "early, or raise search.max_hours",
            "search.max_hours",
        )


def priced(plan: StudyPlan) -> Priced:
    """What a run's bill multiplies: its cells' arms, ``num_trials``, final runs and later search trials each."""
    b = plan.base
    return Priced(
        tuple(c.arm for c in plan.cells),
        plan.trials_per_cell,
        plan.finals_per_cell,
        b.train.epochs,
        b.search.max_concurrent,
        b.search.scheduler,
        sum(s.per_cell(plan) for s in counted_stages(plan) if s.searches),
    )


def bill_of(plan: StudyPlan, calibration: Calibration | None = None) -> Bill | None:
    """The run's price per arm: measured (``calibration``), else the spec's assumed ``search.epoch_seconds``, else
    none."""
    if calibration is not None:
        return measured_bill(calibration, plan.search_cost())
    if plan.epoch_seconds is not None:
        return assumed_bill(list(plan.arms), plan.epoch_seconds, plan.search_cost())
    return None


def arm_specs(plan: StudyPlan) -> dict[str, StudySpec]:
    """Each arm's first cell's spec (a study: its one family): what a calibration measures of the arm."""
    first: dict[str, StudySpec] = {}
    for cell in plan.cells:
        first.setdefault(cell.arm, cell.spec)
    return first


def calibrate_plan(plan: StudyPlan) -> Calibration:
    """Measure each arm of a run on its first cell's spec (:func:`study.search.calibration.calibrate`)."""
    return calibrate(arm_specs(plan))


def model_epochs(plan: StudyPlan, scheduled: bool | None = None) -> float:
    """The run's whole training, in model-epochs on all training classes (the later stages' search trials priced as
    search trials); ``scheduled`` (default: whether the run has a scheduler) counts
    the search at its expected share under early stopping."""
    share = priced(plan).share() if (plan.scheduled if scheduled is None else scheduled) else 1.0
    after = sum(s.planned(plan) for s in counted_stages(plan) if s.searches)
    search = (plan.search_trials * share + after) * plan.search_cost()
    return (search + plan.final_runs) * plan.base.train.epochs


def estimated_hours(plan: StudyPlan, scheduled: bool | None = None, bill: Bill | None = None) -> float | None:
    """The whole run's hours on its slots under ``bill`` (default: the spec's assumed one; ``None``: no bill)."""
    bill = bill or bill_of(plan)
    return None if bill is None else priced(plan).hours(bill, scheduled)


def _scheduler_text(plan: StudyPlan, bill: Bill | None) -> str:
    """``; with asha per cell (…): the search ≈ 45 % of its model-epochs …, 1 234 model-epochs in all, ≈ 5.1 h``: the
    scheduler's own description (:meth:`~trainables.schema.scheduler.SchedulerSpec.describe`)."""
    text = f"; with {plan.base.search.scheduler.describe(plan.base.train.epochs, plan.trials_per_cell)}, "
    hours = estimated_hours(plan, True, bill)
    return (
        text + f"{model_epochs(plan, True):.0f} model-epochs in all" + ("" if hours is None else f", ≈ {hours:.1f} h")
    )


def _shape(plan: StudyPlan) -> str:
    """``2 arms × 4 cells + 1 extra × 3 replicates × 8 trials``: what the run searches (a study: its trials, and its
    replicates)."""
    arms, keys = len(plan.arms), len(plan.keys)
    parts = []
    if keys > 1:
        extra = keys - arms * plan.grid
        parts.append(f"{arms} arms × {plan.grid} cells" + (f" + {extra} extra" if extra > 0 else ""))
    if plan.sequential is not None:
        parts.append(f"{plan.sequential.min}–{plan.sequential.max} replicates")
    elif plan.replicates > 1:
        parts.append(f"{plan.replicates} replicates")
    return " × ".join([*parts, f"{plan.trials_per_cell} trials"])


def _final_text(plan: StudyPlan) -> str:
    """``4 × 3 final seeds = 12 final runs`` (one best per cell), or ``6 groups (final.group_by) × 3 final seeds = 18
    final runs``: a ``final.group_by`` study's groups (at most: :func:`~study.intake.plan.group_count`)."""
    seeds, runs = plan.base.final.seeds, plan.final_runs
    if plan.final_unit == "cell":
        return f"{len(plan.cells)} × {seeds} final seeds = {runs} final runs"
    return f"{plan.groups_per_cell} groups (final.group_by) × {seeds} final seeds = {runs} final runs"


def size_line(plan: StudyPlan, bill: Bill | None = None) -> str:
    """The run's size in one line, priced by ``bill`` (default: the spec's assumed ``epoch_seconds``, if any): FIFO's
    hours, then the scheduler's; and a note when every trial of a cell is its sampler's random start-up."""
    plan = plan.at_most  # with search.replicates {min, max}: the most it can run (the least is said at the end)
    b = plan.base
    v, slots, epochs = b.validation, b.search.max_concurrent, b.train.epochs
    bill = bill or bill_of(plan)
    models = {"kfold": f"{v.folds} folds", "holdout": "holdout"}.get(v.kind, "test selection")
    line = (
        f"{plan.noun.capitalize()} {plan.name}: {_shape(plan)} × {epochs} epochs = {plan.search_trials} search trials "
        f"({models}), then {''.join(s.bill_text(plan) for s in counted_stages(plan))}{_final_text(plan)}; "
        f"{slots} at a time; every trial to the end (FIFO): {model_epochs(plan, False):.0f} model-epochs"
    )
    if bill is not None:
        line += f", ≈ {estimated_hours(plan, False, bill):.1f} h on {slots} slots {bill.unit_text()}"
    if plan.scheduled:
        line += _scheduler_text(plan, bill)
    sampler = plan.cells[0].spec.search.sampler
    searched = any(c.spec.search.space for c in plan.cells)
    if searched and sampler.type in ("tpe", "gp") and plan.trials_per_cell <= sampler.n_startup_trials:
        line += (
            f"; every trial of a cell is the {sampler.type} sampler's random start-up "
            f"(search.sampler.n_startup_trials {sampler.n_startup_trials} ≥ {plan.trials_per_cell}): a random search"
        )
    return line + _rounds_text(plan, bill)


def _rounds_text(plan: StudyPlan, bill: Bill | None) -> str:
    """``; by rounds (…): at least 120 model-epochs (≈ 1.0 h), at most 300 (≈ 2.5 h)``: with ``search.replicates
    {min, max}``, the least (``min`` replicates of every cell: every comparison decided at the first look) and the most
    (``max`` everywhere: none decided) the run trains, FIFO and, with a scheduler, at its expected share."""
    if plan.sequential is None:
        return ""

    def price(side: StudyPlan, unit: str) -> str:
        hours = estimated_hours(side, None, bill)
        return f"{model_epochs(side):.0f}{unit}" + ("" if hours is None else f" (≈ {hours:.1f} h)")

    m, most = plan.sequential.min, plan.sequential.max
    return (
        f"; by rounds ({m} replicates per cell, then one more per round while a comparison of the cell is open, up "
        f"to {most}): at least {price(plan.at_least, ' model-epochs')}, at most {price(plan.at_most, '')}"
    )


def check_budget(plan: StudyPlan, bill: Bill | None = None) -> None:
    """Refuse, before anything starts, a run whose bill (measured, else assumed) exceeds ``search.max_hours``; the
    refusal names FIFO's bill and the cheaper scheduled one (the run's scheduler, else halving). With
    ``search.replicates {min, max}`` the bill is the most it can run (every replicate to ``max``)."""
    priced(plan.at_most).check(bill or bill_of(plan), plan.max_hours, plan.noun)  # {min, max}: held to its most


def run_bill(plan: StudyPlan, calibration: Calibration | None) -> Bill | None:
    """The bill a run is held to, checked against ``search.max_hours`` (:func:`check_budget`): the spec's assumed
    ``epoch_seconds`` where it sets one, else ``calibration`` (measured here; ``None``: unpriced). The one place the
    budget is checked: ``study.run`` before it starts (and ``--plan``, saying what it would refuse), ``dmlstudy slurm``
    before it submits (on the assumed bill: the job measures where it runs)."""
    bill = bill_of(plan, None if plan.epoch_seconds is not None else calibration)
    check_budget(plan, bill)
    return bill
