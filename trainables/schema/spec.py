"""The study spec as typed, frozen models: what a YAML study may say, checked for its own consistency.

These models know no registry (no family, dataset or backbone names): :mod:`study.intake.validation` checks a parsed
spec against what ``trainables`` provides, and :mod:`study.intake.loading` reads YAML and ``--set`` overrides. Trainables
receive a :class:`StudySpec` and read it; nothing below sees a raw dict.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from trainables.schema import record as R
from trainables.schema._strict import Seed, _Strict
from trainables.schema.metric_names import TEST_PREFIX, VAL_PREFIX, recall_at
from trainables.schema.plain_text import PlainText, plain_text
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


class NoiseSpec(_Strict):
    """Label noise on the training split (see :mod:`trainables.data.noise` and docs/prism.md).

    ``ratio`` is the noise rate: per sample (``per_class``, ``uniform``), per class (``small_cluster``: the share
    of classes dissolved into others), or, for ``file``, the rate the list was published with (informational:
    tags, and PRISM's default ``noise_rate``). ``file`` is a published noisy-label list (made absolute when the
    spec loads; read on the driver before Ray starts).
    """

    kind: Literal["none", "per_class", "uniform", "small_cluster", "file"] = "none"
    ratio: float = Field(0.0, ge=0.0, lt=1.0)
    seed: Seed = 0
    file: str | None = None

    @field_validator("file")
    @classmethod
    def _absolute_file(cls, value: str | None) -> str | None:
        return _absolute_path(plain_text(value))

    @model_validator(mode="after")
    def _check_file(self) -> NoiseSpec:
        if self.kind == "file" and self.file is None:
            raise ValueError("dataset.noise.kind 'file' needs dataset.noise.file (a noisy-label list)")
        if self.kind != "file" and self.file is not None:
            raise ValueError(f"dataset.noise.file applies to kind 'file' only, not to {self.kind!r}")
        return self


def _absolute_path(path: str | None) -> str | None:
    # Trials run in their own working directory (Ray Tune's trial dir), so a relative path is resolved
    # against the directory the study was started from, once, when the spec loads. No file is touched.
    return None if path is None else os.path.abspath(os.path.expanduser(path))


_Path = Annotated[PlainText | None, AfterValidator(_absolute_path)]


class DatasetSpec(_Strict):
    name: str = "digits"
    #: Dataset root in its official layout (made absolute when the spec loads); required on-disk datasets.
    root: _Path = None
    noise: NoiseSpec = NoiseSpec()
    #: ``clean_only`` is the topline arm: train only on the samples the noise did not touch.
    subset: Literal["all", "clean_only"] = "all"
    #: Side of the square network input (the crop); ``null`` → 224 (CIFAR-10: 32).
    image_size: int | None = Field(None, ge=8)
    #: Shorter side after resizing, before cropping; ``null`` → 256 (or image_size·256/224; CIFAR-10: 32).
    resize_size: int | None = Field(None, ge=8)
    #: ``imagefolder`` only: a file of ``<class> train|test`` lines instead of the first-half class split.
    split_file: _Path = None
    #: ``csv`` only: open-metric-learning's annotation CSV, relative to ``root`` (trainables/data/csv_oml.py).
    annotations: PlainText | None = None
    #: On-disk image datasets: ``decoded`` decodes and resizes every image once per node into a shared uint8 cache
    #: file (trainables/data/decoded_cache.py); ``none`` decodes every image in every epoch (the PIL pipeline).
    cache: Literal["decoded", "none"] = "decoded"
    #: Where the decoded cache lives (node-local; never the study storage): else ``$DMLSTUDY_CACHE_DIR``, else
    #: ``<system temp dir>/dmlstudy-cache-<uid>``.
    cache_dir: _Path = None

    @model_validator(mode="after")
    def _check_data_keys(self) -> DatasetSpec:
        if self.split_file is not None and self.name != "imagefolder":
            raise ValueError(f"dataset.split_file applies to imagefolder only, not to {self.name!r}")
        if (self.annotations is not None) != (self.name == "csv"):
            raise ValueError(f"dataset.annotations is required by csv and applies to csv only (name {self.name!r})")
        if self.image_size and self.resize_size and self.resize_size < self.image_size:
            raise ValueError(f"resize_size >= image_size must hold, but got {self.resize_size=}, {self.image_size=}")
        return self


class ModelSpec(_Strict):
    backbone: str = "small_cnn"
    #: Start from ImageNet weights: ``weights`` if set, else the torch cache (the driver fills it; see ``download``).
    pretrained: bool = False
    embedding_dim: int = Field(64, ge=2)
    #: Keep every BatchNorm of the backbone in eval mode with frozen affine parameters (small P×K batches).
    frozen_bn: bool = False
    #: A torchvision state-dict file of the backbone's ImageNet weights (made absolute when the spec loads).
    weights: _Path = None
    #: ``pretrained`` only: the driver may download missing ImageNet weights into the torch cache (trials never do).
    download: bool = True

    @model_validator(mode="after")
    def _check_weights(self) -> ModelSpec:
        if self.weights is not None and not self.pretrained:
            raise ValueError("model.weights is set but model.pretrained is false; set pretrained: true to load them")
        return self


class OptimizerSpec(_Strict):
    name: Literal["sgd", "adam", "adamw"] = "adam"
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    momentum: float = Field(0.9, ge=0, lt=1)


class LrScheduleSpec(_Strict):
    """Per-epoch learning-rate factor applied to every parameter group (family groups keep their ratio).

    ``none`` keeps the optimiser's lr; ``step`` multiplies it by ``gamma`` at each epoch in ``milestones``
    (DiVA Tab. 1: ×0.3 at epoch 60 on CUB); ``cosine`` anneals it from lr to ``lr·min_factor`` over
    ``train.epochs``. Milestones beyond ``train.epochs`` are allowed (a shortened run never reaches them).
    """

    type: Literal["none", "step", "cosine"] = "none"
    milestones: tuple[int, ...] = ()
    gamma: float = Field(0.1, gt=0, le=1)
    min_factor: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _milestones(self) -> LrScheduleSpec:
        if any(m < 1 for m in self.milestones):
            raise ValueError(f"milestones must be positive epochs, but got {list(self.milestones)}")
        if self.type == "step" and not self.milestones:
            raise ValueError("type 'step' needs milestones (epochs after which the lr is multiplied by gamma)")
        return self


class TrainSpec(_Strict):
    epochs: int = Field(10, ge=1)
    #: P: classes in each batch.
    classes_per_batch: int = Field(8, ge=2)
    #: K: samples of each class in each batch.
    samples_per_class: int = Field(4, ge=2)
    #: Batches per epoch; ``null`` → one pass over the training set.
    batches_per_epoch: int | None = Field(None, ge=1)
    eval_batch_size: int = Field(512, ge=1)
    recall_at: tuple[int, ...] = (1, 2, 4, 8)
    optimizer: OptimizerSpec = OptimizerSpec()
    lr_schedule: LrScheduleSpec = LrScheduleSpec()
    num_workers: int = Field(0, ge=0)
    #: Fit a linear classifier on the training embeddings after each epoch and report its test accuracy
    #: (``acc1``, ``acc5``): the contrastive-learning protocol, for datasets whose test classes were trained on.
    linear_probe: bool = False
    #: bf16 autocast of the forward pass on CUDA GPUs that support it (losses stay float32); no effect on CPU.
    amp: bool = True
    #: Checkpoint every n-th epoch; a restarted trial resumes there. The last epoch always checkpoints, and so does
    #: every epoch the search's scheduler kind needs (halving's rungs, where a kept trial resumes from the model that
    #: was ranked: trainables.schema.scheduler.SchedulerSpec.checkpoint_epochs).
    checkpoint_every: int = Field(1, ge=1)

    @field_validator("recall_at")
    @classmethod
    def _positive_sorted(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        if not ks or any(k < 1 for k in ks):
            raise ValueError(f"must be a non-empty list of positive integers, but got {list(ks)}")
        return tuple(sorted(set(ks)))


class ValidationSpec(_Strict):
    """Where the searcher's metric comes from (the protocol of "A Metric Learning Reality Check", ECCV 2020).

    ``kfold``: the training classes are split into ``folds`` class-disjoint groups; a trial trains one model per
    fold on the other groups (in lockstep, one report per epoch) and reports ``val/<metric>``, the mean over the
    folds. ``holdout``: one group of ``fraction`` of the training classes is held out; one model per trial.
    ``none``: today's behaviour, the trials report ``test/<metric>`` and hyperparameters are selected on the
    test classes (the CLI warns). ``labels: noisy`` scores the validation samples with their observed labels
    (what a practitioner has; the noise is injected before the split, so every fold carries the study's
    rate); ``clean`` scores the same samples with their true labels (an oracle arm).
    """

    kind: Literal["kfold", "holdout", "none"] = "kfold"
    folds: int = Field(4, ge=2)
    fraction: float = Field(0.25, gt=0, lt=1)
    labels: Literal["noisy", "clean"] = "noisy"
    #: Seed of the class shuffle that forms the folds (the same for every trial of a study).
    seed: Seed = 0

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


class RaceSpec(_Strict):
    """``final.race``: after the search, each cell's ``finalists`` best trials (by ``search.objective``,
    among those that trained every epoch) are retrained on ``seeds`` more seeds each, on the cell's validation classes
    only; the final stage then retrains the finalist with the best mean over its search run and its race runs. Every
    arm gets the same ``finalists`` and ``seeds``, so a table stays fair. Costs ``finalists × seeds`` search trials per
    cell (the bill prices them)."""

    finalists: int = Field(3, ge=2)
    seeds: int = Field(2, ge=1)


class FinalSpec(_Strict):
    """The final test stage, run after the search by the same command: the best configuration by the search
    metric is retrained on all training classes with ``seeds`` seeds (0, 1, ...) and evaluated on the test classes;
    the parent run gets mean, std and a 95 % t-interval. ``group_by`` names search-space entries that are
    *conditions* rather than hyperparameters (e.g. ``family``, ``dataset.noise.ratio``): the best configuration
    is then chosen, and retrained, once per combination of their values. ``seeds: 0`` skips the stage.

    ``reseed_noise``: final seed *s* also draws the label noise with seed *s* (``dataset.noise.seed``), so the
    interval covers the noise draw as well as the model's initialisation: the estimate a noise-rate comparison
    wants. Off (the default), every final seed trains on the one noisy label set the search used, as with a
    published noisy-label list.
    """

    seeds: int = Field(5, ge=0)
    group_by: tuple[str, ...] = ()
    reseed_noise: bool = False
    #: The finalist race before the final stage: off by default.
    race: RaceSpec | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dumped only when set: a study's spec.yaml and its Ray experiment's param space, written before the race
        # existed, stay what this version writes (a resume compares the one, Ray's Tuner.restore the keys of the other).
        return drop_unset_race(handler(self))


def drop_unset_race(data: dict[str, Any]) -> dict[str, Any]:
    """A dumped ``final`` section without ``race: null`` (a study's or a table's: dumped only when set)."""
    if data.get("race", 0) is None:
        data.pop("race")
    return data


def check_race(race: RaceSpec | None, final_seeds: int, num_trials: int, validated: bool) -> None:
    """What ``final.race`` needs beyond its own ranges, for a study and a table alike: :class:`ValueError`, one line."""
    if race is None:
        return
    if not validated:
        raise ValueError(
            "final.race retrains finalists on validation classes; it needs validation.kind kfold or holdout"
        )
    if final_seeds < 1:
        raise ValueError("final.race picks the configuration the final stage retrains; it needs final.seeds >= 1")
    if race.finalists > num_trials:
        raise ValueError(
            f"final.race.finalists {race.finalists} exceeds search.num_trials {num_trials}: a cell has no more candidates"
        )


class DiagnosticsSpec(_Strict):
    """Label-free noise detectors (ξ, class centres, kNN; trainables/families/noise_detectors.py) scored against the
    recorded noise every ``every`` epochs (``noise/<detector>_auroc``, ``noise/<detector>_ap``); 0 turns them off.
    Only runs whose training labels carry noise are scored. Cost per scored epoch: one embedding pass of the
    training set (shared with a family that embeds it in that epoch) plus O(N²·D) similarities."""

    every: int = Field(1, ge=0)


class ResourcesSpec(_Strict):
    """One trial's Ray resources. A trial is one bundle, placed on one node, so it cannot ask for more than a node
    has; the bounds only refuse values no node has (Ray would wait for them forever)."""

    cpu: float = Field(1.0, gt=0, le=4096)
    gpu: float = Field(0.0, ge=0, le=64)


#: URL schemes (before any ``+driver``) of an MLflow tracking URI and of an Optuna RDB URL (SQLAlchemy).
_TRACKING_SCHEMES = ("http", "https", "databricks", "file", "sqlite", "postgresql", "mysql", "mssql")
_RDB_SCHEMES = ("sqlite", "postgresql", "mysql", "mariadb", "mssql", "oracle")
#: Schemes whose URL has no host: a file path (``sqlite:////abs/path.db``) or a profile (``databricks``).
_HOSTLESS_SCHEMES = ("sqlite", "file", "databricks")


#: What urllib's own URL errors may say here: its port error quotes the text it read as a port, which may be part
#: of a password, so only these are passed on.
_URL_ERRORS = {"Port out of range 0-65535": "its port is out of range 0-65535", "Invalid IPv6 URL": "invalid IPv6 host"}


def _userinfo(url: str) -> str | None:
    """The userinfo of ``url`` (``user:password``): what lies between ``://`` and the URL's LAST ``@``, the rule
    :func:`study.tracking.credentials.redact` masks by; ``None`` when there is no ``@`` or no authority."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    if "@" not in rest or rest.startswith("/"):
        return None
    return rest.rpartition("@")[0]


