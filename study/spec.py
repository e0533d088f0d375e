"""Study specs: YAML → frozen, validated :class:`StudySpec`.

Everything a user can get wrong is checked here, before anything starts: unknown keys (with their dotted
path), wrong types, ``low > high``, unknown family / dataset / sampler, search-space names that point
nowhere. Errors are :class:`~study.errors.SpecError` with one line naming the key.

Search-space names: a bare name (``mu``) is a family hyperparameter, i.e. ``params.mu``; ``seed`` and
``family`` are the top-level keys; a dotted name (``train.optimizer.lr``) is that path in the spec.
A trial's spec is the study's spec with the sampled values written at those paths
(:func:`resolve_trial_spec`); the trainable parses it on its first line.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from study.errors import SpecError
from study.metric_names import (
    ACC1,
    ACC5,
    EPOCH_TIME,
    EVAL_TIME,
    LR,
    MAP_AT_R,
    NMI,
    R_PRECISION,
    SPECTRAL_DECAY,
    TEST_PREFIX,
    TRAIN_LOSS,
    VAL_PREFIX,
    recall_at,
)
from study.search_space import grid_points

__all__ = [
    "StudySpec",
    "DatasetSpec",
    "NoiseSpec",
    "SearchSpec",
    "load_spec",
    "parse_spec",
    "apply_overrides",
    "resolve_trial_spec",
    "param_path",
    "flatten",
    "SPEC_KEY",
    "FINAL_KEY",
    "ValidationSpec",
    "FinalSpec",
    "spec_from_tune_config",
    "sampled_values",
    "trial_stage",
]

#: Key of the study spec inside a Ray Tune trial config; the other keys are the sampled parameters.
SPEC_KEY = "spec"
#: Key of a final-stage trial's point inside its Ray Tune config: ``{"group": ..., "params": {name: value}}``,
#: the best configuration of its group with the final seed written over ``seed``.
FINAL_KEY = "final"

_TOP_LEVEL_SEARCHABLE = ("seed", "family")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoiseSpec(_Strict):
    kind: Literal["none", "per_class", "uniform"] = "none"
    ratio: float = Field(0.0, ge=0.0, lt=1.0)
    seed: int = 0


def _absolute_path(path: str | None) -> str | None:
    # Trials run in their own working directory (Ray Tune's trial dir), so a relative path is resolved
    # against the directory the study was started from, once, when the spec loads. No file is touched.
    return None if path is None else os.path.abspath(os.path.expanduser(path))


_Path = Annotated[str | None, AfterValidator(_absolute_path)]


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

    @field_validator("name")
    @classmethod
    def _known_dataset(cls, name: str) -> str:
        from trainables.data import DATASET_NAMES

        if name not in DATASET_NAMES:
            raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASET_NAMES)}")
        return name

    @model_validator(mode="after")
    def _check_data_keys(self) -> DatasetSpec:
        from trainables.data import ON_DISK_DATASETS

        if self.name in ON_DISK_DATASETS and self.root is None:
            raise ValueError(f"dataset.root is required for dataset {self.name!r} (the directory holding it)")
        if self.split_file is not None and self.name != "imagefolder":
            raise ValueError(f"dataset.split_file applies to imagefolder only, not to {self.name!r}")
        if self.image_size and self.resize_size and self.resize_size < self.image_size:
            raise ValueError(f"resize_size >= image_size must hold, but got {self.resize_size=}, {self.image_size=}")
        return self


class ModelSpec(_Strict):
    backbone: str = "small_cnn"
    #: Start from ImageNet weights: ``weights`` if set, else the local torch cache (never downloaded).
    pretrained: bool = False
    embedding_dim: int = Field(64, ge=2)
    #: Keep every BatchNorm of the backbone in eval mode with frozen affine parameters (small P×K batches).
    frozen_bn: bool = False
    #: A torchvision state-dict file of the backbone's ImageNet weights (made absolute when the spec loads).
    weights: _Path = None

    @model_validator(mode="after")
    def _check_pretrained(self) -> ModelSpec:
        from trainables.models import PRETRAINABLE

        if self.weights is not None and not self.pretrained:
            raise ValueError("model.weights is set but model.pretrained is false; set pretrained: true to load them")
        if self.pretrained and self.backbone not in PRETRAINABLE:
            raise ValueError(f"model.pretrained: backbone {self.backbone!r} has no ImageNet weights; use one of {', '.join(PRETRAINABLE)}")
        return self

    @field_validator("backbone")
    @classmethod
    def _known_backbone(cls, name: str) -> str:
        from trainables.models import BACKBONE_NAMES

        if name not in BACKBONE_NAMES:
            raise ValueError(f"unknown backbone {name!r}; known: {', '.join(BACKBONE_NAMES)}")
        return name


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
    #: Checkpoint every n-th epoch (the last epoch always checkpoints); a restarted trial resumes there.
    checkpoint_every: int = Field(1, ge=1)

    @field_validator("recall_at")
    @classmethod
    def _positive_sorted(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        if not ks or any(k < 1 for k in ks):
            raise ValueError(f"must be a non-empty list of positive integers, but got {list(ks)}")
        return tuple(sorted(set(ks)))


class _ParamBase(_Strict):
    #: Sample this parameter only when each named (earlier) parameter took one of the given values.
    when: dict[str, Any] | None = None


class FloatParam(_ParamBase):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check_bounds(self) -> FloatParam:
        _check_numeric(self.low, self.high, self.log, self.step)
        return self


class IntParam(_ParamBase):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> IntParam:
        _check_numeric(self.low, self.high, self.log, self.step if self.step != 1 else None)
        return self


class CategoricalParam(_ParamBase):
    type: Literal["categorical"]
    choices: list[bool | int | float | str | None] = Field(min_length=1)


def _check_numeric(low: float, high: float, log: bool, step: float | None) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"low and high must be finite, but got {low=}, {high=}")
    if low > high:
        raise ValueError(f"low <= high must hold, but got {low=}, {high=}")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, but got {low=}")
    if log and step is not None:
        raise ValueError("log: true cannot be combined with step")


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class SamplerSpec(_Strict):
    #: ``grid`` enumerates every combination of the (categorical) space, e.g. family × noise ratio × seed.
    type: Literal["tpe", "random", "cmaes", "gp", "qmc", "grid"] = "tpe"
    seed: int | None = 0


class SchedulerSpec(_Strict):
    type: Literal["fifo", "asha"] = "fifo"
    #: ASHA: epochs a trial always gets before it can be stopped.
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(3.0, gt=1)


class SearchSpec(_Strict):
    num_trials: int = Field(8, ge=1)
    max_concurrent: int = Field(1, ge=1)
    #: Default: ``val/recall_at_1`` (``test/recall_at_1`` with ``validation.kind: none``), filled in by StudySpec.
    metric: str = VAL_PREFIX + recall_at(1)
    mode: Literal["max", "min"] = "max"
    sampler: SamplerSpec = SamplerSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    space: dict[str, ParamSpec] = {}

    @model_validator(mode="after")
    def _check_conditions(self) -> SearchSpec:
        seen: dict[str, Any] = {}
        for name, param in self.space.items():
            for other, values in (param.when or {}).items():
                if other not in seen:
                    raise ValueError(f"space.{name}.when refers to {other!r}, which is not an earlier parameter")
                allowed = values if isinstance(values, list) else [values]
                possible = seen[other]
                if possible is not None and not any(v in possible for v in allowed):
                    raise ValueError(f"space.{name}.when: {other} never takes {allowed}; choices are {possible}")
            seen[name] = param.choices if isinstance(param, CategoricalParam) else None
        return self


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
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


class FinalSpec(_Strict):
    """The final test stage, run after the search by the same command: the best configuration by the search
    metric is retrained on all training classes with ``seeds`` seeds (0, 1, ...) and evaluated on the test classes;
    the parent run gets mean, std and a 95 % t-interval. ``group_by`` names search-space entries that are
    *conditions* rather than hyperparameters (e.g. ``family``, ``dataset.noise.ratio``): the best configuration
    is then chosen, and retrained, once per combination of their values. ``seeds: 0`` skips the stage."""

    seeds: int = Field(5, ge=0)
    group_by: tuple[str, ...] = ()


class ResourcesSpec(_Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


class TrackingSpec(_Strict):
    #: ``null`` → a sqlite store inside the study's storage directory; else e.g. ``http://host:5000``.
    uri: str | None = None
    #: Optuna RDB URL (``sqlite:///…``, ``postgresql://…``); ``null`` → ``optuna.db`` in the study directory.
    #: Required, like ``uri``, when ``storage`` is an ``s3://``/``gs://`` URI (sqlite needs a POSIX file).
    optuna_uri: str | None = None


class StudySpec(_Strict):
    """A whole study: what to train, what to search, where to store and track it."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=128)
    family: str
    seed: int = 0
    dataset: DatasetSpec = DatasetSpec()
    model: ModelSpec = ModelSpec()
    train: TrainSpec = TrainSpec()
    #: Fixed family hyperparameters; overrides of the family's ``Params`` defaults.
    params: dict[str, Any] = {}
    search: SearchSpec = SearchSpec()
    validation: ValidationSpec = ValidationSpec()
    final: FinalSpec = FinalSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: str = "runs"
    tracking: TrackingSpec = TrackingSpec()

    @model_validator(mode="before")
    @classmethod
    def _default_metric(cls, raw: Any) -> Any:
        # The default objective is Recall@1 on the split the trials report: validation, or test without it.
        if not isinstance(raw, dict) or not isinstance(raw.get("search", {}), dict) or "metric" in raw.get("search", {}):
            return raw
        validation = raw.get("validation") or {}
        kind = validation.get("kind", "kfold") if isinstance(validation, dict) else "kfold"
        split = TEST_PREFIX if kind == "none" else VAL_PREFIX
        return {**raw, "search": {**raw.get("search", {}), "metric": split + recall_at(1)}}

    @field_validator("family")
    @classmethod
    def _known_family(cls, name: str) -> str:
        from trainables.registry import FAMILY_NAMES

        if name not in FAMILY_NAMES:
            raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILY_NAMES)}")
        return name

    @model_validator(mode="after")
    def _check_params_and_metric(self) -> StudySpec:
        if "family" not in self.search.space:  # a family search checks params per sampled family instead
            check_family_rules(self.family, self.params, self.search.space, self.model.embedding_dim)

        evaluated = {recall_at(k) for k in self.train.recall_at} | {NMI, SPECTRAL_DECAY, MAP_AT_R, R_PRECISION}
        if self.train.linear_probe:
            from trainables.data import SAME_CLASS_TEST_DATASETS

            evaluated |= {ACC1, ACC5}
            if self.dataset.name not in SAME_CLASS_TEST_DATASETS:
                raise ValueError(
                    f"train.linear_probe needs a dataset whose test classes are its training classes "
                    f"({', '.join(sorted(SAME_CLASS_TEST_DATASETS))}); {self.dataset.name!r} tests on unseen classes"
                )
            if self.validation.enabled:
                raise ValueError(
                    "validation.kind: class-disjoint validation cannot score a linear probe (it classifies the "
                    "training classes); use validation.kind: none with train.linear_probe"
                )
        self._check_search_metric(evaluated)
        if self.train.samples_per_class * self.train.classes_per_batch < 4:
            raise ValueError("a P×K batch needs at least 4 samples")
        self._check_final()
        return self

    def _check_search_metric(self, evaluated: set[str]) -> None:
        """The searcher sees validation metrics when validation is on, test metrics only with ``kind: none``."""
        from trainables.registry import get_family

        split = VAL_PREFIX if self.validation.enabled else TEST_PREFIX
        known = {split + m for m in evaluated} | {TRAIN_LOSS, EPOCH_TIME, EVAL_TIME, LR}
        known |= set(get_family(self.family).metric_names)
        metric = self.search.metric
        if metric in known or metric.startswith("train/"):
            return
        if self.validation.enabled and metric.startswith(TEST_PREFIX):
            raise ValueError(
                f"search.metric {metric!r} is a test metric but validation.kind is {self.validation.kind!r}: "
                f"the searcher may only see validation metrics; use {VAL_PREFIX + metric.removeprefix(TEST_PREFIX)!r}"
            )
        bare = metric.removeprefix(VAL_PREFIX).removeprefix(TEST_PREFIX)
        hint = f"; did you mean {split + bare!r}?" if split + bare in known else ""
        raise ValueError(f"search.metric {metric!r} is not reported{hint} (choose one of {sorted(known)})")

    def _check_final(self) -> None:
        for name in self.final.group_by:
            if name not in self.search.space:
                raise ValueError(f"final.group_by: {name!r} is not a search.space entry")
    def trial_params(self) -> dict[str, Any]:
        """The trial's full flattened config (family defaults filled in), as logged to MLflow."""
        tree = self.model_dump(mode="json", include={"family", "seed", "dataset", "model", "train", "validation"})
        tree["params"] = dataclasses.asdict(self.family_params())
        return flatten(tree)

    def family_params(self) -> Any:
        """The family's frozen ``Params`` with this spec's overrides applied."""
        return family_params(self.family, self.params)

    @property
    def recall_ks(self) -> tuple[int, ...]:
        return self.train.recall_at


