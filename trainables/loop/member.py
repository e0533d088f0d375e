"""One model trained on one set of classes: a member of a :class:`~trainables.loop.run.TrialRun`.

A trial without folds has one member; a k-fold trial has one per fold, trained in lockstep. Internal to the loop
package: everything outside it builds a ``TrialRun``, which is what Ray runs.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from trainables.data import DatasetSplits
from trainables.data._splits import IndexedDataset, LabeledSplit
from trainables.data.folds import check_batch_classes
from trainables.data.sampler import BalancedMPerClassSampler
from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.noise_detectors import NoiseDetectorTrace
from trainables.families.registry import get_family
from trainables.loop.device import autocast_dtype, channels_last, pick_device
from trainables.loop.diagnostics import MinedNegatives, NoiseDiagnostics, SampleScoreTrace
from trainables.loop.optim import build_lr_schedule, build_optimizer
from trainables.loop.rng import rng_state, seed_everything, set_rng_state
from trainables.metrics.categories import per_category_metrics
from trainables.metrics.contrastive import linear_probe_accuracy, paired_metrics
from trainables.metrics.per_class import PerClass, per_class_scores
from trainables.metrics.retrieval import retrieval_metrics
from trainables.models import EmbeddingNet, build_model
from trainables.schema.metric_names import EPOCH_TIME, LR, TRAIN_LOSS, TRAIN_LOSS_PREFIX
from trainables.schema.record import PAIRED_EMBEDDINGS_FILE, TRAIN_LABELS_FILE
from trainables.schema.spec import StudySpec

__all__ = ["Member", "NonFiniteLossError"]


class NonFiniteLossError(RuntimeError):
    """A batch loss, or the model's embeddings, were NaN or infinite: the configuration diverged (the same batches
    diverge again), so the trial fails, is not retried, and the study goes on."""


@dataclass
class Member:
    """Everything one model of a trial trains; built once, restored from a checkpoint when Ray restarts it."""

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
    #: Keep, at each evaluation, the decomposable metrics per class (a validation fold's: what the class bootstrap of
    #: study.final.reliability resamples); :attr:`class_scores` holds the last evaluation's.
    keep_class_scores: bool = False
    class_scores: dict[str, PerClass] = field(default_factory=dict, repr=False)
    _loaders: dict[object, DataLoader] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, spec: StudySpec, data: DatasetSplits) -> Member:
        """Build the model, family and optimiser of ``spec``, trained on ``data.train`` and evaluated on
        ``data.test`` (the spec's dataset with its label noise, or a validation fold)."""
        seed_everything(spec.seed)
        device = pick_device(spec)
        check_batch_classes(data.train.num_classes, spec.train.classes_per_batch, spec.dataset.name)
        if data.image_cache is not None:
            data.image_cache.ensure()  # decode once per node (file lock) before the loader workers fork
        family_cls = get_family(spec.family)
        model = build_model(spec.model, data.input_shape, normalize=not family_cls.raw_embeddings).to(device)
        if channels_last(device, data.input_shape):
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
        optimizer = build_optimizer(spec, [g for g in groups if g["params"]])
        return cls(
            spec=spec,
            data=data,
            model=model,
            family=family,
            optimizer=optimizer,
            device=device,
            lr_schedule=build_lr_schedule(spec, optimizer),
            diagnostics=diagnostics,
            mined=MinedNegatives(family),
            scores=SampleScoreTrace(data.train.labels, data.train.true_labels),
            detectors=NoiseDetectorTrace(ctx.train_labels, data.train.noisy_mask, spec.diagnostics.every),
        )

    # ------------------------------------------------------------------------------------- checkpoints

    def state(self) -> dict[str, Any]:
        """What a resumed trial needs; the family's own non-tensor state rides in its ``state_dict()`` (torch's
        ``get_extra_state`` hook)."""
        return {
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "family": self.family.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_schedule": self.lr_schedule.state_dict() if self.lr_schedule else None,
            "sample_scores": self.scores.state() if self.scores else None,
            "rng": rng_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.epoch = state["epoch"]
        self.model.load_state_dict(state["model"])
        family = state["family"]
        if state.get("family_extra"):  # a checkpoint written before the families used torch's extra-state hook
            family = {**family, "_extra_state": state["family_extra"]}
        self.family.load_state_dict(family)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_schedule is not None and state.get("lr_schedule") is not None:
            self.lr_schedule.load_state_dict(state["lr_schedule"])
        if self.scores is not None and state.get("sample_scores") is not None:
            self.scores.load_state(state["sample_scores"])
        set_rng_state(state["rng"])

    def write_artifacts(self, artifacts: Path) -> None:
        """The noisy training labels, the sample-score files (weights per class and sample) and a paired test
        split's embeddings, for MLflow (the driver logs the last checkpoint's files when the trial ends)."""
        artifacts.mkdir()
        if self.data.train.noisy_mask.any():
            np.savez_compressed(
                artifacts / TRAIN_LABELS_FILE,
                labels=self.data.train.labels,
                true_labels=self.data.train.true_labels,
                noisy=self.data.train.noisy_mask,
            )
        if self.scores is not None:
            self.scores.write(artifacts)
        if self.data.test.paired:
            views = self.embed_views(self.data.test)
            arrays: dict[str, Any] = {f"view{i}": v.cpu().numpy() for i, v in enumerate(views)}
            if self.data.test.latent is not None:
                arrays["latent"] = self.data.test.latent
            np.savez_compressed(artifacts / PAIRED_EMBEDDINGS_FILE, **arrays)

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
        if inputs.dim() == 4 and channels_last(self.device, self.data.input_shape):
            inputs = inputs.to(self.device, non_blocking=True, memory_format=torch.channels_last)
        else:
            inputs = inputs.to(self.device, non_blocking=True)
        # dataset.cache: decoded ships uint8 batches; they become normalised floats here, on the device (with the
        # two-view families' colour augmentation for their training views).
        on_device = self.data.views_on_device if views and self.data.views_on_device else self.data.on_device
        return on_device(inputs) if on_device is not None else inputs

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Embeddings in float32; the network runs under bf16 autocast when the GPU supports it."""
        dtype = autocast_dtype(self.device, self.spec.train.amp)
        autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with autocast:
            return self.model(inputs).float()

    def train_epoch(self, max_batches: int | None = None) -> dict[str, float]:
        """One pass of P×K batches; returns the mean of each loss term and of their sum. ``max_batches`` ends the pass
        early (the bill's calibration times a short pass against a whole one, :mod:`study.search.calibration`); the
        batches the loader's workers had prefetched are dropped when its next pass starts."""
        self.model.train()
        self.family.train()
        sums: dict[str, float] = {}
        n_batches = 0
        for inputs, labels, indices in self._train_loader():
            if n_batches == max_batches:
                break
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
        if not bool(torch.isfinite(out).all()):  # the weights diverged (a finite last loss does not rule it out)
            raise NonFiniteLossError(f"epoch {self.epoch}: the embeddings are not finite")
        return out

    @torch.inference_mode()
    def embed_views(self, split: LabeledSplit) -> list[torch.Tensor]:
        """For a paired split: the model's output (before ``test_embedding``) for each view of every sample."""
        assert isinstance(split.items, torch.Tensor), "a paired split holds its views in memory"
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
        if self.keep_class_scores:  # a second kNN search, on the validation fold only (small beside training)
            self.class_scores = per_class_scores(emb, self.data.test.labels, self.spec.recall_ks, gallery=gallery)
        if self.data.test.categories is not None and self.epoch == self.spec.train.epochs:
            metrics.update(per_category_metrics(emb, self.data.test.labels, self.data.test.categories, gallery))
        if self.data.test.paired:
            metrics.update(paired_metrics(*self.embed_views(self.data.test)))
        if self.spec.train.linear_probe:
            train = self.embed(self.data.train)
            metrics.update(linear_probe_accuracy(train, self.data.train.labels, test, self.data.test.labels))
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
