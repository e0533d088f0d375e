"""The search schedulers' state in the study directory: plain, versioned JSON (``scheduler_state.json``), not a pickle.

Ray Tune restores a scheduler from the pickle taken at the experiment's start, with empty rungs, so the study's own
schedulers (:class:`~study.search.cell_asha.CellASHA`, :class:`~study.search.halving.HalvingScheduler`) write what a
decision changed to this file and read it back the first time a restored driver calls them. The file holds only
names and numbers, so that neither a moved class nor a Ray upgrade can make it unreadable:

- ``schema`` and ``version``: :data:`~trainables.schema.record.SCHEDULER_STATE_SCHEMA` and
  :data:`~trainables.schema.record.SCHEDULER_STATE_VERSION`; a newer version is refused with one line;
- ``kind``: the scheduler that wrote it (``cell_asha`` or ``halving``); another kind's file is refused;
- the kind's own fields (:func:`cell_asha_fields` / ``HalvingScheduler``'s).

Studies started before the file existed kept a pickle (:data:`~trainables.schema.record.ASHA_STATE_FILE`, Ray's own
``ASHAScheduler`` objects per cell, or the halving cells): :func:`read_state` reads it once, converted by the kind's
``legacy`` function, and the next write is JSON (:func:`state_paths` finds each from the ``state_file`` a scheduler
holds: a scheduler an older driver pickled holds the ``.pkl``).
"""

from __future__ import annotations

import json
import math
import pickle
import posixpath
from collections.abc import Callable
from typing import Any

from study.runtime.compat import asha_admit, asha_rungs, asha_trial_info
from study.runtime.storage import read_bytes, write_bytes
from trainables.schema import record as R
from trainables.schema.errors import StudyError

__all__ = [
    "state_paths",
    "read_state",
    "write_state",
    "cell_asha_fields",
    "restore_cell_asha",
    "cell_asha_legacy",
    "halving_fields",
    "halving_cells",
    "halving_legacy",
]


def state_paths(state_file: str) -> tuple[str, str]:
    """``(the JSON file, an older study's pickle)`` of a scheduler holding ``state_file``: a scheduler built today holds
    its JSON file, the pickle then being ``asha_state.pkl`` beside it; one that an older driver pickled holds its
    pickle, and the JSON file is ``scheduler_state.json`` beside it."""
    directory = posixpath.dirname(state_file)
    if state_file.endswith(".pkl"):
        return f"{directory}/{R.SCHEDULER_STATE_FILE}", state_file
    return state_file, f"{directory}/{R.ASHA_STATE_FILE}"


def _number(value: float) -> float | str:
    """A value JSON can hold exactly: ``NaN`` and ±inf (a trial whose metric was not finite) as their names."""
    return value if math.isfinite(value) else repr(value)


def write_state(state_file: str, kind: str, fields: dict[str, Any]) -> None:
    """Write ``fields`` as ``kind``'s state, whole or not at all (temp file and rename)."""
    path, _ = state_paths(state_file)
    head = {"schema": R.SCHEDULER_STATE_SCHEMA, "version": R.SCHEDULER_STATE_VERSION, "kind": kind}
    write_bytes(path, json.dumps({**head, **fields}, sort_keys=True, allow_nan=False).encode())


