"""``benchmarks.bill_check``'s fake CUB (written for a GPU machine without the data): the official layout, read back
by the real loader with the real class split (the calibration and its check are timed on a GPU, not here)."""

from __future__ import annotations

from PIL import Image

from benchmarks.bill_check import PHOTO, write_photo_cub
from study.intake.spec_reader import parse_spec
from trainables.data.cub import load


def test_the_photo_cub_is_read_by_the_cub_loader_with_its_class_split(tmp_path):
    root = write_photo_cub(tmp_path, classes=3, per_class=2, workers=2)
    spec = parse_spec({"name": "c", "family": "ms", "dataset": {"name": "cub200", "root": str(root)}})
    splits = load(spec.dataset)
    assert (len(splits.train), len(splits.test)) == (6, 6)  # classes 1-3 train, 4-6 test (the first half trains)
    assert sorted(set(splits.train.labels.tolist())) != sorted(set(splits.test.labels.tolist()))
    first = next((root / "CUB_200_2011" / "images").rglob("*.jpg"))
    with Image.open(first) as image:
        assert image.size == PHOTO and image.format == "JPEG"
