"""What the dashboards read of a study from its parent MLflow run (:class:`StudyInfo`, :func:`read_study_info`): what it
searched, on which metric and split, where it lives, its stage and reference, how reliable each cell's choice was.
:mod:`dashboards.load` reads the runs and calls it once per experiment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trainables.schema import record as R
from trainables.schema.metric_names import MAP_AT_R, NMI, OBJECTIVE, R_PRECISION, TEST_PREFIX, VAL_PREFIX, mean_last
from trainables.schema.space import Mode

if TYPE_CHECKING:
    from study.tracking import MlflowClient, Run

__all__ = ["StudyInfo", "read_study_info", "float_or_none"]


@dataclass(frozen=True)
class StudyInfo:
    """An experiment's parent run: what the study searched and where it lives."""

    experiment: str
    experiment_id: str
    parent_run_id: str | None
    status: str | None
    study_dir: str | None
    metric: str
    mode: Mode
    num_trials_planned: int | None
    #: Searched parameter names (spec ``search.space`` keys) → whether sampled on a log scale.
    space: dict[str, bool]
    best_trial_id: str | None
    #: Where the hyperparameters were selected: ``validation`` classes, ``test`` classes, or None (unknown).
    selection: str | None = None
    #: ``validation.kind`` of the study (kfold, holdout, none), when recorded.
    validation: str | None = None
    #: The parent run's ``stage`` tag: search, final or done (:data:`trainables.schema.record.STAGE`).
    stage: str | None = None
    #: A table's reference family (:data:`trainables.schema.record.REFERENCE`), None for a study.
    reference: str | None = None
    #: ``search.replicates``: independent searches per cell (a study: per study), each retrained on the final seeds.
    replicates: int = 1
    #: How reliable each cell's choice is: the parent's ``selection/<cell>/<what>`` metrics
    #: (:func:`trainables.schema.record.selection_metric`), by cell, then by what.
    reliability: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Each cell's selection line, as the console, ``--status`` and the report print it (the parent's
    #: ``selection/<cell>/line`` tags: :func:`study.final.reliability.line_tag`), by cell.
    selection_lines: dict[str, str] = field(default_factory=dict)

    @property
    def optuna_db(self) -> Path | None:
        if not self.study_dir:
            return None
        path = Path(self.study_dir) / R.OPTUNA_DB
        return path if path.is_file() else None


def float_or_none(text: str | None) -> float | None:
    """``text`` as a float; ``None`` when absent or not a number."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# Evaluation metrics whose bare name (a store written before metrics carried their split) means the test split.
_LEGACY_TEST = (NMI, MAP_AT_R, R_PRECISION, "recall_at_")


def _selection(tags: dict[str, str], trials: list[Run], metric: str) -> str | None:
    """The parent's ``selection`` tag, else the trials' one, else inferred from the search metric's split."""
    found = tags.get(R.SELECTION) or next(
        (t.data.tags[R.SELECTION] for t in trials if t.data.tags.get(R.SELECTION)), ""
    )
    if found:
        return found
    if metric.startswith(VAL_PREFIX):
        return R.SELECTION_VALIDATION
    if metric.startswith(TEST_PREFIX) or metric.startswith(_LEGACY_TEST):
        return R.SELECTION_TEST
    return None


def _default_metric(trials: list[Run]) -> str:
    """Without a recorded ``search.metric``: Recall@1 on the split the runs report (validation first)."""
    for name in (VAL_PREFIX + OBJECTIVE, TEST_PREFIX + OBJECTIVE):
        if any(name in t.data.metrics for t in trials):
            return name
    return OBJECTIVE


def _spec_space(study_dir: str | None) -> dict[str, bool] | None:
    """``search.space`` of the study's ``spec.yaml`` as name → log scale; None when the file cannot be read."""
    import yaml

    if not study_dir:
        return None
    try:
        spec = yaml.safe_load((Path(study_dir) / R.SPEC_FILE).read_text(encoding="utf-8"))
        space = spec["search"]["space"] or {}
        return {str(name): bool((dim or {}).get("log", False)) for name, dim in space.items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None


def _params_space(params: dict[str, str]) -> dict[str, bool]:
    """The searched names and log flags from the parent's flattened ``search.space.<name>.type``/``.log`` params."""
    space: dict[str, bool] = {}
    for key in params:
        if key.startswith(R.PARAM_SEARCH_SPACE) and key.endswith(".type"):
            name = key.removeprefix(R.PARAM_SEARCH_SPACE).removesuffix(".type")
            space[name] = params.get(f"{R.PARAM_SEARCH_SPACE}{name}.log") == "True"
    return space


def read_study_info(client: MlflowClient, experiment: Any, parent: Run | None, trials: list[Run]) -> StudyInfo:
    """The study of ``experiment`` as its parent run (``None``: none found) and its trial runs record it."""
    params = parent.data.params if parent else {}
    tags = parent.data.tags if parent else {}
    metric = params.get(R.PARAM_SEARCH_METRIC) or _default_metric(trials)
    if (k := params.get(R.PARAM_SELECT_MEAN_LAST)) is not None:  # what ranked its trials (search.select_on)
        metric = mean_last(int(k), metric)
    space = _spec_space(tags.get(R.STUDY_DIR))
    if space is None:
        space = _params_space(params)
    planned = float_or_none(params.get(R.PARAM_SEARCH_NUM_TRIALS))
    return StudyInfo(
        experiment=experiment.name,
        experiment_id=experiment.experiment_id,
        parent_run_id=parent.info.run_id if parent else None,
        status=parent.info.status if parent else None,
        study_dir=tags.get(R.STUDY_DIR),
        metric=metric,
        mode=cast(Mode, params.get(R.PARAM_SEARCH_MODE, "max")),
        num_trials_planned=int(planned) if planned is not None else None,
        space=space,
        best_trial_id=tags.get(R.BEST_TRIAL_ID) or None,
        selection=_selection(tags, trials, metric),
        validation=tags.get(R.VALIDATION) or params.get(R.PARAM_VALIDATION_KIND) or None,
        stage=tags.get(R.STAGE) or None,
        reference=tags.get(R.REFERENCE) or None,
        replicates=int(tags.get(R.REPLICATES) or params.get(R.PARAM_SEARCH_REPLICATES) or 1),
        reliability=_reliability(parent.data.metrics if parent else {}),
        selection_lines=_selection_lines(tags),
    )


def _reliability(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """The parent's ``selection/<cell>/<what>`` metrics by cell (a cell's label may hold dots, never a slash)."""
    out: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        head, _, what = key.rpartition("/")
        if head.startswith(R.SELECTION_PREFIX):
            out.setdefault(head.removeprefix(R.SELECTION_PREFIX), {})[what] = value
    return out


def _selection_lines(tags: dict[str, str]) -> dict[str, str]:
    """The parent's ``selection/<cell>/line`` tags by cell (:func:`study.final.reliability.line_tag`)."""
    out = {}
    for key, value in tags.items():
        head, _, what = key.rpartition("/")
        if head.startswith(R.SELECTION_PREFIX) and what == _LINE:
            out[head.removeprefix(R.SELECTION_PREFIX)] = value
    return out


#: The last part of a selection line's tag (:func:`study.final.reliability.line_tag`).
_LINE = R.SELECTION_LINE
