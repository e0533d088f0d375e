"""``load_plan``: the one place a spec file becomes a plan, and the one place "study or table?" is asked.

Every command reads its spec through it (``study.run``, ``study.status``, ``dmlstudy slurm`` and ``kuberay``): a table
spec (it names ``arms``) → its plan (:func:`study.intake.cells.parse_table`); a study spec file or a study's directory
(:func:`study.intake.spec_reader.load_study`) → the plan of one arm on one condition
(:meth:`study.intake.plan.StudyPlan.of_study`); the directory of a table (it keeps ``table.yaml`` beside its
``spec.yaml``) → the table's plan again, so ``dmlstudy status runs/<table>/`` shows its cells. After it, a consumer
varies by the plan's data, never by its kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from study.intake.cells import parse_table
from study.intake.layout import StudyLayout
from study.intake.plan import StudyPlan
from study.intake.spec_reader import apply_overrides, load_study, parse_spec, read_raw
from study.runtime.storage import read_bytes
from trainables.schema.spec import StudySpec

__all__ = ["load_plan", "kept_table"]


def load_plan(path: str | Path, overrides: list[str] | None = None, *, family_rules: bool = True) -> StudyPlan:
    """The plan of the spec file or study directory ``path`` with ``--set`` ``overrides`` applied; one-line
    :class:`~trainables.schema.errors.SpecError` for bad input. ``family_rules=False``: see
    :func:`study.intake.spec_reader.parse_spec` (a command that trains nothing need not import the trainers)."""
    if "://" in str(path) or Path(path).is_dir():  # a study's directory, local or on an object store
        base = load_study(path, overrides, family_rules=family_rules)  # its spec.yaml, where the directory lies
        return kept_table(base, overrides) or StudyPlan.of_study(base)
    raw = read_raw(path, overrides)
    if _is_table(raw):
        return parse_table(raw, str(path))
    return StudyPlan.of_study(parse_spec(raw, str(path), family_rules=family_rules))


def kept_table(base: StudySpec, overrides: list[str] | None = None) -> StudyPlan | None:
    """The table whose directory ``base`` (a run's ``spec.yaml``) lies in, as it was started (its ``table.yaml``),
    found where the directory lies now (as :func:`study.intake.spec_reader.load_study` finds a study); ``None`` for a
    study's directory."""
    table_file = StudyLayout.for_spec(base).table_file
    if (written := read_bytes(table_file)) is None:
        return None
    raw = apply_overrides({**_unset_nulls(yaml.safe_load(written)), "storage": base.storage}, overrides or [])
    return parse_table(raw, table_file)


def _unset_nulls(tree: Any) -> Any:
    """A kept spec without its ``None`` values, at every depth: ``table.yaml`` holds every field, an unset one as null
    (``search.metric``: the cells' default), which the spec reads as unset."""
    if isinstance(tree, dict):
        return {k: _unset_nulls(v) for k, v in tree.items() if v is not None}
    return tree


def _is_table(raw: Any) -> bool:
    """A raw spec mapping that describes a table (it names ``arms``)."""
    return isinstance(raw, dict) and "arms" in raw
