"""The bill of a table or a study before it starts: hours on its ``max_concurrent`` slots, per arm from a measured
:class:`~study.search.calibration.Calibration` (or from the spec's assumed ``search.epoch_seconds``), for FIFO and for
its scheduler; after the run, the same bill beside what the trials actually cost (docs/tables.md, "The measured bill").

A trial is priced as its start-up plus its epochs: a search trial ``startup + share · epochs · search_epoch_s``, a
final run ``startup + epochs · final_epoch_s``, summed over every cell and divided by the slots. ``share`` is the
scheduler's expected share of the search's epochs (1 for FIFO). An assumed ``epoch_seconds`` is the old unit: a model-
epoch on all training classes, no start-up, so a search trial's epoch is ``search_cost`` of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from study.plan import search_cost
from study.search.calibration import ArmCalibration, Calibration, calibrate
from study.table.asha_cost import expected_share, halving_share
from trainables.schema.errors import SpecError
from trainables.schema.space import SchedulerSpec
from trainables.schema.spec import StudySpec

__all__ = [
    "ArmPrice",
    "Bill",
    "Priced",
    "study_priced",
    "study_bill",
    "measured_bill",
    "assumed_bill",
    "scheduler_share",
    "arm_specs",
    "calibrate_table",
    "study_size_line",
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


def scheduler_share(scheduler: SchedulerSpec, epochs: int, trials: int) -> float:
    """The expected share of a cell's search model-epochs its trials train under ``scheduler`` (``trials`` a cell):
    1 for FIFO, ASHA's simulated expectation, halving's exact share."""
    if scheduler.type == "asha":
        return expected_share(epochs, scheduler.grace_period, scheduler.reduction_factor, trials)
    if scheduler.type == "halving":
        return halving_share(epochs, scheduler.first_rung, scheduler.reduction_factor, trials, scheduler.hedge)
    return 1.0


@dataclass(frozen=True)
class Priced:
    """What a run's bill multiplies, a table's or a study's (a table of one arm): one arm name per cell (every
    replicate is a cell), each cell's ``trials``, its final ``seeds``, the ``epochs``, the ``slots``
    (``max_concurrent``) and the scheduler, whose expected share prices the scheduled search."""

    arms: tuple[str, ...]
    trials: int
    seeds: int
    epochs: int
    slots: int
    scheduler: SchedulerSpec

    @property
    def scheduled(self) -> bool:
        return self.scheduler.type != "fifo"

    def share(self) -> float:
        """The expected share of the search's model-epochs its trials train (1 without a scheduler)."""
        return scheduler_share(self.scheduler, self.epochs, self.trials) if self.scheduled else 1.0

    def stage_hours(self, bill: Bill, scheduled: bool | None = None) -> tuple[float, float]:
        """The search's and the final stage's hours on the slots under ``bill``; ``scheduled`` (default: whether there
        is a scheduler) prices the search at its expected share."""
        share = self.share() if (self.scheduled if scheduled is None else scheduled) else 1.0
        search = sum(bill.trial_s(a, share * self.epochs) for a in self.arms) * self.trials
        final = sum(bill.trial_s(a, self.epochs, final=True) for a in self.arms) * self.seeds
        return search / self.slots / 3600.0, final / self.slots / 3600.0

    def hours(self, bill: Bill, scheduled: bool | None = None) -> float:
        return sum(self.stage_hours(bill, scheduled))

    def cheaper(self, bill: Bill) -> str:
        """``FIFO ≈ 12.3 h; with halving ≈ 4.1 h``: the run's scheduler, or halving at its defaults on a FIFO run."""
        fifo = f"FIFO ≈ {self.hours(bill, False):.1f} h"
        if self.scheduled:
            return f"{fifo}; with {self.scheduler.type} ≈ {self.hours(bill, True):.1f} h"
        sch = self.scheduler
        first = min(sch.first_rung, self.epochs - 1)
        if first < 1 or self.trials < 2:
            return fifo
        share = halving_share(self.epochs, first, sch.reduction_factor, self.trials)
        search, final = self.stage_hours(bill, False)
        startup_h = sum(bill.prices[a].startup_s for a in self.arms) * self.trials / self.slots / 3600.0
        halved = startup_h + (search - startup_h) * share + final
        return (
            f"{fifo}; with halving (search.scheduler: {{type: halving, first_rung: {first}, reduction_factor: "
            f"{sch.reduction_factor:g}}}) ≈ {halved:.1f} h"
        )

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


class ArmCell(Protocol):
    """What pricing reads of a table's cell (:class:`study.table.spec.TableCell`): its arm and its spec. A protocol, so
    that this module does not import the table spec, which imports it."""

    @property
    def arm(self) -> str: ...

    @property
    def spec(self) -> StudySpec: ...


def arm_specs(cells: Iterable[ArmCell]) -> dict[str, StudySpec]:
    """Each arm's first cell's spec (a table's ``cells``): what a calibration measures of the arm."""
    first: dict[str, StudySpec] = {}
    for cell in cells:
        first.setdefault(cell.arm, cell.spec)
    return first


def calibrate_table(cells: Iterable[ArmCell]) -> Calibration:
    """Measure each arm of a table (its ``cells``) on its first cell's spec (:func:`study.search.calibration.calibrate`)."""
    return calibrate(arm_specs(cells))


def study_priced(spec: StudySpec) -> Priced:
    """A study's bill's multipliers: a table of one arm (its family), one cell per ``search.replicates``."""
    s = spec.search
    return Priced(
        (spec.family,) * s.replicates, s.num_trials, spec.final.seeds, spec.train.epochs, s.max_concurrent, s.scheduler
    )


def study_bill(spec: StudySpec, calibration: Calibration | None) -> Bill | None:
    """A study's bill: measured (``calibration`` of its family), else the spec's assumed ``search.epoch_seconds``, else
    none."""
    cost = search_cost(spec.validation)
    if calibration is not None:
        return measured_bill(calibration, cost)
    seconds = spec.search.epoch_seconds
    return None if seconds is None else assumed_bill([spec.family], seconds, cost)


def study_size_line(spec: StudySpec, bill: Bill | None = None) -> str:
    """A study's size and bill in one line (before it starts, and ``--plan``): its trials (× its replicates), FIFO's
    hours and its scheduler's under ``bill``, or unpriced."""
    s, v, epochs, priced = spec.search, spec.validation, spec.train.epochs, study_priced(spec)
    folds = v.folds if v.kind == "kfold" else 1
    models = {"kfold": f"{v.folds} folds", "holdout": "holdout"}.get(v.kind, "test selection")
    replicated = f" × {s.replicates} replicates" if s.replicates > 1 else ""
    seeds = f"{s.replicates} × {spec.final.seeds}" if s.replicates > 1 else f"{spec.final.seeds}"
    line = (
        f"Study {spec.name}: {s.num_trials} trials{replicated} × {epochs} epochs ({models}), then {seeds} final seeds; "
        f"{s.max_concurrent} at a time; every trial to the end (FIFO): "
        f"{s.replicates * s.num_trials * folds * epochs} fold-model-epochs"
    )
    if bill is None:
        return line
    line += f", ≈ {priced.hours(bill, False):.2f} h on {s.max_concurrent} slots {bill.unit_text()}"
    if priced.scheduled:
        line += (
            f"; with {s.scheduler.type}: the search ≈ {priced.share():.0%} of its epochs, "
            f"≈ {priced.hours(bill, True):.2f} h"
        )
    return line