def read_state(state_file: str, kind: str, legacy: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """``kind``'s saved fields: from the JSON file, else from an older study's pickle through ``legacy``; ``None`` when
    neither exists (a new study). Raises :class:`StudyError` (one line naming the file) for a file of another schema,
    kind or a newer version, or one that is not JSON."""
    path, old = state_paths(state_file)
    data = read_bytes(path)
    if data is None:
        pickled = read_bytes(old)  # the study's own file, written by its scheduler before this format existed
        return None if pickled is None else legacy(pickle.loads(pickled))  # noqa: S301
    try:
        state = json.loads(data)
    except ValueError as e:
        raise StudyError(f"{path}: not the scheduler's state ({e}); was the file edited?") from None
    if not isinstance(state, dict) or state.get("schema") != R.SCHEDULER_STATE_SCHEMA:
        raise StudyError(f"{path}: not a {R.SCHEDULER_STATE_SCHEMA} file")
    version = state.get("version")
    if not isinstance(version, int) or version > R.SCHEDULER_STATE_VERSION:
        raise StudyError(
            f"{path}: state version {version!r}; this code reads up to {R.SCHEDULER_STATE_VERSION}: "
            "resume the study with the code that wrote it, or a newer one"
        )
    if state.get("kind") != kind:
        raise StudyError(f"{path}: written by the {state.get('kind')!r} scheduler, and the spec's is {kind!r}")
    return state


# -------------------------------------------------------------------------------------------- CellASHA's fields


def cell_asha_fields(per_cell: dict[str, Any], trial_cell: dict[str, str]) -> dict[str, Any]:
    """CellASHA's state: each cell's rungs (milestone, then trial id → the value Ray recorded, sign-adjusted) and
    the trials it still judges, and every trial's cell."""
    cells = {
        label: {
            "rungs": [[m, {t: _number(v) for t, v in recorded.items()}] for m, recorded in asha_rungs(s).items()],
            "live": sorted(asha_trial_info(s)),
        }
        for label, s in per_cell.items()
    }
    return {"cells": cells, "trial_cell": dict(trial_cell)}


def restore_cell_asha(per_cell: dict[str, Any], fields: dict[str, Any], path: str) -> dict[str, str]:
    """Put the saved rungs and live trials into ``per_cell``'s new ASHA schedulers (the spec's, so their milestones
    are the saved ones); returns the trials' cells."""
    for label, saved in fields["cells"].items():
        scheduler = per_cell.get(label)
        if scheduler is None:
            raise StudyError(f"{path}: cell {label!r} is not in the study's plan")
        rungs = asha_rungs(scheduler)
        for milestone, recorded in saved["rungs"]:
            if milestone not in rungs:
                raise StudyError(f"{path}: cell {label!r} has a rung at {milestone}, and the spec's rungs do not")
            rungs[milestone].update({t: float(v) for t, v in recorded.items()})
        for trial_id in saved["live"]:
            asha_admit(scheduler, trial_id)
    return dict(fields["trial_cell"])


def cell_asha_legacy(state: dict[str, Any]) -> dict[str, Any]:
    """An older study's pickle (``{"per_cell": {label: ASHAScheduler}, "trial_cell": …}``) as the JSON fields."""
    return cell_asha_fields(state["per_cell"], state["trial_cell"])


# ------------------------------------------------------------------------------------- HalvingScheduler's fields


def halving_fields(per_cell: dict[str, Any], trial_cell: dict[str, str], order: int) -> dict[str, Any]:
    """HalvingScheduler's state: per cell (a ``study.search.halving._Cell``) the value each trial reported at each
    rung, each rung's decision (the kept trials; ``None``: undecided), the ask order and the ended and stopped trials;
    every trial's cell, and the next ask order."""
    cells = {
        label: {
            "rungs": [{t: None if v is None else _number(v) for t, v in r.items()} for r in cell.rungs],
            "kept": [None if k is None else sorted(k) for k in cell.kept],
            "members": dict(cell.members),
            "ended": sorted(cell.ended),
            "stopped": sorted(cell.stopped),
        }
        for label, cell in per_cell.items()
    }
    return {"cells": cells, "trial_cell": dict(trial_cell), "order": order}


def halving_cells(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each cell's saved state as the keyword arguments of ``study.search.halving._Cell``."""
    return {
        label: {
            "rungs": [{t: None if v is None else float(v) for t, v in r.items()} for r in saved["rungs"]],
            "kept": [None if k is None else set(k) for k in saved["kept"]],
            "members": {t: int(order) for t, order in saved["members"].items()},
            "ended": set(saved["ended"]),
            "stopped": set(saved["stopped"]),
        }
        for label, saved in fields["cells"].items()
    }


def halving_legacy(state: dict[str, Any]) -> dict[str, Any]:
    """An older study's pickle (``{"per_cell": {label: _Cell}, "trial_cell": …, "order": …}``) as the JSON fields."""
    return halving_fields(state["per_cell"], state["trial_cell"], state["order"])
