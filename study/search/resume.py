"""A new study or a resumed one: the driver decides before it writes anything, and refuses the ambiguous cases."""

from __future__ import annotations

from typing import Any

import yaml

from study.intake.layout import StudyLayout
from study.intake.plan import StudyPlan
from study.runtime.storage import read_bytes
from study.tracking.credentials import redacted_spec
from trainables.schema.errors import StudyExistsError
from trainables.schema.space import SchedulerSpec
from trainables.schema.trial import flatten

__all__ = ["check_resume", "written_text", "OPERATIONAL_KEYS"]

#: Spec keys that say how to run a study, not what it is: a resume may change them.
OPERATIONAL_KEYS = frozenset({"tracking.outage_budget_s"})

#: What a table's spec as written (``table.yaml``) held implicitly before it could say so: a table started before
#: tables took a scheduler saved none (it ran FIFO, today's default); one started before replicates saved none (it
#: searched each cell once, today's default; one started before ``search.select_on`` ranked on the last epoch).
_WRITTEN_BEFORE = {
    "search": {"scheduler": SchedulerSpec().model_dump(mode="json"), "replicates": 1, "select_on": "last"}
}


def written_text(plan: StudyPlan) -> bytes:
    """The spec as written (:attr:`~study.intake.plan.StudyPlan.written`: a table's), as its directory keeps it."""
    return yaml.safe_dump(plan.written, sort_keys=False).encode()


def _changed(saved: bytes | None, current: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """The keys at which the ``saved`` spec (``None``: none saved) and the ``current`` one differ, besides what says
    how to run it (:data:`OPERATIONAL_KEYS`); ``before``: what the saved one held implicitly."""
    if saved is None:
        return []
    kept = flatten(yaml.safe_load(saved) or {})
    # What it held implicitly, unless it holds a mapping there (search.replicates: {min, max} against the default 1).
    implied = {k: v for k, v in flatten(before or {}).items() if not any(s.startswith(f"{k}.") for s in kept)}
    old = {**implied, **kept}
    new = flatten(current)
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in OPERATIONAL_KEYS)


def check_resume(plan: StudyPlan, layout: StudyLayout, resume: bool) -> bool:
    """Decide between a new run and a resumed one; refuse the ambiguous cases, and a resume whose spec changed (its
    ``spec.yaml``, and a table's ``table.yaml``). Returns ``resuming`` (Ray's search experiment can be restored)."""
    from ray.tune import Tuner

    spec = plan.base

    restorable = Tuner.can_restore(layout.tune_dir)
    # spec.yaml without Ray's state: a driver died before Tune's first snapshot, so no trial has run yet.
    exists = restorable or read_bytes(layout.spec_file) is not None
    if exists and not resume:
        raise StudyExistsError(
            f"study {spec.name!r} already exists in {layout.root}; run again with --resume to continue it, "
            "or change `name` or `storage` to start a new one"
        )
    if resume and not exists:
        raise StudyExistsError(f"--resume: there is no study {spec.name!r} in {layout.root} to resume")
    if exists:
        # A table's own spec first: what the user changed is there (its base only follows from it).
        changed = _changed(read_bytes(layout.table_file), plan.written, _WRITTEN_BEFORE) if plan.written else []
        changed = changed or _changed(read_bytes(layout.spec_file) or b"{}", redacted_spec(spec))
        if changed:
            raise StudyExistsError(
                f"--resume: the {'spec' if not plan.written else plan.noun} differs from the one {plan.noun} "
                f"{spec.name!r} was started with at {', '.join(changed[:5])}; a resumed {plan.noun} must keep its spec"
            )
    return restorable