def _check_url(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """A URL with a known scheme, a host where it needs one, and a numeric port. The message never quotes the
    URL nor any part of it: it may hold a password.

    A password must percent-encode ``/ ? # @`` (``%2F %3F %23 %40``): left raw, urllib, SQLAlchemy and libpq each
    split the URL at another place (SQLAlchemy takes ``u:a@b@h`` as the password ``a`` on the host ``b@h``), so the
    host the checks name, the host the driver connects to and the part of the URL that is masked would differ."""
    if url is None or url == "databricks" and "databricks" in schemes:
        return url
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("is not a valid URL: it holds white space or a control character (percent-encode it)")
    userinfo = _userinfo(url)
    if userinfo is not None and any(c in userinfo for c in "/?#@"):
        raise ValueError(
            "is not a valid URL: the user or password before its host holds a raw '/', '?', '#' or '@' (percent-"
            "encode them in a password: %2F, %3F, %23, %40), or its path or query holds an '@' (write %40)"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check (ValueError when it is not a number)
    except ValueError as e:
        why = "its port is not a number" if str(e).startswith("Port could not be cast") else None
        raise ValueError(f"is not a valid URL ({why or _URL_ERRORS.get(str(e), 'it cannot be parsed')})") from None
    base = parts.scheme.split("+")[0].lower()
    if base not in schemes or "://" not in url:
        got = f"scheme {parts.scheme!r}" if parts.scheme and "://" in url else "no scheme://"
        raise ValueError(f"must be a URL with one of the schemes {', '.join(schemes)} (got {got})")
    if base not in _HOSTLESS_SCHEMES and not parts.hostname:
        raise ValueError(f"a {base}:// URL needs a host")
    if base in ("sqlite", "file") and parts.path in ("", "/"):
        raise ValueError(f"a {base}:// URL needs a file path (e.g. {base}:////abs/path)")
    return url


class TrackingSpec(_Strict):
    #: ``null`` → a sqlite store inside the study's storage directory; else e.g. ``http://host:5000``.
    uri: str | None = None
    #: Optuna RDB URL (``sqlite:///…``, ``postgresql://…``); ``null`` → ``optuna.db`` in the study directory.
    #: Required, like ``uri``, when ``storage`` is an ``s3://``/``gs://`` URI (sqlite needs a POSIX file).
    optuna_uri: str | None = None
    #: How long the driver rides out an outage of a store (a database restart or failover, a tracking server
    #: restart) before the study ends with exit 1 (resumable); see study/tracking/outage.py. Not part of a study's identity:
    #: ``--resume`` accepts a changed value.
    outage_budget_s: float = Field(default=300.0, ge=0)

    @field_validator("uri")
    @classmethod
    def _tracking_url(cls, url: str | None) -> str | None:
        return _check_url(url, _TRACKING_SCHEMES)

    @field_validator("optuna_uri")
    @classmethod
    def _rdb_url(cls, url: str | None) -> str | None:
        return _check_url(url, _RDB_SCHEMES)


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
