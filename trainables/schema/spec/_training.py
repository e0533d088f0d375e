"""What a study trains: the dataset and its label noise, the model, the optimizer and the training loop's
settings (re-exported by :mod:`trainables.schema.spec`)."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from trainables.schema._strict import Seed, _Strict
from trainables.schema.plain_text import PlainText, plain_text


class NoiseSpec(_Strict):
    """Label noise on the training split (see :mod:`trainables.data.noise` and docs/notebook/prism.md).

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
