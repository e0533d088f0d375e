"""What one trial of each arm costs on this machine, measured before a table (or a study) starts: the bill's unit.

Written by hand, not taken from a profiler or from Ray: the question is narrow (seconds per training batch, per epoch's
evaluation, per trial's start-up, apart, for the exact trial the driver will run: its data, model, family, folds and
device), it must run in a few seconds inside the driver without Ray or any store, and the trainables' own
:class:`~trainables.loop.run.TrialRun` already builds and runs exactly that trial, so measuring it is a few timers
around its public calls, not a second loop.

Per arm (its first cell's spec as a trial of the arm's family runs it; the family decides the cost, the noise ratio
barely):

1. the dataset is loaded once per dataset spec (``data_s``, not through the worker's cache, so the driver keeps no
   copy afterwards);
2. the search trial is built with ``train.batches_per_epoch`` cut to ``2 b`` (``build_s``: its models, one per fold,
   their families and optimisers), where ``b`` is ``batches`` or twice ``train.num_workers``, whichever is larger;
3. one warm-up epoch (``run_epoch``: training, the family's epoch end, the evaluation: loader workers, cuDNN's
   autotuning, kernels and faiss warm);
4. each model's whole training pass (``2 b`` batches) and a short one (its first ``b`` batches), timed: their
   difference is ``b`` batches in the steady state, so ``batch_s`` (one batch of one model) leaves out what every
   pass pays once before its first batch, while its loader's workers fill the pipeline (measured on an H200 with 8
   workers: two batches a pass, as before, billed a ResNet-50 CUB epoch 26-44 % high; docs/notebook/tables.md);
5. one more epoch, timed by the trial's own ``epoch_time_s`` and ``eval_time_s``: what its training part takes beyond
   ``2 b`` steady batches is the epoch's fixed share (``epoch_end_s``: the pipeline's fill, and the family's epoch end,
   e.g. BSPML's w-step embeds the training set once an epoch), and ``eval_s`` is the evaluation a search trial does
   every epoch.

A real epoch is then ``batches_per_epoch`` (or the split's number of P×K batches) × ``batch_s`` + ``epoch_end_s`` per
model, plus ``eval_s``; a final run's evaluation (on the test classes) is ``eval_s`` scaled by the samples it embeds.
Left out: the end-of-trial fold ensemble on the test classes, checkpoint writes, Ray's scheduling and the driver's
overhead (docs/notebook/tables.md, "The measured bill"). Nothing is written anywhere and nothing is cached: a calibration is
measured anew every time (a few seconds), so it cannot be stale for a changed spec or machine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainables.families.registry import family_param_names
from trainables.schema.metric_names import EPOCH_TIME, EVAL_TIME
from trainables.schema.space import CategoricalParam
from trainables.schema.spec import StudySpec
from trainables.schema.trial import resolve_trial_spec

if TYPE_CHECKING:
    from trainables.data import DatasetSplits
    from trainables.loop.run import TrialRun

__all__ = ["ArmCalibration", "Calibration", "calibrate", "trial_of_family", "CALIBRATION_BATCHES"]

#: The fewest training batches per model of the calibration's short pass (its other passes train twice as many).
CALIBRATION_BATCHES = 2


@dataclass(frozen=True)
class ArmCalibration:
    """One arm's trial measured on this machine (seconds), and the batch counts that scale it to a real epoch."""

    family: str
    device: str
    #: Loading the dataset (with its noise) once.
    data_s: float
    #: Building a search trial's models (one per fold), families and optimisers.
    build_s: float
    #: One training batch of one model.
    batch_s: float
    #: What a model's epoch takes beyond its batches (the family's epoch end, the noise diagnostics).
    epoch_end_s: float
    #: A search trial's evaluation of one epoch, all its models.
    eval_s: float
    #: Samples that evaluation embeds (to scale it to a final run's test classes).
    eval_samples: int
    #: Training batches of one search-trial epoch, summed over its models, and their number.
    search_batches: int
    models: int
    #: Training batches of one final-run epoch (one model on all training classes) and the samples it evaluates.
    final_batches: int
    final_eval_samples: int

    @property
    def startup_s(self) -> float:
        """What a trial pays before its first batch: the data and its models (an upper bound where Ray reuses a
        worker that holds the data already)."""
        return self.data_s + self.build_s

    @property
    def search_epoch_s(self) -> float:
        """One epoch of a search trial: every model's batches and epoch end, and the evaluation."""
        return self.search_batches * self.batch_s + self.models * self.epoch_end_s + self.eval_s

    @property
    def final_epoch_s(self) -> float:
        """One epoch of a final run: one model on all training classes, evaluated on the test classes."""
        final_eval = self.eval_s * self.final_eval_samples / max(self.eval_samples, 1)
        return self.final_batches * self.batch_s + self.epoch_end_s + final_eval


@dataclass(frozen=True)
class Calibration:
    """Every arm's measurement (by arm name) and the wall time the calibration itself took."""

    arms: dict[str, ArmCalibration]
    wall_s: float

    @property
    def device(self) -> str:
        return next(iter(self.arms.values())).device


