"""What the driver records of each trial, in every stage: its MLflow params and tags (:func:`describe_trial`, which
Ray pickles into each stage's experiment with the stage's MLflow writer, :func:`stage_callback`), and the spec a trial is
given (:func:`trial_spec_data`). Apart from the driver so that the stages after the search (:mod:`study.search.stages`)
and the driver share them; :mod:`study.search.driver` re-exports :func:`describe_trial`, the name a pickle written
before this module existed refers to."""

from __future__ import annotations

from typing import Any

from study.intake.layout import StudyLayout
from study.intake.validation import spec_from_tune_config, trial_params
from study.search.context import StudyContext
from study.tracking.callback import MlflowTrialCallback, ParentRun
from study.tracking.optuna_link import OptunaRunLink
from study.tracking.store import TrackingStore
from trainables.schema import record as R
from trainables.schema.spec import StudySpec
from trainables.schema.trial import FINAL_KEY, RACE_KEY, trial_stage

__all__ = ["describe_trial", "selection_tag", "trial_spec_data", "stage_callback"]


def describe_trial(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """MLflow params (the trial's full flattened config) and grouping tags of one trial."""
    spec = spec_from_tune_config(config)
    noise = spec.dataset.noise
    stage = trial_stage(config)
    tags = {
        R.STUDY: spec.name,
        R.FAMILY: spec.family,
        R.DATASET: spec.dataset.name,
        R.NOISE_KIND: noise.kind,
        R.NOISE_RATIO: str(noise.ratio if noise.kind != "none" else 0.0),
        R.SUBSET: spec.dataset.subset,
        R.SEED: str(spec.seed),
        R.STAGE: stage,
        R.VALIDATION: spec.validation.kind if stage != R.STAGE_FINAL else "none",  # a later stage's run may search
        R.VAL_LABELS: spec.validation.labels,
        R.SELECTION: selection_tag(spec),
    }
    if stage in (R.STAGE_FINAL, R.STAGE_RACE):
        point = config[FINAL_KEY if stage == R.STAGE_FINAL else RACE_KEY]
        tags[R.GROUP] = point[R.GROUP]
        tags[R.SOURCE_TRIAL] = point[R.SOURCE_TRIAL]
    return trial_params(spec), tags


def selection_tag(spec: StudySpec) -> str:
    """Where the study's hyperparameters are selected: ``validation`` classes, or (``kind: none``) ``test``."""
    return R.SELECTION_VALIDATION if spec.validation.enabled else R.SELECTION_TEST


def trial_spec_data(spec: StudySpec) -> dict[str, Any]:
    """What a trial is given of the spec (Ray writes it to every trial's ``params.json``): all but ``tracking``,
    which stays with the driver (it alone writes to MLflow and Optuna) and may hold credentials."""
    return spec.model_dump(mode="json", exclude={"tracking"})


def stage_callback(context: StudyContext, store: TrackingStore, parent: str, stage: str) -> MlflowTrialCallback:
    """The driver-side MLflow writer of one stage's Tuner (``stage``: the search's, whose experiment may run a table's
    final trials too, or the final stage's): child runs under ``parent``, each tagged with its own stage and its
    Tuner's experiment; a search run's id is written to its Optuna trial too."""
    spec, layout = context.spec, context.layout
    callback = MlflowTrialCallback(
        ParentRun(layout.tracking_uri, store.experiment_id, parent),
        describe_trial=describe_trial,
        total_epochs=spec.train.epochs,
        stage=stage,
        on_run=OptunaRunLink(layout.optuna_url, spec.name) if stage == R.STAGE_SEARCH else None,
    )
    # A later round's experiments lie below the study directory (study.search.stages.rounds, ``rounds/3/tune``): their
    # runs are tagged apart, so that a round's Tuner reconciles its own runs only, never an earlier round's.
    if within := _within(layout.root, StudyLayout.for_spec(spec).root):
        callback.ray_experiment = f"{within}/{callback.ray_experiment}"
    return callback


def _within(root: str, study_root: str) -> str:
    """Where ``root`` lies below ``study_root`` (``rounds/3``); empty at the top, or elsewhere."""
    return root[len(study_root) + 1 :] if root.startswith(study_root + "/") else ""
