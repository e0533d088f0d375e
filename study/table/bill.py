"""The bill of a table or a study before it starts: hours on its ``max_concurrent`` slots, per arm from a measured
:class:`~study.search.calibration.Calibration` (or from the spec's assumed ``search.epoch_seconds``), for FIFO and for
its scheduler; after the run, the same bill beside what the trials actually cost (docs/tables.md, "The measured bill").

A trial is priced as its start-up plus its epochs: a search trial ``startup + share · epochs · search_epoch_s``, a
final run ``startup + epochs · final_epoch_s``, summed over every cell and divided by the slots. ``share`` is the
scheduler's expected share of the search's epochs (1 for FIFO). An assumed ``epoch_seconds`` is the old unit: a model-
epoch on all training classes, no start-up, so a search trial's epoch is ``search_cost`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from study.search.calibration import ArmCalibration, Calibration, calibrate
from study.table.asha_cost import expected_share, halving_share
from trainables.schema.space import SchedulerSpec
from trainables.schema.spec import StudySpec

if TYPE_CHECKING:
    from study.table.spec import Table

__all__ = [
    "ArmPrice",
    "Bill",
    "measured_bill",
    "assumed_bill",
    "scheduler_share",
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


def calibrate_table(table: Table) -> Calibration:
    """Measure each arm of ``table`` on its first cell's spec (:func:`study.search.calibration.calibrate`)."""
    first: dict[str, StudySpec] = {}
    for cell in table.cells:
        first.setdefault(cell.arm, cell.spec)
    return calibrate(first)


def study_size_line(spec: StudySpec, calibration: Calibration | None = None) -> str:
    """A study's size and bill in one line (``--plan``): its trials, FIFO's hours and its scheduler's, measured by
    ``calibration`` (the study's one family) or unpriced."""
    s, v, epochs = spec.search, spec.validation, spec.train.epochs
    folds = v.folds if v.kind == "kfold" else 1
    models = {"kfold": f"{v.folds} folds", "holdout": "holdout"}.get(v.kind, "test selection")
    line = (
        f"Study {spec.name}: {s.num_trials} trials × {epochs} epochs ({models}), then {spec.final.seeds} final seeds; "
        f"{s.max_concurrent} at a time; every trial to the end (FIFO): {s.num_trials * folds * epochs} fold-model-epochs"
    )
    if calibration is None:
        return line
    bill = measured_bill(calibration, 1.0)
    arm = next(iter(bill.prices))

    def hours(share: float) -> float:
        search = s.num_trials * bill.trial_s(arm, share * epochs)
        return (search + spec.final.seeds * bill.trial_s(arm, epochs, final=True)) / s.max_concurrent / 3600.0

    p = bill.prices[arm]
    line += (
        f", ≈ {hours(1.0):.2f} h on {s.max_concurrent} slots measured on {bill.device} ({p.search_epoch_s:.3g} s per "
        f"trial epoch, {p.final_epoch_s:.3g} s per final epoch, start-up {p.startup_s:.2g} s a trial)"
    )
    if s.scheduler.type != "fifo":
        share = scheduler_share(s.scheduler, epochs, s.num_trials)
        line += f"; with {s.scheduler.type}: the search ≈ {share:.0%} of its epochs, ≈ {hours(share):.2f} h"
    return line
