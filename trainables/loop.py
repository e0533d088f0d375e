"""The one training loop every loss family runs in, as a Ray Tune function trainable.

``train_fn(config)`` parses its config on the first line, resumes from ``tune.get_checkpoint()`` if Ray
restarted it, and then, once per epoch: trains on P×K class-balanced batches, lets the family update its
own state (``on_epoch_end``), evaluates retrieval metrics on the classes it may see (``val/``: validation
classes carved from the training classes; ``test/``: the unseen test classes, in the final stage or without
validation; see :class:`TrialRun`), and calls ``tune.report(metrics, checkpoint=...)`` exactly once, so
``training_iteration`` equals the epoch.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray import tune
from torch.utils.data import DataLoader

from schema.metric_names import (
    ARTIFACTS_DIR,
    EPOCH,
    EPOCH_TIME,
    EVAL_TIME,
    LR,
    PAIRED_EMBEDDINGS_FILE,
    TEST_PREFIX,
    TRAIN_LOSS,
    TRAIN_LOSS_PREFIX,
    VAL_PREFIX,
    on_fold,
    on_test,
)
from schema.spec import DatasetSpec, LrScheduleSpec, StudySpec
from schema.trial import SPEC_KEY, resolve_trial_spec, sampled_values, trial_stage
from trainables.base import BaseLossFamily, Batch, FamilyContext
from trainables.data import DatasetSplits, load_dataset
from trainables.data._splits import IndexedDataset, LabeledSplit
from trainables.data.folds import check_batch_classes, check_validation, fold_splits, validation_groups
from trainables.data.sampler import BalancedMPerClassSampler
from trainables.diagnostics import MinedNegatives, NoiseDiagnostics, SampleScoreTrace
from trainables.metrics import linear_probe_accuracy, paired_metrics, retrieval_metrics
from trainables.models import EmbeddingNet, build_model, input_dataset
from trainables.noise_detectors import NoiseDetectorTrace
from trainables.registry import family_param_names, get_family

__all__ = ["train_fn", "NonFiniteLossError", "Trial", "TrialRun"]

_CHECKPOINT_FILE = "trial_state.pt"
_NONFINITE_MARKER = "nonfinite_loss.txt"


#: The dataset this process loaded last, by its spec and seed: Ray reuses a trial's worker process for the next trial
#: (``reuse_actors``), which then finds its data here instead of reloading it. Splits are frozen and never written.
_DATASET_CACHE: dict[tuple[str, int], DatasetSplits] = {}


def cached_dataset(spec: DatasetSpec, seed: int) -> DatasetSplits:
    """:func:`~trainables.data.load_dataset`, remembering the last result of this process."""
    key = (spec.model_dump_json(), seed)
    if key not in _DATASET_CACHE:
        _DATASET_CACHE.clear()  # one dataset at a time: a worker trains one trial at a time
        _DATASET_CACHE[key] = load_dataset(spec, seed)
    return _DATASET_CACHE[key]


class NonFiniteLossError(RuntimeError):
    """A batch loss was NaN or infinite: the trial fails, the study goes on."""


def _pick_device(spec: StudySpec) -> torch.device:
    # Ray exposes only the GPUs it assigned to this trial (CUDA_VISIBLE_DEVICES), so cuda:0 is ours; a spec
    # without GPUs trains on the CPU even when one is visible (e.g. a Trial built outside Ray).
    if spec.resources.gpu > 0 and torch.cuda.is_available():
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick the fastest kernels once
        return torch.device("cuda", 0)
    return torch.device("cpu")


def _autocast_dtype(device: torch.device, amp: bool) -> torch.dtype | None:
    """bf16 autocast on CUDA GPUs that support it (no loss scaling needed, unlike fp16); else none."""
    if amp and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def _channels_last(device: torch.device, input_shape: tuple[int, ...]) -> bool:
    # NHWC convolutions are faster on tensor-core GPUs; on the CPU the default layout is kept.
    return device.type == "cuda" and len(input_shape) == 3


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # also drives PML's MPerClassSampler (it uses numpy's global RNG)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _build_optimizer(spec: StudySpec, params: list[dict[str, Any]]) -> torch.optim.Optimizer:
    opt = spec.train.optimizer
    if opt.name == "sgd":
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
    cls = torch.optim.Adam if opt.name == "adam" else torch.optim.AdamW
    return cls(params, lr=opt.lr, weight_decay=opt.weight_decay)


@dataclass(frozen=True)
class LrFactor:
    """The factor ``train.lr_schedule`` applies to every group's lr after ``epoch`` epochs (a picklable callable
    for ``LambdaLR``)."""

    schedule: LrScheduleSpec
    epochs: int

    def __call__(self, epoch: int) -> float:
        s = self.schedule
        if s.type == "step":
            return s.gamma ** sum(epoch >= m for m in s.milestones)
        if s.type == "cosine":
            return s.min_factor + (1.0 - s.min_factor) * 0.5 * (
                1.0 + math.cos(math.pi * min(epoch, self.epochs) / self.epochs)
            )
        return 1.0


@dataclass
class Trial:
    """Everything one trial trains; built once, restored from a checkpoint when Ray restarts it."""

    spec: StudySpec
    data: DatasetSplits
    model: EmbeddingNet
    family: BaseLossFamily
    optimizer: torch.optim.Optimizer
    device: torch.device
    lr_schedule: torch.optim.lr_scheduler.LambdaLR | None = None
    diagnostics: NoiseDiagnostics | None = None
    mined: MinedNegatives | None = None
    scores: SampleScoreTrace | None = None
    detectors: NoiseDetectorTrace | None = None
    epoch: int = 0
    _loaders: dict[object, DataLoader] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, spec: StudySpec, data: DatasetSplits | None = None) -> Trial:
        """Build the model, family and optimiser of ``spec``, trained on ``data.train`` and evaluated on
        ``data.test`` (default: the spec's dataset with its label noise; a validation fold passes its own)."""
        _seed_everything(spec.seed)
        device = _pick_device(spec)
        if data is None:
            data = load_dataset(input_dataset(spec), spec.seed)
        check_batch_classes(data.train.num_classes, spec.train.classes_per_batch, spec.dataset.name)
        if data.image_cache is not None:
            data.image_cache.ensure()  # decode once per node (file lock) before the loader workers fork
        family_cls = get_family(spec.family)
        model = build_model(spec.model, data.input_shape, normalize=not family_cls.raw_embeddings).to(device)
        if _channels_last(device, data.input_shape):
            model = model.to(memory_format=torch.channels_last)
        ctx = FamilyContext(
            num_train=len(data.train),
            num_classes=data.train.num_classes,
            train_labels=torch.as_tensor(data.train.labels, device=device),
            embedding_dim=spec.model.embedding_dim,
            device=device,
            seed=spec.seed,
            noise_rate=spec.dataset.noise.ratio,
        )
        family = family_cls(family_cls.parse_params(spec.params), ctx).to(device)
        # The true labels stay here, with the loop: the noise diagnostics and the sample-score trace use them.
        diagnostics = NoiseDiagnostics(ctx.train_labels, torch.as_tensor(data.train.true_labels, device=device))
        family.bind_model(model)
        groups = [{"params": list(model.parameters())}, *family.param_groups(spec.train.optimizer.lr)]
        optimizer = _build_optimizer(spec, [g for g in groups if g["params"]])
        schedule = None
        if spec.train.lr_schedule.type != "none":
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, LrFactor(spec.train.lr_schedule, spec.train.epochs))
        return cls(
            spec=spec,
            data=data,
            model=model,
            family=family,
            optimizer=optimizer,
            device=device,
            lr_schedule=schedule,
            diagnostics=diagnostics,
            mined=MinedNegatives(family),
            scores=SampleScoreTrace(data.train.labels, data.train.true_labels),
            detectors=NoiseDetectorTrace(ctx.train_labels, data.train.noisy_mask, spec.diagnostics.every),
        )

    # ------------------------------------------------------------------------------------- checkpoints

    def state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "family": self.family.state_dict(),
            "family_extra": self.family.extra_state(),
            "optimizer": self.optimizer.state_dict(),
            "lr_schedule": self.lr_schedule.state_dict() if self.lr_schedule else None,
            "sample_scores": self.scores.state() if self.scores else None,
            "rng": _rng_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.epoch = state["epoch"]
        self.model.load_state_dict(state["model"])
        self.family.load_state_dict(state["family"])
        self.family.load_extra_state(state["family_extra"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_schedule is not None and state.get("lr_schedule") is not None:
            self.lr_schedule.load_state_dict(state["lr_schedule"])
        if self.scores is not None and state.get("sample_scores") is not None:
            self.scores.load_state(state["sample_scores"])
        _set_rng_state(state["rng"])

    def save(self, directory: Path) -> None:
        """Write the checkpoint, and under ``artifacts/`` the files MLflow gets when the trial ends."""
        torch.save(self.state(), directory / _CHECKPOINT_FILE)
        self.write_artifacts(directory / ARTIFACTS_DIR)

    def write_artifacts(self, artifacts: Path) -> None:
        """The noisy training labels and the family's own files (sample weights, ...), for MLflow."""
        artifacts.mkdir()
        if self.data.train.noisy_mask.any():
            np.savez_compressed(
                artifacts / "train_labels.npz",
                labels=self.data.train.labels,
                true_labels=self.data.train.true_labels,
                noisy=self.data.train.noisy_mask,
            )
        if self.scores is not None:
            self.scores.write(artifacts)
        if self.data.test.paired:
            views = self.embed_views(self.data.test)
            latent = self.data.test.latent
            np.savez_compressed(
                artifacts / PAIRED_EMBEDDINGS_FILE,
                **{f"view{i}": v.cpu().numpy() for i, v in enumerate(views)},
                **({"latent": latent} if latent is not None else {}),
            )
        self.family.write_artifacts(artifacts)

    def restore(self, directory: Path) -> None:
        self.load_state(torch.load(directory / _CHECKPOINT_FILE, map_location=self.device, weights_only=False))

    # ---------------------------------------------------------------------------------------- training

    def _loader_options(self) -> dict[str, Any]:
        # Worker processes decode and augment images while the GPU trains; pinned memory makes the
        # host→GPU copy asynchronous.
        return {"num_workers": self.spec.train.num_workers, "pin_memory": self.device.type == "cuda"}

    def _train_loader(self) -> DataLoader:
        if "train" not in self._loaders:
            t = self.spec.train
            batch_size = t.classes_per_batch * t.samples_per_class
            n_samples = (
                batch_size * t.batches_per_epoch if t.batches_per_epoch else max(len(self.data.train), batch_size)
            )
            sampler = BalancedMPerClassSampler(
                self.data.train.labels, m=t.samples_per_class, batch_size=batch_size, length_before_new_iter=n_samples
            )
            views = self.family.num_views
            transform = (
                self.data.train_transform if views == 1 else self.data.view_transform or self.data.train_transform
            )
            dataset = IndexedDataset(self.data.train, transform, num_views=views)
            # Built once, so its workers persist across epochs instead of restarting every epoch.
            self._loaders["train"] = DataLoader(
                dataset,
                batch_size=batch_size,
                sampler=sampler,
                drop_last=True,
                persistent_workers=t.num_workers > 0,
                **self._loader_options(),
            )
        return self._loaders["train"]

    def _eval_loader(self, split: LabeledSplit) -> DataLoader:
        if id(split) in self._loaders:
            return self._loaders[id(split)]
        dataset = IndexedDataset(split, self.data.eval_transform)
        loader = DataLoader(
            dataset, batch_size=self.spec.train.eval_batch_size, shuffle=False, **self._loader_options()
        )
        if any(split is s for s in (self.data.train, self.data.test, self.data.gallery)):
            self._loaders[id(split)] = loader  # the trial's own splits live as long as the trial: build once
        return loader

    def _to_device(self, inputs: torch.Tensor, views: bool = False) -> torch.Tensor:
        if inputs.dim() == 4 and _channels_last(self.device, self.data.input_shape):
            inputs = inputs.to(self.device, non_blocking=True, memory_format=torch.channels_last)
        else:
            inputs = inputs.to(self.device, non_blocking=True)
        # dataset.cache: decoded ships uint8 batches; they become normalised floats here, on the device (with the
        # two-view families' colour augmentation for their training views).
        on_device = self.data.views_on_device if views and self.data.views_on_device else self.data.on_device
        return on_device(inputs) if on_device is not None else inputs

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Embeddings in float32; the network runs under bf16 autocast when the GPU supports it."""
        dtype = _autocast_dtype(self.device, self.spec.train.amp)
        autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with autocast:
            return self.model(inputs).float()

    def train_epoch(self) -> dict[str, float]:
        """One pass of P×K batches; returns the mean of each loss term and of their sum."""
        self.model.train()
        self.family.train()
        sums: dict[str, float] = {}
        n_batches = 0
        for inputs, labels, indices in self._train_loader():
            labels = labels.to(self.device)
            if self.family.num_views > 1:  # (B, V, ...) → view-major (V·B, ...)
                inputs = inputs.transpose(0, 1).flatten(0, 1)
            inputs = self._to_device(inputs, views=self.family.num_views > 1)
            embeddings = self._forward(inputs)
            batch = Batch(inputs, labels, indices.to(self.device))
            terms = self.family.compute_loss(embeddings, batch)
            mined = self.mined.pop() if self.mined is not None else None
            if self.diagnostics is not None:
                self.diagnostics.observe(batch, mined)
            loss = torch.stack(list(terms.values())).sum()
            if not torch.isfinite(loss):
                values = {k: float(v.detach()) for k, v in terms.items()}
                raise NonFiniteLossError(f"epoch {self.epoch + 1}, batch {n_batches}: loss is not finite {values}")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            n_batches += 1
            for name, value in terms.items():
                sums[TRAIN_LOSS_PREFIX + name] = sums.get(TRAIN_LOSS_PREFIX + name, 0.0) + float(value.detach())
            sums[TRAIN_LOSS] = sums.get(TRAIN_LOSS, 0.0) + float(loss.detach())
        diagnosed = self.diagnostics.epoch_metrics() if self.diagnostics is not None else {}
        return {**{k: v / max(n_batches, 1) for k, v in sums.items()}, **diagnosed}

    @torch.inference_mode()
    def embed(self, split: LabeledSplit) -> torch.Tensor:
        """Embeddings of a whole split in its order, on the trial's device."""
        self.model.eval()
        out = torch.cat([self._forward(self._to_device(x)) for x, _, _ in self._eval_loader(split)])
        out = self.family.test_embedding(out)
        self.model.train()
        return out

    @torch.inference_mode()
    def embed_views(self, split: LabeledSplit) -> list[torch.Tensor]:
        """For a paired split: the model's output (before ``test_embedding``) for each view of every sample."""
        self.model.eval()
        views = [self._forward(v.to(self.device)) for v in split.items.unbind(1)]
        self.model.train()
        return views

    def evaluate(self) -> dict[str, float]:
        """Recall@k and NMI on the test split (In-Shop: its queries retrieved against its gallery); with
        ``train.linear_probe``, the probe's acc1/acc5."""
        test = self.embed(self.data.test)
        emb = test.cpu().numpy()
        g = self.data.gallery
        gallery = None if g is None else (self.embed(g).cpu().numpy(), g.labels)
        metrics = retrieval_metrics(
            emb, self.data.test.labels, self.spec.recall_ks, seed=self.spec.seed, gallery=gallery
        )
        if self.data.test.paired:
            metrics.update(paired_metrics(*self.embed_views(self.data.test)))
        if self.spec.train.linear_probe:
            train = self.embed(self.data.train)
            metrics.update(linear_probe_accuracy(train, self.data.train.labels, test, self.data.test.labels))
        return metrics

    def run_epoch(self) -> dict[str, float]:
        """Train, update the family's state, evaluate on ``data.test``; returns this epoch's metrics (the
        evaluation metrics unprefixed: :class:`TrialRun` names their split)."""
        metrics = self.fit_epoch()
        start = time.perf_counter()
        metrics.update(self.evaluate())
        metrics[EVAL_TIME] = time.perf_counter() - start
        metrics[EPOCH] = self.epoch
        return metrics

    def fit_epoch(self) -> dict[str, float]:
        """Train one epoch and update the family's state; returns the training metrics and the epoch time."""
        start = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        metrics = self.train_epoch()
        self.epoch += 1
        metrics[LR] = lr
        if self.lr_schedule is not None:
            self.lr_schedule.step()

        embedded: list[tuple[torch.Tensor, torch.Tensor]] = []

        def embed_train() -> tuple[torch.Tensor, torch.Tensor]:
            # One pass per epoch, shared by the family (BSPML's w-step) and the noise detectors.
            if not embedded:
                embedded.append((self.embed(self.data.train), torch.arange(len(self.data.train), device=self.device)))
            return embedded[0]

        metrics.update(self.family.on_epoch_end(self.epoch, embed_train))
        if self.detectors is not None and self.detectors.due(self.epoch):
            metrics.update(self.detectors.metrics(embed_train()[0]))
        scores = self.family.sample_scores()
        if scores is not None and self.scores is not None:
            metrics.update(self.scores.observe(self.epoch, scores))
        metrics[EPOCH_TIME] = time.perf_counter() - start
        return metrics


def _normalized_concat(parts: list[torch.Tensor]) -> np.ndarray:
    """MLRC's fold ensemble: each model's L2-normalised embedding, concatenated and re-normalised."""
    joined = torch.cat([torch.nn.functional.normalize(p.float(), dim=1) for p in parts], dim=1)
    return torch.nn.functional.normalize(joined, dim=1).cpu().numpy()


@dataclass
class TrialRun:
    """What one Ray trial trains and reports, by stage and validation protocol.

    - Search stage with ``validation.kind: kfold``: one :class:`Trial` per fold, each trained on the other folds'
      classes, all in lockstep; every epoch reports ``val/<metric>`` (the mean over folds) and
      ``val/fold<i>/<metric>``; the last epoch also reports ``test/<metric>`` of the fold ensemble (MLRC), which
      the searcher and scheduler never see (they read the search metric, a ``val/`` name).
    - Search stage with ``holdout``: one model, ``val/`` every epoch, its ``test/`` at the last epoch.
    - Search stage with ``none``, and the final stage: one model on all training classes, ``test/`` every epoch.

    Training metrics (losses, family traces, noise diagnostics) are means over the models; times are sums.
    """

    spec: StudySpec
    members: list[Trial]
    #: The dataset with its label noise; its test classes are evaluated by the end-of-trial ensemble only.
    full: DatasetSplits
    on_validation: bool

    @classmethod
    def build(cls, spec: StudySpec, final: bool = False) -> TrialRun:
        full = cached_dataset(input_dataset(spec), spec.seed)
        v = spec.validation
        if final or not v.enabled:
            return cls(spec=spec, members=[Trial.build(spec, full)], full=full, on_validation=False)
        check_validation(full.train.num_classes, v, spec.train.classes_per_batch, spec.dataset.name)
        members = [Trial.build(spec, fold_splits(full, g, v.labels)) for g in validation_groups(full.train.labels, v)]
        return cls(spec=spec, members=members, full=full, on_validation=True)

    @property
    def epoch(self) -> int:
        return self.members[0].epoch

    def run_epoch(self) -> dict[str, float]:
        fitted = [m.fit_epoch() for m in self.members]
        metrics = _mean_metrics(fitted)
        metrics[EPOCH_TIME] = sum(f[EPOCH_TIME] for f in fitted)
        start = time.perf_counter()
        evaluated = [m.evaluate() for m in self.members]
        split = VAL_PREFIX if self.on_validation else TEST_PREFIX
        metrics.update({split + k: v for k, v in _mean_metrics(evaluated).items()})
        if self.on_validation and len(evaluated) > 1:
            metrics.update({on_fold(i, k): v for i, e in enumerate(evaluated) for k, v in e.items()})
        if self.on_validation and self.epoch == self.spec.train.epochs:
            metrics.update({on_test(k): v for k, v in self.ensemble_test().items()})
        metrics[EVAL_TIME] = time.perf_counter() - start
        metrics[EPOCH] = self.epoch
        return metrics

    def ensemble_test(self) -> dict[str, float]:
        """Retrieval metrics of the models' concatenated embeddings on the test classes (one model: its own)."""
        test = _normalized_concat([m.embed(self.full.test) for m in self.members])
        g = self.full.gallery
        gallery = None if g is None else (_normalized_concat([m.embed(g) for m in self.members]), g.labels)
        return retrieval_metrics(test, self.full.test.labels, self.spec.recall_ks, seed=self.spec.seed, gallery=gallery)

    def save(self, directory: Path) -> None:
        """One checkpoint file with every model's state; the first model's artifacts for MLflow."""
        torch.save({"members": [m.state() for m in self.members]}, directory / _CHECKPOINT_FILE)
        self.members[0].write_artifacts(directory / ARTIFACTS_DIR)

    def restore(self, directory: Path) -> None:
        state = torch.load(directory / _CHECKPOINT_FILE, map_location=self.members[0].device, weights_only=False)
        assert len(state["members"]) == len(self.members), "a checkpoint of another validation layout"
        for member, member_state in zip(self.members, state["members"]):
            member.load_state(member_state)  # the RNG states are equal: the last one restored is the live one


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the rows that have it (a fold without noisy samples reports no noise diagnostics)."""
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in keys}


def trial_spec(config: dict[str, Any]) -> StudySpec:
    """The trial's spec from its Ray Tune config (the driver checked every range end when the study loaded)."""
    return resolve_trial_spec(config[SPEC_KEY], sampled_values(config), family_param_names)


@dataclass(frozen=True)
class _NonFiniteMarker:
    """``nonfinite_loss.txt`` in the trial's directory of the study's storage (``<storage>/<name>/tune/trial_<id>``).

    Not in ``tune.get_context().get_trial_dir()``: that is a node-local staging directory, and Ray 2.60 gives a
    fresh actor a different one (``driver_artifacts/``) than an actor reused for the trial's retry
    (``working_dirs/``, ``FunctionTrainable.reset_config``), so a retry never saw the first attempt's marker. The
    storage path is the same for every attempt, on every node, and on any filesystem ``storage`` may name.
    """

    filesystem: Any  # pyarrow.fs.FileSystem
    path: str

    @classmethod
    def of_this_trial(cls) -> _NonFiniteMarker:
        from ray.train._internal.session import get_session  # the only route to the trial's StorageContext

        session = get_session()
        assert session is not None, "train_fn runs inside a Ray Tune trial"
        storage = session.storage
        return cls(storage.storage_filesystem, f"{storage.trial_fs_path}/{_NONFINITE_MARKER}")

    def read(self) -> str | None:
        """The first attempt's error, or ``None`` if no attempt of this trial hit a non-finite loss."""
        from pyarrow.fs import FileType

        if self.filesystem.get_file_info(self.path).type == FileType.NotFound:
            return None
        with self.filesystem.open_input_stream(self.path) as stream:
            return stream.read().decode()

    def write(self, reason: str) -> None:
        self.filesystem.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
        with self.filesystem.open_output_stream(self.path) as stream:
            stream.write(reason.encode())


def train_fn(config: dict[str, Any]) -> None:
    """Ray Tune function trainable shared by every loss family."""
    spec = trial_spec(config)
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # one "checkpoint created" line per epoch is noise
    torch.set_num_threads(max(1, int(spec.resources.cpu)))
    # A reused worker (study.tuner sets reuse_actors) ran another trial just before: free what that one left in
    # reference cycles (model, optimiser, DataLoader workers) before this one builds its own.
    gc.collect()
    trial = TrialRun.build(spec, final=trial_stage(config) == "final")
    # A NaN is deterministic: a retry (``--max-failures``) would replay the same batches into the same NaN.
    # The marker in the trial's directory makes the retry fail at once instead of retraining.
    marker = _NonFiniteMarker.of_this_trial()
    if (reason := marker.read()) is not None:
        raise NonFiniteLossError(f"not retried: {reason}")
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            trial.restore(Path(directory))
    every = spec.train.checkpoint_every
    while trial.epoch < spec.train.epochs:
        try:
            metrics = trial.run_epoch()
        except NonFiniteLossError as e:
            marker.write(str(e))
            raise
        if trial.epoch % every and trial.epoch < spec.train.epochs:
            tune.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as directory:
            trial.save(Path(directory))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
