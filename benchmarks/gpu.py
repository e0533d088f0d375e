"""GPU benchmarks, for a machine with CUDA (none was available when this was written; CI never has one).

    PYTHONPATH=$PWD python -m benchmarks.gpu [--quick] [--steps 30] [--batch 120] [--workers 1 2 4]

1. **Trial step**: one training step of the trial loop (a :class:`trainables.loop.TrialRun`'s member: bf16 autocast,
   channels_last, ResNet-50 + 512-d embedding, MS loss + miner, Adam) on synthetic 224 px images already on the
   GPU, in images/s, against NVIDIA's published ResNet-50 training throughput on one A100 80GB with AMP
   (~2,470 img/s at batch 256, DeepLearningExamples, PyTorch, "Training performance: NVIDIA DGX A100").
2. **Loader**: JPEG decode + the training augmentation (:class:`trainables.data._files.ImageFile` with its draft
   decoding, then ``train_transform(256, 224)``) of synthetic 500x375 photos through a DataLoader, images/s per
   worker, for each ``--workers``; how many workers keep the step of (1) fed.
3. **Evaluation at SOP scale**: :func:`trainables.metrics.retrieval.retrieval_metrics` on 60,502 x 512 embeddings of
   11,316 classes (faiss on the GPU when faiss-gpu is installed; says which).
4. **BSPML w-step at CUB and SOP scale**: the real ``ms_terms`` + ``solve_weights`` on the GPU at N = 5,864
   (CUB-200 train) and 59,551 (SOP train), as a share of a θ-epoch at the step rate of (1).
5. **Trial fed from the decoded cache** (``dataset.cache: decoded``): a TrialRun member's ``train_epoch`` of a
   ResNet-50 trial (bf16, channels_last) on a fake CUB tree of 500x375 JPEGs, uint8 batches from the node's cache
   through the loop's DataLoader (pinned, non-blocking), normalised on the GPU; img/s against (1), the card on
   device-resident tensors (goal >= 70 %), and against the A100 anchor. The cache build is timed separately.
6. **Fractional GPUs**: ``--fractions`` runs that many cached small trials at once on the one card (one process
   each, ``resources.gpu = 1/n`` in spirit: they share the device), summed img/s against one trial alone.

(5) and (6) run on the CPU too (``cached_trial(gpu=False, ...)``, tests/benchmarks/test_suite.py), so their
plumbing is tested on machines without CUDA; only their numbers need the GPU.

Without CUDA it prints one line and exits with status 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

#: NVIDIA's published ResNet-50 v1.5 training throughput, 1x A100 80GB, AMP, batch 256 (images/s).
NVIDIA_A100_AMP_IMG_S = 2470.0
CUB_TRAIN, CUB_TRAIN_CLASSES = 5864, 100
SOP_TRAIN, SOP_TRAIN_CLASSES = 59551, 11318
SOP_TEST, SOP_TEST_CLASSES = 60502, 11316


def _median_time(fn: Any, repeats: int) -> float:
    """Median seconds of ``fn()`` (CUDA-synchronised), with no untimed warm-up run."""
    from benchmarks.components import timed

    return timed(fn, repeats, warmup=0)[0]


def trial_step(batch: int, steps: int, backbone: str = "resnet50") -> float:
    """Images/s of the loop's training step (forward, loss, backward, optimiser) on device-resident images."""
    import torch

    from study.intake.spec_reader import parse_spec
    from trainables.data._splits import DatasetSplits, in_memory_split
    from trainables.families.base import Batch
    from trainables.loop import TrialRun

    classes = batch // 4
    spec = parse_spec(
        {
            "name": "gpu_bench",
            "family": "ms",
            "dataset": {"name": "digits"},  # replaced by the synthetic splits below
            "model": {"backbone": backbone, "embedding_dim": 512},
            "train": {"epochs": 1, "classes_per_batch": classes, "samples_per_class": 4, "amp": True},
            "resources": {"cpu": 1, "gpu": 1},
        }
    )
    images = torch.zeros(2 * classes, 3, 8, 8)  # the run needs splits; the step below feeds its own images
    labels = np.arange(2 * classes) % classes
    data = DatasetSplits(
        name="synthetic",
        train=in_memory_split(images, labels, np.ones(len(labels), bool)),
        test=in_memory_split(images, labels, np.ones(len(labels), bool)),
        input_shape=(3, 224, 224),
    )
    trial = TrialRun.single(spec, data).member  # the step below drives the member's forward and optimiser
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    y = torch.arange(batch, device="cuda") % classes
    idx = torch.arange(batch, device="cuda")
    trial.model.train()

    def step() -> None:
        emb = trial._forward(x)  # bf16 autocast, float32 embeddings: the loop's own forward
        loss = torch.stack(list(trial.family.compute_loss(emb, Batch(x, y, idx)).values())).sum()
        trial.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trial.optimizer.step()

    for _ in range(5):  # cuDNN autotuning, allocator warm-up
        step()

    def steps_in_a_row() -> None:
        for _ in range(steps):
            step()

    seconds = _median_time(steps_in_a_row, 3)
    return batch * steps / seconds


