"""A new study or a resumed one: the driver decides before it writes anything, and refuses the ambiguous cases."""

from __future__ import annotations

import yaml

from study.layout import StudyLayout
from study.runtime.storage import read_bytes
from study.tracking.credentials import redacted_spec
from trainables.schema.errors import StudyExistsError
from trainables.schema.spec import StudySpec
from trainables.schema.trial import flatten

__all__ = ["check_resume", "OPERATIONAL_KEYS"]

#: Spec keys that say how to run a study, not what it is: a resume may change them.
OPERATIONAL_KEYS = frozenset({"tracking.outage_budget_s"})


def check_resume(spec: StudySpec, layout: StudyLayout, resume: bool) -> bool:
    """Decide between a new study and a resumed one; refuse the ambiguous cases. Returns ``resuming`` (Ray's
    search experiment can be restored)."""
    from ray.tune import Tuner

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
        saved = flatten(yaml.safe_load(read_bytes(layout.spec_file) or b"{}"))
        current = flatten(redacted_spec(spec))
        changed = sorted(
            k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k) and k not in OPERATIONAL_KEYS
        )
        if changed:
            raise StudyExistsError(
                f"--resume: the spec differs from the one study {spec.name!r} was started with at "
                f"{', '.join(changed[:5])}; a resumed study must keep its spec"
            )
    return restorable
