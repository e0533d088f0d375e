"""Per-epoch time of a backbone on a fake CUB-200-2011 tree (random-pixel JPEGs in the official layout).

    PYTHONPATH=$PWD python benchmarks/fake_cub_epoch.py --classes 20 --per-class 10 --image-size 224 --epochs 2

Prints the training-epoch and evaluation times of each epoch (the first includes warm-up) and the images per
second of training; on a GPU pass --gpu to let the trial use it (bf16 autocast, channels-last, faiss-gpu).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from harness.fake_data import write_cub  # noqa: E402
from study.intake.spec_reader import parse_spec  # noqa: E402
from trainables.data.transforms import image_sizes  # noqa: E402
from trainables.loop import TrialRun  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", type=int, default=20)
    p.add_argument("--per-class", type=int, default=10)
    p.add_argument("--photo-size", type=int, default=400, help="width of the fake JPEGs (CUB photos are ~500×375)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--backbone", default="resnet18")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--gpu", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root, _ = write_cub(Path(tmp), args.classes, args.per_class, size=(args.photo_size, args.photo_size * 3 // 4))
        spec = parse_spec(
            {
                "name": "bench",
                "family": "ms",
                "dataset": {"name": "cub200", "root": str(root), "image_size": args.image_size},
                "model": {"backbone": args.backbone, "embedding_dim": 512},
                "train": {
                    "epochs": args.epochs,
                    "classes_per_batch": 4,
                    "samples_per_class": 4,
                    "num_workers": args.workers,
                    "eval_batch_size": 64,
                    "recall_at": [1, 2, 4],
                },
                "resources": {"cpu": args.threads, "gpu": 1 if args.gpu else 0},
            }
        )
        trial = TrialRun.single(spec)
        member = trial.member
        n_train, n_test = len(member.data.train), len(member.data.test)
        n_seen = len(member._train_loader().sampler)  # type: ignore[arg-type]  # images per epoch: whole P×K batches
        print(
            f"device={member.device} backbone={args.backbone} image={args.image_size}px (resize "
            f"{image_sizes(spec.dataset)[0]}, cache {spec.dataset.cache}) train={n_train} test={n_test} images "
            f"({args.classes} classes × {args.per_class}), batch 4×4, threads={args.threads}, workers={args.workers}"
        )
        for _ in range(args.epochs):
            start = time.perf_counter()
            m = trial.run_epoch()
            total = time.perf_counter() - start
            print(
                f"epoch {int(m['epoch'])}: train {m['epoch_time_s']:.1f} s ({n_seen / m['epoch_time_s']:.1f} img/s), "
                f"eval {m['eval_time_s']:.1f} s, total {total:.1f} s, recall_at_1={m['test/recall_at_1']:.3f}"
            )


if __name__ == "__main__":
    main()
