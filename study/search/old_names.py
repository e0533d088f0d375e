"""The names an older study's pickles use for what has since moved, so that ``--resume`` still restores it.

Ray pickles the search stage into the study directory (the ``Tuner`` with its searcher, scheduler, callbacks and
directory-name function; the searcher's state with its Optuna space and sampler), and a pickle names each class and
function by the module it was defined in. The search engine moved into :mod:`study.search`, and later a
table's dispatcher, scheduler and live view into the one path (:mod:`study.search.cell_search`,
:mod:`study.search.cell_asha`, :mod:`study.progress`); a study or table started before names the old modules. :func:`accept_old_names` lets the unpickler find them, as aliases that
resolve each name at the module where it lives now: nothing imports an old name, and what is pickled again is pickled
under the new one.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["MOVED", "accept_old_names", "Table", "TableCell", "RunSpec"]

#: Old module → the modules that now hold what a pickle may name from it.
MOVED: dict[str, tuple[str, ...]] = {
    "study.bookkeeping": ("study.search.study_search", "study.search.persistent_asha"),
    "study.search_space": ("study.search.space",),
    "study.ordered_search": ("study.search.ordered_sampler",),
    "study.stage_tuners": ("study.search.tuners",),
    "study.tuner": ("study.search.driver", "study.search.trial_record"),
    "study.table.search": ("study.search.cell_search",),
    "study.table.scheduler": ("study.search.cell_asha",),
    "study.table.progress": ("study.progress",),
    # Intake became a folder, and the table's own modules dissolved into the one plan.
    "study.plan": ("study.intake.plan",),
    "study.layout": ("study.intake.layout",),
    "study.loading": ("study.intake.spec_reader",),
    "study.intake.loading": ("study.intake.spec_reader",),
    # One name per concept, and the command layer in its own package.
    "study.runtime.run_progress": ("study.runtime.driver_run",),
    "study.tracking.stores": ("study.tracking.doors",),
    "study.runtime.slurm_status": ("study.runtime.slurm_queue",),
    "study.deploy.slurm.sbatch_options": ("study.deploy.slurm.sbatch_reader",),
    "study.invocation": ("study.commands.invocation",),
    "study.validation": ("study.intake.validation",),
    "study.table.spec": ("study.intake.plan", "study.intake.cells", "study.intake.load", "study.search.old_names"),
    "study.table.asha_cost": ("study.intake.asha_cost", "trainables.schema.scheduler.asha"),
    "study.table.bill": ("study.bill",),
    "study.table.status": ("study.cell_status",),
    "study.table.run": ("study.search.driver",),
    # What the driver records of each trial moved beside it (a pickle names study.search.driver for
    # ``describe_trial``, which the driver re-exports; this line is for the old ``study.tuner`` one).
}


class _Unused:
    """A class an older study's pickle names that no longer exists: the unpickler builds it (its state as it was) and
    nothing reads it. ``study.table.spec.Table`` was held by the live view of a table started before the one path; a
    restored stage is given this driver's own callbacks (:mod:`study.search.tuners`), so the old one is dropped."""


class Table(_Unused):
    """``study.table.spec.Table`` (dissolved into :class:`study.intake.plan.StudyPlan`)."""


class TableCell(_Unused):
    """``study.table.spec.TableCell`` (now :class:`study.intake.plan.PlanCell`)."""


class RunSpec(_Unused):
    """``study.table.spec.RunSpec`` (now :class:`study.intake.plan.StudyPlan` itself)."""


def _moved(old: str, homes: tuple[str, ...]) -> types.ModuleType:
    alias = types.ModuleType(old, f"moved to {', '.join(homes)}: read only by the unpickler of an older study")

    def resolve(name: str) -> Any:  # PEP 562: called for a name the alias does not hold
        for home in homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} (moved to {', '.join(homes)}) has no attribute {name!r}")

    alias.__getattr__ = resolve  # type: ignore[method-assign]
    return alias


def accept_old_names() -> None:
    """Before Ray unpickles a stage to restore it: the old module names resolve to where their contents live now.
    Idempotent; a name that is a real module in this process is left as it is."""
    for old, homes in MOVED.items():
        sys.modules.setdefault(old, _moved(old, homes))
