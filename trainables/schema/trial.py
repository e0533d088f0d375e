"""From a study spec to one trial's spec: sampled values written at their paths, then validated by the schema.

Search-space names: a bare name (``mu``) is a family hyperparameter, i.e. ``params.mu``; ``seed`` and ``family``
are the top-level keys; a dotted name (``train.optimizer.lr``) is that path in the spec. Ray Tune hands a trial
``{"spec": <study spec>, <name>: <value>, ...}`` (search stage) or ``{"spec": ..., "final": {"group": ...,
"params": {...}}}`` (final stage); :func:`resolve_trial_spec` turns either into the trial's :class:`StudySpec`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.replicates import REPLICATE_TAGS
from trainables.schema.scheduler import SCHEDULER_NAMES
from trainables.schema.spec import StudySpec

__all__ = [
    "SPEC_KEY",
    "FINAL_KEY",
    "RACE_KEY",
    "STAGE_KEYS",
    "CELL_KEY",
    "param_path",
    "set_path",
    "flatten",
    "sampled_values",
    "trial_stage",
    "resolve_trial_spec",
    "spec_error",
]

#: Key of the study spec inside a Ray Tune trial config; the other keys are the sampled parameters.
SPEC_KEY = "spec"
#: Key of a final-stage trial's point inside its Ray Tune config: ``{"group": ..., "params": {name: value}}``,
#: the best configuration of its group with the final seed written over ``seed``.
FINAL_KEY = "final"
#: Key of a race trial's point inside its Ray Tune config (``final.race``): ``{"group": ..., "source_trial": ...,
#: "number": ..., "params": {name: value}}``, a finalist's sampled values with a race seed written over ``seed``. A race
#: trial trains and reports as a search trial (its validation classes, ``search.objective``); it belongs to no cell's
#: Optuna study.
RACE_KEY = "race"
#: The keys of the points of the stages after the search: a trial whose config holds one is no search trial.
STAGE_KEYS = (FINAL_KEY, RACE_KEY)
#: Key of a search trial's cell inside its Ray Tune config: the label of the plan's cell that asked for it (a table's
#: ``<arm>.<condition>``, a study's one cell), stamped by the searcher when the trial is asked, so the scheduler, the
#: progress view and the final stage read it instead of matching configs. Not a spec value: never part of a trial's
#: spec or its MLflow params. Trials asked before it existed carry none (``study.intake.plan.StudyPlan.cell_of`` finds theirs).
CELL_KEY = "cell"

_TOP_LEVEL_SEARCHABLE = ("seed", "family")
#: Tags pydantic inserts into error locations: the discriminated union's member (``space.lr.float.low``,
#: ``search.scheduler.halving.first_rung``).
_UNION_TAGS = ("float", "int", "categorical", *SCHEDULER_NAMES, *REPLICATE_TAGS)


def spec_error(error: ValidationError) -> SpecError:
    """The first error of a schema validation as a :class:`SpecError` naming its dotted key."""
    err = error.errors()[0]
    where = ".".join(str(p) for p in err["loc"] if p not in _UNION_TAGS and "[" not in str(p))
    kind = err["type"]
    if kind == "extra_forbidden":
        return SpecError(f"unknown key {where!r}")
    if kind == "missing":
        return SpecError(f"missing required key {where!r}")
    if kind == "union_tag_invalid":
        return SpecError(f"must be one of float, int, categorical (got {err['input'].get('type')!r})", f"{where}.type")
    if kind == "union_tag_not_found":
        return SpecError("missing 'type' (float, int or categorical)", where)
    if kind == "scheduler_type":  # the scheduler kinds' union (trainables.schema.scheduler): name the key it reads
        got = err["input"].get("type") if isinstance(err.get("input"), dict) else err.get("input")
        return SpecError(f"{str(err['msg']).removeprefix('type ')} (got {got!r})", f"{where}.type")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind.endswith(("_type", "_parsing")) or ("input" in err and kind.startswith(("greater", "less"))):
        msg = f"{msg} (got {err['input']!r})"
    return SpecError(msg, where)


def param_path(name: str) -> tuple[str, ...]:
    """Where a search-space name lives in the spec: ``mu`` → ``params.mu``; ``train.optimizer.lr`` as is."""
    if "." in name:
        return tuple(name.split("."))
    if name in _TOP_LEVEL_SEARCHABLE:
        return (name,)
    return ("params", name)


def set_path(tree: dict[str, Any], path: tuple[str, ...], value: Any, key: str) -> None:
    """Write ``value`` at ``path`` in a nested mapping, creating mappings on the way; ``key`` names the setting."""
    node = tree
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecError(f"{'.'.join(path[: i + 1])} is not a mapping", key)
        node = child
    node[path[-1]] = value


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def sampled_values(config: dict[str, Any]) -> dict[str, Any]:
    """The values a Ray Tune config sets over the study spec: the searcher's sample (search stage), or the
    best configuration of a group with its final seed (final stage), or a finalist with its race seed (race)."""
    for key in STAGE_KEYS:
        if key in config:
            return dict(config[key]["params"])
    return {k: v for k, v in config.items() if k not in (SPEC_KEY, CELL_KEY)}


def trial_stage(config: dict[str, Any]) -> str:
    """:data:`~trainables.schema.record.STAGE_FINAL` for a final-stage trial's config, ``STAGE_RACE`` for a race
    trial's, else ``STAGE_SEARCH``."""
    if FINAL_KEY in config:
        return R.STAGE_FINAL
    return R.STAGE_RACE if RACE_KEY in config else R.STAGE_SEARCH


def resolve_trial_spec(
    spec: StudySpec | dict[str, Any],
    sampled: dict[str, Any],
    family_params: Callable[[str], tuple[str, ...] | None] | None = None,
) -> StudySpec:
    """The spec of one trial: ``spec`` with each sampled value written at its :func:`param_path`.

    With ``family`` sampled, fixed params may be shared by several families (``ms_alpha`` for ms/spms/bspml):
    ``family_params(name)`` gives the names the sampled family has (``None`` for an unknown family), and the
    trial keeps only those of the fixed ones. Sampled names are never dropped. Raises :class:`SpecError`.
    """
    tree = spec.model_dump(mode="json") if isinstance(spec, StudySpec) else copy.deepcopy(spec)
    known = family_params(sampled["family"]) if "family" in sampled and family_params is not None else None
    if known is not None:
        tree["params"] = {k: v for k, v in tree.get("params", {}).items() if k in known}
    for name, value in sampled.items():
        set_path(tree, param_path(name), value, f"search.space.{name}")
    try:
        return StudySpec.model_validate(tree)
    except ValidationError as e:
        raise spec_error(e) from None
