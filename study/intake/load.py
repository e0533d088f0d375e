"""``load_plan``: the one place a spec file becomes a plan, and the one place "study or table?" is asked.

Every command reads its spec through it (``study.run``, ``study.status``, ``dmlstudy slurm`` and ``kuberay``): a table
spec (it names ``arms``) → its plan (:func:`study.intake.cells.parse_table`); a study spec file or a study's directory
(:func:`study.intake.loading.load_study`) → the plan of one arm on one condition
(:meth:`study.intake.plan.StudyPlan.of_study`). After it, a consumer varies by the plan's data, never by its kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from study.intake.cells import parse_table
from study.intake.loading import load_study, parse_spec, read_raw
from study.intake.plan import StudyPlan

__all__ = ["load_plan"]


def load_plan(path: str | Path, overrides: list[str] | None = None, *, family_rules: bool = True) -> StudyPlan:
    """The plan of the spec file or study directory ``path`` with ``--set`` ``overrides`` applied; one-line
    :class:`~trainables.schema.errors.SpecError` for bad input. ``family_rules=False``: see
    :func:`study.intake.loading.parse_spec` (a command that trains nothing need not import the trainers)."""
    if "://" in str(path) or Path(path).is_dir():  # a study's directory, local or on an object store
        return StudyPlan.of_study(load_study(path, overrides, family_rules=family_rules))
    raw = read_raw(path, overrides)
    if _is_table(raw):
        return parse_table(raw, str(path))
    return StudyPlan.of_study(parse_spec(raw, str(path), family_rules=family_rules))


def _is_table(raw: Any) -> bool:
    """A raw spec mapping that describes a table (it names ``arms``)."""
    return isinstance(raw, dict) and "arms" in raw