def check_family_rules(family: str, params: dict[str, Any], space: dict[str, Any], embedding_dim: int) -> None:
    """The family's own rules on a spec: its params (unknown names, types), ``check_spec`` on them and on the
    ranges of its searched params, ``check_model`` on the embedding size. Raises ``ValueError``."""
    from trainables.registry import get_family

    cls = get_family(family)
    fixed = family_params(family, params)
    cls.check_spec(fixed, space)
    cls.check_model(fixed, embedding_dim)


def family_params(family: str, values: dict[str, Any]) -> Any:
    """Validate ``values`` against the family's ``Params`` dataclass and build it."""
    from pydantic import TypeAdapter

    from trainables.registry import get_family

    cls = get_family(family)
    names = cls.param_names()
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"unknown parameter params.{unknown[0]} for family {family!r}; known: {', '.join(names)}")
    try:
        return TypeAdapter(cls.Params).validate_python(dict(values))
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"params.{loc}: {err['msg']} (got {err.get('input')!r})") from None


# ---------------------------------------------------------------------------------------------- loading


def param_path(name: str) -> tuple[str, ...]:
    """Where a search-space name lives in the spec: ``mu`` → ``params.mu``; ``train.optimizer.lr`` as is."""
    if "." in name:
        return tuple(name.split("."))
    if name in _TOP_LEVEL_SEARCHABLE:
        return (name,)
    return ("params", name)


