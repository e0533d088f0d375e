"""Images per CPU core that the training input pipeline delivers: the PIL pipeline (JPEG decode, resize, crop,
flip, normalise per image and epoch) against ``dataset.cache: decoded`` (crop and flip of the stored uint8 pixels;
the normalisation runs on the trial's device), on a generated tree of CUB-sized (500x375) JPEGs.

    PYTHONPATH=$PWD python -m benchmarks.input_pipeline [--quick] [--images 512] [--repeats 5]

Both pipelines run in this process, one thread, through a ``DataLoader`` without workers (so the collation of
P×K batches counts), interleaved repeat by repeat so that machine load slows each alike; medians are printed.
Images/s per core is images over the process's CPU seconds (``time.process_time``), which a loaded shared machine
does not inflate; wall-clock rates are printed beside them. The cache's one-off build (decode + resize of every
image, one thread) is timed separately, as is the CPU normalisation the cached path leaves to the device (the
"cached+norm" row: what it costs when the trial has no GPU). Peak RSS counts the mapped cache pages the process
touched (shared with every other trial of the node through the page cache). Cores one GPU needs are the
A100 anchor of benchmarks/gpu.py (NVIDIA's ~2,470 img/s ResNet-50 AMP training) over the per-core rate; the H100
figure assumes 2x the A100 (an assumption, not a measurement: no GPU was lent when this was written).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

#: NVIDIA's published ResNet-50 training throughput on one A100 with AMP (benchmarks/gpu.py), images/s.
A100_IMG_S = 2470.0
#: Assumed H100 throughput on the same training: 2x the A100 (assumption; not measured here).
H100_IMG_S = 2 * A100_IMG_S
RESIZE, CROP, BATCH = 256, 224, 32


def write_photos(directory: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` CUB-sized 500x375 JPEGs (quality 90) of smooth random colour fields (pure noise would compress and
    decode unlike photos), in one folder; returns their names."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    names = []
    for i in range(n):
        small = rng.integers(0, 256, (19, 25, 3), dtype=np.uint8)
        big = Image.fromarray(small).resize((500, 375), Image.Resampling.BICUBIC)
        noisy = np.clip(np.asarray(big, np.int16) + rng.integers(-12, 13, (375, 500, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(noisy).save(directory / f"{i:05d}.jpg", quality=90)
        names.append(f"{i:05d}.jpg")
    return names


def _loader(load_item: Any, names: list[str], transform: Any) -> Any:
    import torch
    from torch.utils.data import DataLoader

    from trainables.data._splits import IndexedDataset, LabeledSplit

    labels = np.arange(len(names)) % 10
    split = LabeledSplit(items=names, labels=labels, true_labels=labels.copy(), load_item=load_item)
    g = torch.Generator().manual_seed(0)
    return DataLoader(IndexedDataset(split, transform), batch_size=BATCH, shuffle=True, generator=g, drop_last=True)


def _epoch(loader: Any, after: Any = None) -> tuple[int, float, float]:
    """(images, CPU seconds, wall seconds) of one pass, ``after`` applied to every batch."""
    cpu, wall, n = time.process_time(), time.perf_counter(), 0
    for x, y, _ in loader:
        if after is not None:
            x = after(x)
        n += len(y)
    return n, time.process_time() - cpu, time.perf_counter() - wall


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run(images: int, repeats: int, emit: Any = print) -> dict[str, float]:
    import torch

    from trainables.data.cached_transforms import CachedTrainCrop, DeviceNormalize
    from trainables.data.decoded_cache import DecodedImages
    from trainables.data.image_file import ImageFile
    from trainables.data.transforms import train_transform

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="input_pipeline") as tmp:
        root, cache_dir = Path(tmp) / "photos", Path(tmp) / "cache"
        root.mkdir()
        names = write_photos(root, images)
        emit(f"{images} JPEGs 500x375 (~{sum((root / n).stat().st_size for n in names) / images / 1024:.0f} KiB each)")
        cache = DecodedImages("bench", str(root), tuple(names), RESIZE, str(cache_dir))
        cpu, wall = time.process_time(), time.perf_counter()
        cache.build(cache.fingerprint(), workers=1)
        build_cpu, build_wall = time.process_time() - cpu, time.perf_counter() - wall
        size_mib = cache.path.stat().st_size / 2**20
        cache.ensure()
        emit(
            f"cache build (decode + resize to {RESIZE}, 1 thread): {build_wall:.2f} s wall, {images / build_cpu:,.0f} "
            f"img/s per core; file {size_mib:.1f} MiB ({size_mib * 2**20 / images / 1024:.0f} KiB/image)"
        )
        pil = _loader(ImageFile(root, RESIZE), names, train_transform(RESIZE, CROP))
        cached = _loader(cache, names, CachedTrainCrop(CROP))
        rss_start = _rss_mib()
        rows: dict[str, list[tuple[int, float, float]]] = {"pil": [], "cached": [], "cached+norm": []}
        _epoch(pil), _epoch(cached)  # warm-up: page cache, allocator, lazy imports
        for _ in range(repeats):
            rows["pil"].append(_epoch(pil))
            rows["cached"].append(_epoch(cached))
            rows["cached+norm"].append(_epoch(cached, DeviceNormalize()))
        rates = {}
        for name, runs in rows.items():
            per_core = float(np.median([n / c for n, c, _ in runs]))
            wall_rate = float(np.median([n / w for n, _, w in runs]))
            rates[name] = per_core
            emit(
                f"{name:<12} {per_core:>8,.0f} img/s per core ({wall_rate:,.0f} wall), "
                f"cores per GPU at {A100_IMG_S:,.0f} img/s (A100): {A100_IMG_S / per_core:5.1f}, "
                f"at {H100_IMG_S:,.0f} img/s (H100, assumed 2x A100): {H100_IMG_S / per_core:5.1f}"
            )
        emit(
            f"peak RSS {_rss_mib():.0f} MiB ({rss_start:.0f} MiB before the timed passes; cache file {size_mib:.0f} MiB)"
        )
    rates.update(build_per_core=images / build_cpu, build_s=build_wall)
    return rates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.input_pipeline", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="64 images, 2 repeats: a smoke run")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    images, repeats = (64, 2) if args.quick else (args.images, args.repeats)
    print(
        f"benchmarks.input_pipeline: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; "
        f"train transform {RESIZE}->{CROP}, batch {BATCH}, 1 thread, median of {repeats} repeats"
    )
    r = run(images, repeats)
    print(
        f"input pipeline: 500x375 JPEGs, img/s per core, 1 thread: pil={r['pil']:.0f} img/s "
        f"cached={r['cached']:.0f} img/s ratio={r['cached'] / r['pil']:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
