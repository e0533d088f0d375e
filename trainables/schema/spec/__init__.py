"""The study spec as typed, frozen models: what a YAML study may say, checked for its own consistency.

These models know no registry (no family, dataset or backbone names): :mod:`study.intake.validation` checks a parsed
spec against what ``trainables`` provides, and :mod:`study.intake.spec_reader` reads YAML and ``--set`` overrides. Trainables
receive a :class:`StudySpec` and read it; nothing below sees a raw dict.

The sections live by concern in private modules (what is trained, how it is selected and tested, where it runs and
records); every name is imported from here.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from trainables.schema import record as R
from trainables.schema._strict import Seed, _Strict
from trainables.schema.metric_names import TEST_PREFIX, VAL_PREFIX, recall_at
from trainables.schema.plain_text import plain_text
from trainables.schema.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    ParamSpec,
    SamplerSpec,
    SchedulerSpec,
    SearchSpec,
    check_mean_last,
    condition_holds,
    param_extremes,
)
from trainables.schema.spec._final import FinalSpec, RaceSpec, ValidationSpec, check_race, drop_unset_race
from trainables.schema.spec._infra import DiagnosticsSpec, ResourcesSpec, TrackingSpec, _userinfo
from trainables.schema.spec._training import (
    DatasetSpec,
    LrScheduleSpec,
    ModelSpec,
    NoiseSpec,
    OptimizerSpec,
    TrainSpec,
)

__all__ = [
    "StudySpec",
    "NoiseSpec",
    "DatasetSpec",
    "ModelSpec",
    "OptimizerSpec",
    "LrScheduleSpec",
    "TrainSpec",
    "FloatParam",
    "IntParam",
    "CategoricalParam",
    "ParamSpec",
    "SamplerSpec",
    "SchedulerSpec",
    "SearchSpec",
    "ValidationSpec",
    "FinalSpec",
    "RaceSpec",
    "check_race",
    "drop_unset_race",
    "ResourcesSpec",
    "DiagnosticsSpec",
    "TrackingSpec",
    "condition_holds",
    "param_extremes",
]


#: pyarrow filesystems a ``storage`` URI may name.
_STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file")


class StudySpec(_Strict):
    """A whole study: what to train, what to search, where to store and track it."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=128)
    family: str
    seed: Seed = 0
    dataset: DatasetSpec = DatasetSpec()
    model: ModelSpec = ModelSpec()
    train: TrainSpec = TrainSpec()
    #: Fixed family hyperparameters; overrides of the family's ``Params`` defaults.
    params: dict[str, Any] = {}
    search: SearchSpec = SearchSpec()
    validation: ValidationSpec = ValidationSpec()
    final: FinalSpec = FinalSpec()
    diagnostics: DiagnosticsSpec = DiagnosticsSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: str = R.DEFAULT_STORAGE
    tracking: TrackingSpec = TrackingSpec()

    @field_validator("storage")
    @classmethod
    def _storage(cls, storage: str) -> str:
        plain_text(storage)
        if not storage.strip():
            raise ValueError("must name a directory or a URI (s3://bucket/prefix), but got an empty string")
        if "://" in storage:
            scheme = storage.split("://", 1)[0].lower()
            if scheme not in _STORAGE_SCHEMES:
                raise ValueError(f"scheme {scheme!r} is not a filesystem; use one of {', '.join(_STORAGE_SCHEMES)}")
            if ":" in (_userinfo(storage) or "") or any(c.isspace() or not c.isprintable() for c in storage):
                # The study's directory is printed and recorded (spec.yaml, Ray's state, every log line): a secret
                # key written into it would be too.
                raise ValueError(
                    "a storage URI must not carry credentials before an @ nor white space: give them as "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the filesystem's own variables)"
                )
        return storage

    @model_validator(mode="before")
    @classmethod
    def _default_metric(cls, raw: Any) -> Any:
        # The default objective is Recall@1 on the split the trials report: validation, or test without it.
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("search", {}), dict)
            or "metric" in raw.get("search", {})
        ):
            return raw
        validation = raw.get("validation") or {}
        kind = validation.get("kind", "kfold") if isinstance(validation, dict) else "kfold"
        split = TEST_PREFIX if kind == "none" else VAL_PREFIX
        return {**raw, "search": {**raw.get("search", {}), "metric": split + recall_at(1)}}

    @model_validator(mode="after")
    def _check_batch_and_final(self) -> StudySpec:
        if self.train.samples_per_class * self.train.classes_per_batch < 4:
            raise ValueError("a P×K batch needs at least 4 samples")
        for name in self.final.group_by:
            if name not in self.search.space:
                raise ValueError(f"final.group_by: {name!r} is not a search.space entry")
        check_race(self.final.race, self.final.seeds, self.search.num_trials, self.validation.enabled)
        if self.final.group_by and self.search.replicates > 1:
            raise ValueError(
                "search.replicates retrains each replicate's winner, and final.group_by each group's of one search: "
                "use one of them"
            )
        return self

    @model_validator(mode="after")
    def _check_scheduler(self) -> StudySpec:
        s = self.search
        check_mean_last(s.select_on, self.train.epochs)
        s.scheduler.check(self.train.epochs, s.num_trials)  # its kind's rule, a table's too (trainables.schema.table)
        return self

    @property
    def recall_ks(self) -> tuple[int, ...]:
        return self.train.recall_at