def _set_path(tree: dict[str, Any], path: tuple[str, ...], value: Any, what: str) -> None:
    node = tree
    for i, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise SpecError(f"{what}: {'.'.join(path[: i + 1])} is not a mapping")
        node = child
    node[path[-1]] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set dotted.key=value`` overrides; values are parsed as YAML and typed by the schema."""
    tree = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(f"--set {key}: cannot parse value {text!r}") from e
        _set_path(tree, tuple(key.split(".")), value, f"--set {key}")
    return tree


def _format_error(err: Any) -> str:
    # Drop the discriminator tags pydantic inserts in union locations (space.lr.float.low → space.lr.low).
    loc = [str(p) for p in err["loc"] if p not in ("float", "int", "categorical", "function-after[_check_bounds()]")]
    where = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key {where!r}"
    if kind == "missing":
        return f"missing required key {where!r}"
    if kind == "union_tag_invalid":
        return f"{where}.type: must be one of float, int, categorical (got {err['input'].get('type')!r})"
    if kind == "union_tag_not_found":
        return f"{where}: missing 'type' (float, int or categorical)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing") or "input" in err and kind.startswith(("greater", "less")):
        msg = f"{msg} (got {err['input']!r})"
    return f"{where}: {msg}" if where else msg


def parse_spec(raw: Any, source: str = "spec") -> StudySpec:
    """Validate a raw mapping; raise :class:`SpecError` with one line naming the first bad key."""
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: the spec must be a YAML mapping, got {type(raw).__name__}")
    try:
        spec = StudySpec.model_validate(raw)
    except ValidationError as e:
        raise SpecError(f"{source}: {_format_error(e.errors()[0])}") from None
    _check_search_names(spec, source)
    return spec


def _check_search_names(spec: StudySpec, source: str) -> None:
    """Every search-space name must point at a real key: resolve a trial at each range's ends."""
    space = spec.search.space
    if not space:
        return
    family_param = space.get("family")
    families = family_param.choices if isinstance(family_param, CategoricalParam) else [spec.family]
    if "family" in space:
        _check_params_shared(spec.params, families, source)
        _check_each_family(spec, families, space, source)
    if spec.search.sampler.type == "grid":
        _check_grid(spec.search, source)
    def probe(end: int, fixed: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, p in space.items():
            if name in fixed:
                values[name] = fixed[name]
            elif all(values.get(k) in (v if isinstance(v, list) else [v]) for k, v in (p.when or {}).items()):
                values[name] = p.choices[end] if isinstance(p, CategoricalParam) else (p.low if end == 0 else p.high)
        return values

    # Each range's ends; with a family search, once per sampled family (each must accept the params it gets).
    fixings = [{"family": f} for f in families] if "family" in space else [{}]
    for probe_values in (probe(end, fixed) for end in (0, -1) for fixed in fixings):
        try:
            resolve_trial_spec(spec, probe_values)
        except SpecError as e:
            raise SpecError(f"{source}: search.space: {str(e).removeprefix('trial: ')}") from None


def _check_params_shared(params: dict[str, Any], families: list[Any], source: str) -> None:
    """With ``family`` searched, each fixed param must belong to at least one of the sampled families."""
    from trainables.registry import FAMILY_NAMES, get_family

    unknown = [f for f in families if f not in FAMILY_NAMES]
    if unknown:
        known_families = ", ".join(FAMILY_NAMES)
        raise SpecError(f"{source}: search.space.family: unknown family {unknown[0]!r}; known: {known_families}")
    known = {n for f in families for n in get_family(f).param_names()}
    for name in params:
        if name not in known:
            raise SpecError(f"{source}: params.{name} is not a parameter of any family in search.space.family")


def _check_each_family(spec: StudySpec, families: list[Any], space: dict[str, Any], source: str) -> None:
    """With ``family`` searched, each sampled family's cross-parameter rules (``check_spec``) on the fixed params
    it keeps and the ranges of its own searched params."""
    from trainables.registry import get_family

    for name in families:
        own = set(get_family(name).param_names())
        try:
            check_family_rules(
                name, {k: v for k, v in spec.params.items() if k in own}, {k: p for k, p in space.items() if k in own},
                spec.model.embedding_dim,
            )
        except ValueError as e:
            raise SpecError(f"{source}: family {name}: {e}") from None


def _check_grid(search: SearchSpec, source: str) -> None:
    """The grid sampler enumerates categorical choices (``when:`` allowed); other kinds have no grid."""
    for name, p in search.space.items():
        if not isinstance(p, CategoricalParam):
            raise SpecError(f"{source}: search.space.{name}: sampler 'grid' needs categorical parameters")
    size = len(grid_points(search.space))
    if search.num_trials > size:
        raise SpecError(f"{source}: search.num_trials={search.num_trials} exceeds the {size} points of the grid")


def load_spec(path: str | Path, overrides: list[str] | None = None) -> StudySpec:
    """Read, override and validate a YAML spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"{path}: cannot read spec ({e.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}: invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    if isinstance(raw, dict):
        raw = apply_overrides(raw, overrides or [])
    return parse_spec(raw, str(path))


def resolve_trial_spec(spec: StudySpec | dict[str, Any], sampled: dict[str, Any]) -> StudySpec:
    """The spec of one trial: ``spec`` with each sampled value written at its :func:`param_path`."""
    tree = spec.model_dump(mode="json") if isinstance(spec, StudySpec) else copy.deepcopy(spec)
    if "family" in sampled and sampled["family"] in _family_names():
        # Fixed params may be shared by several sampled families (e.g. ms_alpha for ms/spms/bspml, lambda0
        # for spms/bspml): each trial keeps the ones its family has. Sampled names are never dropped.
        known = set(_family_param_names(sampled["family"]))
        tree["params"] = {k: v for k, v in tree.get("params", {}).items() if k in known}
    for name, value in sampled.items():
        _set_path(tree, param_path(name), value, f"search.space.{name}")
    try:
        trial = StudySpec.model_validate(tree)
        trial.family_params()  # the study-level check skips this when the family itself is searched
    except ValidationError as e:
        raise SpecError(f"trial: {_format_error(e.errors()[0])}") from None
    except ValueError as e:
        raise SpecError(f"trial: {e}") from None
    return trial


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
    best configuration of a group with its final seed (final stage)."""
    if FINAL_KEY in config:
        return dict(config[FINAL_KEY]["params"])
    return {k: v for k, v in config.items() if k != SPEC_KEY}


def trial_stage(config: dict[str, Any]) -> str:
    """``"final"`` for a final-stage trial's config, else ``"search"``."""
    return "final" if FINAL_KEY in config else "search"


def spec_from_tune_config(config: dict[str, Any]) -> StudySpec:
    """A trial's spec from its Ray Tune config ``{"spec": <study spec>, <sampled name>: <value>, ...}`` (search
    stage) or ``{"spec": ..., "final": {"group": ..., "params": {...}}}`` (final stage)."""
    return resolve_trial_spec(config[SPEC_KEY], sampled_values(config))


def _family_names() -> tuple[str, ...]:
    from trainables.registry import FAMILY_NAMES

    return FAMILY_NAMES


def _family_param_names(family: str) -> tuple[str, ...]:
    from trainables.registry import get_family

    return get_family(family).param_names()