def loader(workers: list[int], images: int, batch: int) -> dict[int, float]:
    """Images/s through a DataLoader (decode + augmentation) for each worker count."""
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    from trainables.data._splits import IndexedDataset, LabeledSplit
    from trainables.data.image_file import ImageFile
    from trainables.data.transforms import train_transform

    rng = np.random.default_rng(0)
    out: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for i in range(images):
            # Smooth random photos (noise compresses unrealistically badly): upsampled 25x19 colour fields.
            small = rng.integers(0, 256, (19, 25, 3), dtype=np.uint8)
            Image.fromarray(small).resize((500, 375), Image.Resampling.BICUBIC).save(Path(tmp) / f"{i}.jpg", quality=90)
            names.append(f"{i}.jpg")
        labels = np.arange(images) % 10
        split = LabeledSplit(items=names, labels=labels, true_labels=labels.copy(), load_item=ImageFile(tmp, 256))
        dataset = IndexedDataset(split, train_transform(256, 224))
        for w in workers:
            dl = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=w, persistent_workers=w > 0)
            next(iter(dl))  # start the workers
            start = time.perf_counter()
            n = sum(len(b[1]) for b in dl)
            out[w] = n / (time.perf_counter() - start)
            del dl
    del torch
    return out


def evaluation(n: int, classes: int, dim: int = 512) -> tuple[float, bool]:
    """Seconds of ``retrieval_metrics`` on ``n`` clustered embeddings; and whether faiss ran on the GPU."""
    from trainables.metrics.neighbours import use_faiss_gpu
    from trainables.metrics.retrieval import retrieval_metrics

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, dim)).astype(np.float32)
    emb = centres[labels] + 1.5 * rng.standard_normal((n, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    retrieval_metrics(emb[:2000], labels[:2000], (1, 2, 4, 8))  # faiss GPU resources, once per process
    start = time.perf_counter()
    retrieval_metrics(emb, labels, (1, 10, 100, 1000))
    return time.perf_counter() - start, use_faiss_gpu()


def w_step(n: int, classes: int, dim: int = 512) -> float:
    """Seconds of one BSPML w-step (ξ terms + coordinate solver) on the GPU at ``n`` samples."""
    import torch
    import torch.nn.functional as F

    from trainables.families.bspml.loss import BSPMLParams
    from trainables.families.self_paced import ClassIndex, WeightProblem, ms_terms, solve_weights

    prm = BSPMLParams()
    g = torch.Generator(device="cuda").manual_seed(0)
    emb = F.normalize(torch.randn(n, dim, device="cuda", generator=g), dim=1)
    labels = torch.randint(0, classes, (n,), device="cuda", generator=g)
    index = ClassIndex.build(labels)

    def step() -> None:
        xi_pos, xi_neg = ms_terms(emb, labels, prm.ms_alpha, prm.ms_beta, prm.ms_base, prm.chunk_size)
        problem = WeightProblem(xi_pos, xi_neg, index, 3.0, prm.balance)
        solve_weights(problem, torch.ones(n, device="cuda"), **prm.sampled_solver(), generator=g)

    step()
    return _median_time(step, 3)


def cached_trial(
    gpu: bool,
    backbone: str = "resnet50",
    classes: int = 20,
    per_class: int = 30,
    batch: int = 120,
    workers: int = 4,
    batches: int = 20,
    image_size: int | None = None,
) -> dict[str, float]:
    """Training img/s of a trial fed from the decoded cache of a fake CUB tree (500x375 JPEGs), and its build time.

    ``classes`` × ``per_class`` images per half (train and test classes); the epoch is ``batches`` P×K batches
    (P = batch / 4), after one untimed epoch that starts the loader's workers and cuDNN's autotuning.
    """
    import torch

    from harness.fake_data import write_cub
    from study.intake.spec_reader import parse_spec
    from trainables.loop import TrialRun

    classes = max(classes, batch // 4)  # a P×K batch needs P training classes (the first half of those written)
    with tempfile.TemporaryDirectory(prefix="gpu_cached") as tmp:
        write_cub(Path(tmp), 2 * classes, per_class, size=(500, 375))
        spec = parse_spec(
            {
                "name": "gpu_cached",
                "family": "ms",
                "dataset": {
                    "name": "cub200",
                    "root": tmp,
                    "cache_dir": f"{tmp}/cache",
                    **({"image_size": image_size} if image_size else {}),
                },
                "model": {"backbone": backbone, "embedding_dim": 512},
                "train": {
                    "epochs": 1,
                    "classes_per_batch": batch // 4,
                    "samples_per_class": 4,
                    "amp": True,
                    "num_workers": workers,
                    "batches_per_epoch": batches,
                },
                "resources": {"cpu": max(1, workers), "gpu": 1 if gpu else 0},
            }
        )
        start = time.perf_counter()
        trial = TrialRun.single(spec).member  # builds the cache (decode + resize of every image, once)
        build_s = time.perf_counter() - start  # the member: its training epoch alone is timed
        assert trial.data.image_cache is not None, "the trial did not read from the decoded cache"
        trial.train_epoch()  # warm-up: loader workers, cuDNN autotuning, allocator

        def epoch() -> None:
            trial.train_epoch()
            if gpu:
                torch.cuda.synchronize()

        seconds = _median_time(epoch, 3)
        return {"img_s": (batch // 4) * 4 * batches / seconds, "build_s": build_s, "images": 2 * classes * per_class}


def fractional(n: int, gpu: bool, **kw: Any) -> tuple[float, float]:
    """(summed img/s of ``n`` cached small trials training at once on the one device, img/s of one alone)."""
    import json
    import subprocess

    code = (
        "import json, sys; from benchmarks.gpu import cached_trial; "
        f"print(json.dumps(cached_trial({gpu!r}, **json.loads(sys.argv[1]))))"
    )

    def run_all(k: int) -> float:
        procs = [
            subprocess.Popen([sys.executable, "-c", code, json.dumps(kw)], stdout=subprocess.PIPE, text=True)
            for _ in range(k)
        ]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        return sum(o["img_s"] for o in outs)

    return run_all(n), run_all(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=120, help="P x K batch of the trial step (P = batch / 4, K = 4)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--images", type=int, default=512, help="synthetic JPEGs for the loader benchmark")
    p.add_argument("--fractions", type=int, default=4, help="small trials sharing the card in (6)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.gpu: no CUDA device (torch.cuda.is_available() is False); nothing measured")
        return 0
    name = torch.cuda.get_device_name(0)
    print(f"benchmarks.gpu on {name}, torch {torch.__version__}, bf16 {torch.cuda.is_bf16_supported()}")
    steps, images = (3, 64) if args.quick else (args.steps, args.images)
    img_s = trial_step(args.batch, steps)
    print(
        f"trial step ResNet-50 224px bf16 channels_last, batch {args.batch}: {img_s:,.0f} img/s "
        f"({img_s / NVIDIA_A100_AMP_IMG_S:.2f}x NVIDIA's ~{NVIDIA_A100_AMP_IMG_S:,.0f} img/s A100 AMP classification)"
    )
    per_worker = loader(args.workers, images, 32)
    for w, rate in per_worker.items():
        print(
            f"loader JPEG 500x375 decode+augment, {w} workers: {rate:,.0f} img/s ({rate / max(w, 1):,.0f} per worker)"
        )
    best = max(per_worker, key=lambda w: per_worker[w] / max(w, 1))
    print(f"  workers to feed the step: ~{img_s / (per_worker[best] / max(best, 1)):.1f}")
    n, c = (6000, 600) if args.quick else (SOP_TEST, SOP_TEST_CLASSES)
    seconds, on_gpu = evaluation(n, c)
    print(f"evaluation N={n} x 512, {c} classes: {seconds:.2f} s (faiss on the {'GPU' if on_gpu else 'CPU'})")
    for label, n, c in (("CUB", CUB_TRAIN, CUB_TRAIN_CLASSES), ("SOP", SOP_TRAIN, SOP_TRAIN_CLASSES)):
        if args.quick:
            n, c = n // 10, max(2, c // 10)
        seconds = w_step(n, c)
        epoch = n / img_s
        print(
            f"BSPML w-step {label} N={n}: {seconds:.3f} s = {100 * seconds / (seconds + epoch):.1f}% of a θ-epoch "
            f"+ w-step ({epoch:.1f} s of steps at the rate above, loader and embedding pass not counted)"
        )
    workers = max(args.workers)
    small: dict[str, Any] = {"classes": 4, "batches": 3} if args.quick else {}
    fed = cached_trial(True, batch=args.batch, workers=workers, **small)
    print(
        f"trial fed from the decoded cache, ResNet-50 bf16 channels_last, batch {args.batch}, {workers} workers: "
        f"{fed['img_s']:,.0f} img/s = {100 * fed['img_s'] / img_s:.0f}% of the card on device tensors (goal >= 70%), "
        f"{fed['img_s'] / NVIDIA_A100_AMP_IMG_S:.2f}x the A100 anchor; cache build {fed['build_s']:.1f} s "
        f"for {fed['images']:.0f} images (inside TrialRun.single)"
    )
    small = {"backbone": "resnet18", "image_size": 112, "batch": 32, "workers": 1, "classes": 4, "batches": 10}
    together, alone = fractional(args.fractions, True, **small)
    print(
        f"fractional GPU: {args.fractions} ResNet-18 112px trials at once {together:,.0f} img/s summed vs one alone "
        f"{alone:,.0f} img/s ({together / alone:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