def calibrate(specs: Mapping[str, StudySpec], batches: int = CALIBRATION_BATCHES) -> Calibration:
    """Measure a search trial of each spec (by arm name: a table's arm, or a study's one family) as the module
    docstring says; ``batches`` training batches per model in each pass. No Ray, no store, no file."""
    # Deferred: torch and the loop (whose package imports Ray's tune) are loaded only when a bill is measured.
    from trainables.data import load_dataset
    from trainables.models import input_dataset

    start = time.perf_counter()
    loaded: dict[str, tuple[DatasetSplits, float]] = {}
    arms = {}
    for arm, spec in specs.items():
        key = input_dataset(spec).model_dump_json()
        if key not in loaded:
            t = time.perf_counter()
            data = load_dataset(input_dataset(spec), seed=0)  # the seed is unused (trainables.loop.dataset_cache)
            loaded[key] = (data, time.perf_counter() - t)
        data, data_s = loaded[key]
        arms[arm] = _measure(trial_of_family(spec), data, data_s, batches)
    return Calibration(arms, time.perf_counter() - start)


def trial_of_family(spec: StudySpec) -> StudySpec:
    """``spec`` as a trial of one family runs it. A spec that searches ``family`` holds the fixed params of every
    family it samples (``lambda0`` for bspml beside ``memory_size`` for prism), and each trial keeps only its own
    family's (:func:`~trainables.schema.trial.resolve_trial_spec`, as the trainable resolves it): the spec's family
    where the search samples it, else the first family it samples. Any other spec is returned as it is."""
    searched = spec.search.space.get("family")
    if not isinstance(searched, CategoricalParam):
        return spec
    family = spec.family if spec.family in searched.choices else searched.choices[0]
    return resolve_trial_spec(spec, {"family": family}, family_param_names)


def _measure(spec: StudySpec, data: DatasetSplits, data_s: float, batches: int) -> ArmCalibration:
    """One arm: build its search trial cut to ``batches`` a model per epoch, warm it, time batches and an epoch."""
    import torch  # deferred with the loop: heavy

    from trainables.loop.device import trial_threads  # deferred: torch

    threads = torch.get_num_threads()
    torch.set_num_threads(trial_threads(spec.resources.cpu))  # as a trial of this spec runs (train_fn sets it)
    try:
        return _timed(spec, data, data_s, batches)
    finally:
        torch.set_num_threads(threads)


def _timed(spec: StudySpec, data: DatasetSplits, data_s: float, batches: int) -> ArmCalibration:
    from trainables.loop.run import TrialRun  # deferred: torch and the loop

    t = spec.train
    short = max(batches, 2 * t.num_workers)  # past the first batch of every worker: the pipeline is full
    cut = spec.model_copy(
        update={"train": t.model_copy(update={"batches_per_epoch": 2 * short, "epochs": max(t.epochs, 3)})}
    )
    start = time.perf_counter()
    run = TrialRun.build(cut, data=data)
    build_s = time.perf_counter() - start
    run.run_epoch()  # warm-up
    whole = _passes(run, None)
    timed = run.run_epoch()
    # Last: a pass ended early leaves prefetched batches that its loader's next pass drains (none here).
    models = len(run.members)
    steady = whole - _passes(run, short)
    # Timing noise can swallow the difference on a tiny, fast model: then the whole pass's mean stands in.
    batch_s = steady / (short * models) if steady > 0 else whole / (2 * short * models)
    epoch_end_s = max(0.0, timed[EPOCH_TIME] - batch_s * 2 * short * models) / models
    return ArmCalibration(
        family=spec.family,
        device=run.members[0].device.type,
        data_s=data_s,
        build_s=build_s,
        batch_s=batch_s,
        epoch_end_s=epoch_end_s,
        eval_s=timed[EVAL_TIME],
        eval_samples=sum(_evaluated(m.data) for m in run.members),
        search_batches=sum(_batches(spec, len(m.data.train)) for m in run.members),
        models=models,
        final_batches=_batches(spec, len(data.train)),
        final_eval_samples=_evaluated(data),
    )


def _passes(run: TrialRun, max_batches: int | None) -> float:
    """Seconds of one training pass of every model (its first ``max_batches`` batches, or all), synchronised with the
    device so that queued kernels are counted in the pass that queued them."""
    import torch

    start = time.perf_counter()
    for member in run.members:
        member.train_epoch(max_batches)
        if member.device.type == "cuda":
            torch.cuda.synchronize(member.device)
    return time.perf_counter() - start


def _batches(spec: StudySpec, samples: int) -> int:
    """A model's training batches per epoch on ``samples`` training samples (as the loop's sampler draws them)."""
    t = spec.train
    size = t.classes_per_batch * t.samples_per_class
    return t.batches_per_epoch or max(samples, size) // size


def _evaluated(data: DatasetSplits) -> int:
    """Samples an evaluation embeds: the test split and its gallery."""
    return len(data.test) + (0 if data.gallery is None else len(data.gallery))
