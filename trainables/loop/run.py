"""What one Ray trial trains and reports: :class:`TrialRun`, its members in lockstep, one checkpoint for all."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trainables.data import DatasetSplits
from trainables.data.folds import check_validation, fold_splits, validation_groups
from trainables.loop.dataset_cache import cached_dataset
from trainables.loop.member import Member
from trainables.metrics.per_class import PerClass, from_record, to_record
from trainables.metrics.retrieval import retrieval_metrics
from trainables.models import input_dataset
from trainables.schema.metric_names import (
    COST_GPU,
    COST_MODEL_EPOCHS,
    COST_WALL,
    EPOCH,
    EPOCH_TIME,
    EVAL_TIME,
    TEST_PREFIX,
    VAL_PREFIX,
    on_fold,
    on_test,
)
from trainables.schema.record import ARTIFACTS_DIR, VAL_PER_CLASS
from trainables.schema.spec import StudySpec

__all__ = ["TrialRun", "CHECKPOINT_FILE"]

#: The checkpoint file in every directory :meth:`TrialRun.save` writes.
CHECKPOINT_FILE = "trial_state.pt"


def _normalized_concat(parts: list[torch.Tensor]) -> np.ndarray:
    """MLRC's fold ensemble: each model's L2-normalised embedding, concatenated and re-normalised."""
    joined = torch.cat([torch.nn.functional.normalize(p.float(), dim=1) for p in parts], dim=1)
    return torch.nn.functional.normalize(joined, dim=1).cpu().numpy()


@dataclass
class TrialRun:
    """What one Ray trial trains and reports, by stage and validation protocol.

    - Search stage with ``validation.kind: kfold``: one :class:`Member` per fold, each trained on the other folds'
      classes, all in lockstep; every epoch reports ``val/<metric>`` (the mean over folds) and
      ``val/fold<i>/<metric>``; the last epoch also reports ``test/<metric>`` of the fold ensemble (MLRC), which
      the searcher and scheduler never see (they read the search metric, a ``val/`` name).
    - Search stage with ``holdout``: one model, ``val/`` every epoch, its ``test/`` at the last epoch.
    - Search stage with ``none``, and the final stage: one model on all training classes, ``test/`` every epoch.

    Training metrics (losses, family traces, noise diagnostics) are means over the models; times are sums.
    """

    spec: StudySpec
    members: list[Member]
    #: The dataset with its label noise; its test classes are evaluated by the end-of-trial ensemble only.
    full: DatasetSplits
    on_validation: bool
    #: Wall seconds this trial has spent in all its attempts (the trainable adds each attempt's; the checkpoint keeps
    #: the sum, so a restarted trial's cost goes on from its last epoch).
    spent_s: float = 0.0
    #: A search trial under ``search.select_on: {mean_last: k}``: k (else 1, nothing kept). Its last k epochs'
    #: search metric and per-class records are kept (and checkpointed), so every epoch reports their mean as
    #: ``search.objective`` and :meth:`class_record` their per-class mean.
    select_k: int = 1
    recent: list[float] = field(default_factory=list)
    recent_classes: list[list[dict]] = field(default_factory=list)

    @classmethod
    def build(cls, spec: StudySpec, final: bool = False, data: DatasetSplits | None = None) -> TrialRun:
        """The trial of ``spec`` in the search stage (``final=True``: the final stage), on ``data`` (default: the
        spec's dataset with its label noise, from this process's cache; a benchmark may pass synthetic splits)."""
        full = cached_dataset(input_dataset(spec)) if data is None else data
        v = spec.validation
        select_on = spec.search.select_on
        k = 1 if final or select_on == "last" else select_on.mean_last  # the final stage ranks nothing
        if final or not v.enabled:
            run = cls.single(spec, full)
            run.select_k = k
            return run
        check_validation(full.train.num_classes, v, spec.train.classes_per_batch, spec.dataset.name)
        members = [Member.build(spec, fold_splits(full, g, v.labels)) for g in validation_groups(full.train.labels, v)]
        for member in members:
            member.keep_class_scores = True
        return cls(spec=spec, members=members, full=full, on_validation=True, select_k=k)

    @classmethod
    def single(cls, spec: StudySpec, data: DatasetSplits | None = None) -> TrialRun:
        """One member on all training classes, reporting ``test/`` every epoch: the final stage's trial and a search
        without validation. Tests and benchmarks that train one model build this (``spec.validation`` aside)."""
        full = cached_dataset(input_dataset(spec)) if data is None else data
        return cls(spec=spec, members=[Member.build(spec, full)], full=full, on_validation=False)

    @property
    def member(self) -> Member:
        """The one model of a trial without folds (its family, loaders and optimiser, for tests that probe them)."""
        assert len(self.members) == 1, "a k-fold trial has one member per fold"
        return self.members[0]

    @property
    def epoch(self) -> int:
        return self.members[0].epoch

    def run_epoch(self) -> dict[str, float]:
        """Train every member one epoch, evaluate each; returns this epoch's metrics, named by split."""
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
        if self.select_k > 1:
            self._keep_recent(metrics)
        return metrics

    def _keep_recent(self, metrics: dict[str, float]) -> None:
        """Keep this epoch's search metric (and its per-class records) among the last ``select_k`` and report their
        mean as ``search.objective``: what ranks the trial under ``select_on: {mean_last: k}``, at a rung of the
        scheduler as at the end (fewer than k epochs so far: the mean of those)."""
        search = self.spec.search
        if (value := metrics.get(search.metric)) is None:
            return
        self.recent = [*self.recent, float(value)][-self.select_k :]
        metrics[search.objective] = float(np.mean(self.recent))
        if (folds := self._class_folds()) is not None:
            self.recent_classes = [*self.recent_classes, folds][-self.select_k :]

    def _class_folds(self) -> list[dict] | None:
        """This epoch's search metric per validation class of each fold (records), or ``None`` (no validation fold,
        or a metric that is no mean over queries: NMI)."""
        name = self.spec.search.metric.removeprefix(VAL_PREFIX)
        if not self.on_validation or any(name not in m.class_scores for m in self.members):
            return None
        return [to_record(m.class_scores[name]) for m in self.members]

    def class_record(self) -> dict[str, str]:
        """The search metric per validation class of each fold at this epoch (:data:`~trainables.schema.record.VAL_PER_CLASS`,
        JSON: ``{"metric": …, "folds": [per-class record, …]}``), which Ray keeps in the trial's results per epoch and the
        searcher stores on the Optuna trial when it ends (study.final.reliability bootstraps it); empty when the trial
        evaluates no validation fold or its search metric is not a mean over queries (NMI). Under ``select_on:
        {mean_last: k}`` each class's mean over the last k epochs, whose mean over queries is what ranks the trial."""
        if self.select_k > 1:  # the records _keep_recent kept (none: no validation fold, or NMI)
            folds = [_mean_record(epochs) for epochs in zip(*self.recent_classes)] or None
        else:
            folds = self._class_folds()
        if folds is None:
            return {}
        name = self.spec.search.metric.removeprefix(VAL_PREFIX)
        return {VAL_PER_CLASS: json.dumps({"metric": name, "folds": folds}, separators=(",", ":"))}

    def cost(self) -> dict[str, float]:
        """What the trial has cost so far: models × epochs trained, wall seconds, GPU-seconds (on a GPU: wall × the
        GPUs the trial holds, ``resources.gpu``, a share of one counted as its share)."""
        out = {COST_MODEL_EPOCHS: float(self.epoch * len(self.members)), COST_WALL: self.spent_s}
        if self.members[0].device.type == "cuda":
            out[COST_GPU] = self.spent_s * self.spec.resources.gpu
        return out

    def ensemble_test(self) -> dict[str, float]:
        """Retrieval metrics of the models' concatenated embeddings on the test classes (one model: its own)."""
        test = _normalized_concat([m.embed(self.full.test) for m in self.members])
        g = self.full.gallery
        gallery = None if g is None else (_normalized_concat([m.embed(g) for m in self.members]), g.labels)
        return retrieval_metrics(test, self.full.test.labels, self.spec.recall_ks, seed=self.spec.seed, gallery=gallery)

    def save(self, directory: Path) -> None:
        """One checkpoint file with every model's state; the first model's artifacts for MLflow."""
        recent = {"values": self.recent, "classes": self.recent_classes}
        state = {"members": [m.state() for m in self.members], "spent_s": self.spent_s, "recent": recent}
        torch.save(state, directory / CHECKPOINT_FILE)
        self.members[0].write_artifacts(directory / ARTIFACTS_DIR)

    def restore(self, directory: Path) -> None:
        state = torch.load(directory / CHECKPOINT_FILE, map_location=self.members[0].device, weights_only=False)
        assert len(state["members"]) == len(self.members), "a checkpoint of another validation layout"
        self.spent_s = float(state.get("spent_s", 0.0))  # a checkpoint written before costs were kept: from 0
        recent = state.get("recent") or {}  # a checkpoint written before select_on ranked on the last epoch alone
        self.recent, self.recent_classes = list(recent.get("values", [])), list(recent.get("classes", []))
        for member, member_state in zip(self.members, state["members"]):
            member.load_state(member_state)  # the RNG states are equal: the last one restored is the live one


def _mean_record(epochs: tuple[dict, ...]) -> dict:
    """One fold's per-class record averaged over epochs: each class's sum over its queries, averaged (the fold's
    classes and queries are the same every epoch; a record with other classes, which no trial writes, is dropped for
    the last one)."""
    last = from_record(epochs[-1])
    same = [r for r in map(from_record, epochs) if np.array_equal(r.classes, last.classes)]
    sums = np.mean([r.sums for r in same], axis=0)
    return to_record(PerClass(last.classes, sums, last.counts))


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the rows that have it (a fold without noisy samples reports no noise diagnostics)."""
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in keys}
