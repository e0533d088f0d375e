"""The measured bill of a table or study on this machine, checked against real epochs of the same trials.

    PYTHONPATH=$PWD python -m benchmarks.bill_check search_spaces/table_cub.yaml --fake-cub 100 59 \
        --set model.pretrained=false [--set ...] [--epochs 1]

1. **The bill**: the calibration ``--plan`` runs (:mod:`study.search.calibration`: a few batches and one evaluation of
   each arm), and the size line it prices, beside the spec's assumed ``search.epoch_seconds`` when it has one.
2. **The check**: per arm, its first cell's search trial (as the calibration builds it,
   :func:`~study.search.calibration.trial_of_family`) at full size (every batch of an epoch, every fold) and
   ``--epochs`` epochs of it timed after one untimed warm-up epoch, against the calibration's ``search_epoch_s``: the
   number the bill multiplies by every trial's epochs. A ratio near 1 says the few timed batches stand for a whole
   epoch on this hardware (loader start-up, cuDNN's autotuning and the evaluation included).

``--fake-cub CLASSES PER_CLASS`` writes a CUB-200-2011 tree of that size (twice ``CLASSES`` classes: the first half
train, as the real split) and points ``dataset.root`` at it: for a machine without the real data. Its photos are
500×375 JPEGs of smooth random colour fields (a few hundred random pixels upsampled, plus grain), which compress
and decode about as natural photos do; random-pixel JPEGs (:mod:`harness.fake_data`) are several times larger and
slower to decode than CUB's. Pretrained weights need the internet: ``--set model.pretrained=false`` where there is
none (same cost, other numbers). Imports neither Ray nor a store: it runs where only PyTorch and the trainables'
own dependencies are installed (a GPU image).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from study.bill import arm_specs, bill_of, calibrate_plan, size_line
from study.intake.load import load_plan
from study.intake.plan import StudyPlan
from study.search.calibration import ArmCalibration, Calibration, trial_of_family
from trainables.datasets import folder_of
from trainables.schema.spec import StudySpec

__all__ = ["main", "write_photo_cub", "real_epoch_s"]

#: CUB's photos are about this size (width, height).
PHOTO = (500, 375)


def _photo(job: tuple[Path, int]) -> None:
    """One smooth random photo: a 20×15 colour field upsampled to :data:`PHOTO`, with a little grain."""
    from PIL import Image

    path, seed = job
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 256, (15, 20, 3), dtype=np.uint8)).resize(PHOTO, Image.Resampling.BICUBIC)
    pixels = np.asarray(field, dtype=np.int16) + rng.integers(-8, 9, (PHOTO[1], PHOTO[0], 3), dtype=np.int16)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)


def write_photo_cub(base: Path, classes: int, per_class: int, workers: int | None = None) -> Path:
    """``base/CUB_200_2011/`` in the official layout, ``2 × classes`` classes of ``per_class`` photos each (written in
    parallel); returns ``base`` (what ``dataset.root`` names)."""
    root = base / folder_of("cub200")
    jobs: list[tuple[Path, int]] = []
    images: list[str] = []
    labels: list[str] = []
    names: list[str] = []
    for c in range(1, 2 * classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        names.append(f"{c} {folder}")
        for j in range(per_class):
            image_id = len(images) + 1
            rel = f"{folder}/Bird_{c}_{j:04d}_{image_id}.jpg"
            jobs.append((root / "images" / rel, image_id))
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_photo, jobs, chunksize=64))
    for name, rows in {"images.txt": images, "image_class_labels.txt": labels, "classes.txt": names}.items():
        (root / name).write_text("\n".join(rows) + "\n")
    return base


def real_epoch_s(spec: StudySpec, epochs: int = 1) -> float:
    """Seconds of one epoch of ``spec``'s search trial at full size (every batch, every fold, the evaluation), the
    mean over ``epochs`` timed epochs after one untimed warm-up."""
    from trainables.loop import TrialRun

    run = TrialRun.build(spec)
    run.run_epoch()  # warm-up: loader workers, cuDNN's autotuning, the allocator, faiss
    start = time.perf_counter()
    for _ in range(epochs):
        run.run_epoch()
    return (time.perf_counter() - start) / epochs


def _bill_lines(plan: StudyPlan, cal: Calibration) -> list[str]:
    """The size line priced by ``cal`` (measured here), and the spec's assumed bill beside it."""
    lines = [f"measured: {size_line(plan, bill_of(plan, cal))}"]
    if (assumed := bill_of(plan)) is not None:
        lines.append(f"assumed:  {size_line(plan, assumed)}")
    return [*lines, _calibration_text(cal.arms, cal.wall_s)]


def _calibration_text(arms: dict[str, ArmCalibration], wall_s: float) -> str:
    rows = [
        f"  {a}: data {c.data_s:.1f} s, build {c.build_s:.1f} s, batch {c.batch_s * 1e3:.0f} ms, epoch end "
        f"{c.epoch_end_s:.2f} s, evaluation {c.eval_s:.2f} s ({c.eval_samples} samples) → search epoch "
        f"{c.search_epoch_s:.1f} s ({c.search_batches} batches, {c.models} models), final epoch {c.final_epoch_s:.1f} s"
        for a, c in arms.items()
    ]
    return "\n".join([f"calibration ({wall_s:.0f} s in all, on {next(iter(arms.values())).device}):", *rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bill_check", description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--fake-cub", nargs=2, type=int, metavar=("CLASSES", "PER_CLASS"))
    p.add_argument("--epochs", type=int, default=1, help="timed full-size epochs per arm (after one warm-up)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bill_check") as tmp:
        overrides = list(args.overrides)
        if args.fake_cub:
            start = time.perf_counter()
            write_photo_cub(Path(tmp), *args.fake_cub)
            overrides.append(f"dataset.root={tmp}")
            print(
                f"fake CUB: {2 * args.fake_cub[0]} classes × {args.fake_cub[1]} photos in "
                f"{time.perf_counter() - start:.0f} s",
                flush=True,
            )
        plan = load_plan(args.spec, overrides)
        cal = calibrate_plan(plan)  # what --plan and a run's start measure
        for line in _bill_lines(plan, cal):
            print(line, flush=True)
        for arm, spec in arm_specs(plan).items():
            real = real_epoch_s(trial_of_family(spec), args.epochs)  # the trial the calibration measured
            billed = cal.arms[arm].search_epoch_s
            print(
                f"check {arm}: a full search epoch took {real:.1f} s; the calibration billed {billed:.1f} s "
                f"(bill / real {billed / real:.2f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
