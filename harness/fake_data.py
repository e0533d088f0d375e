"""Tiny fake datasets in each official layout: a few classes × a few images of random pixels.

Each writer returns the directory a user would put in ``dataset.root`` and the expected class of every image,
so tests can compare a loader's output with what was written.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from trainables.datasets import folder_of as _folder

__all__ = [
    "write_cub",
    "write_cars",
    "write_cars_mirror",
    "write_sop",
    "write_inshop",
    "write_flowers",
    "write_cifar10",
    "write_imagefolder",
]


def _image(path: Path, rng: np.random.Generator, size: tuple[int, int] = (48, 40)) -> None:
    """A random-pixel image; sizes vary a little like real photos (w, h around ``size``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size[0] + int(rng.integers(0, 9)), size[1] + int(rng.integers(0, 9))
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def write_cub(
    base: Path, n_classes: int = 6, per_class: int = 4, size: tuple[int, int] = (48, 40), seed: int = 0
) -> tuple[Path, dict[str, int]]:
    """``base/CUB_200_2011/{images/, images.txt, image_class_labels.txt, classes.txt, train_test_split.txt}``."""
    rng = np.random.default_rng(seed)
    root = base / _folder("cub200")
    lines, labels, classes, split, expected = [], [], [], [], {}
    image_id = 0
    for c in range(1, n_classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {folder}")
        for j in range(per_class):
            image_id += 1
            rel = f"{folder}/Bird_{c}_{j:04d}_{image_id}.jpg"
            _image(root / "images" / rel, rng, size)
            lines.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
            split.append(f"{image_id} {j % 2}")
            expected[f"images/{rel}"] = c
    for name, rows in {
        "images.txt": lines,
        "image_class_labels.txt": labels,
        "classes.txt": classes,
        "train_test_split.txt": split,
    }.items():
        (root / name).write_text("\n".join(rows) + "\n")
    return root, expected


def write_cars(base: Path, n_classes: int = 6, per_class: int = 3, seed: int = 0) -> tuple[Path, dict[str, int]]:
    """``base/cars196/{car_ims/000001.jpg, cars_annos.mat}`` with the official struct fields."""
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    root = base / _folder("cars196")
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    labels = rng.permutation(np.repeat(np.arange(1, n_classes + 1), per_class))  # real files are not sorted by class
    annotations = np.zeros((1, labels.size), dtype=[(f, "O") for f in fields])
    expected = {}
    for i, c in enumerate(labels, start=1):
        rel = f"car_ims/{i:06d}.jpg"
        _image(root / rel, rng)
        annotations[0, i - 1] = (rel, 1, 2, 30, 20, int(c), i % 2)
        expected[rel] = int(c)
    class_names = np.array([[f"Make Model {c}" for c in range(1, n_classes + 1)]], dtype=object)
    savemat(root / "cars_annos.mat", {"annotations": annotations, "class_names": class_names})
    return root, expected


def write_cars_mirror(base: Path, n_classes: int = 6, per_class: int = 3, seed: int = 0) -> tuple[Path, dict[str, int]]:
    """The class-folder mirror: ``base/{names.csv, anno_train.csv, anno_test.csv,
    car_data/car_data/{train,test}/<class name, '/' as '-'>/<image>.jpg}``; class 2's name holds a '/' (as the
    real "Ram C/V Cargo Van Minivan 2012" does); each class has images in both folders (the classification split)."""
    rng = np.random.default_rng(seed)
    names = [f"Make Model{'/Van' if c == 2 else ''} {c}" for c in range(1, n_classes + 1)]
    (base / "names.csv").parent.mkdir(parents=True, exist_ok=True)
    (base / "names.csv").write_text("\n".join(names) + "\n")
    rows: dict[str, list[str]] = {"train": [], "test": []}
    expected = {}
    image_id = 0
    for c in rng.permutation(np.arange(1, n_classes + 1)):
        for j in range(per_class):
            image_id += 1
            split = "train" if j % 2 == 0 else "test"
            rel = f"car_data/car_data/{split}/{names[c - 1].replace('/', '-')}/{image_id:05d}.jpg"
            _image(base / rel, rng)
            rows[split].append(f"{image_id:05d}.jpg,1,2,30,20,{c}")
            expected[rel] = int(c)
    for split, lines in rows.items():
        (base / f"anno_{split}.csv").write_text("\n".join(lines) + "\n")
    return base, expected


def write_sop(
    base: Path, n_train: int = 5, n_test: int = 4, per_class: int = 2, seed: int = 0
) -> tuple[Path, dict[str, int]]:
    """``base/Stanford_Online_Products/{Ebay_train.txt, Ebay_test.txt, <category>_final/*.JPG}``."""
    rng = np.random.default_rng(seed)
    root = base / _folder("sop")
    expected = {}
    image_id = 0
    for name, classes in (
        ("Ebay_train.txt", range(1, n_train + 1)),
        ("Ebay_test.txt", range(n_train + 1, n_train + n_test + 1)),
    ):
        rows = ["image_id class_id super_class_id path"]
        for c in classes:
            category = ("bicycle", "chair", "mug")[c % 3]
            for j in range(per_class):
                image_id += 1
                rel = f"{category}_final/{1000 + c}_{j}.JPG"
                _image(root / rel, rng)
                rows.append(f"{image_id} {c} {c % 3 + 1} {rel}")
                expected[rel] = c
        (root / name).write_text("\n".join(rows) + "\n")
    return root, expected


def write_inshop(
    base: Path, n_train: int = 4, n_test: int = 4, per_item: int = 4, seed: int = 0
) -> tuple[Path, dict[str, tuple[int, str]]]:
    """``base/In-shop Clothes Retrieval Benchmark/{img/..., Eval/list_eval_partition.txt}``; test items
    split their images between query and gallery as in the official file."""
    rng = np.random.default_rng(seed)
    root = base / _folder("inshop")
    rows, expected = [], {}
    for item in range(1, n_train + n_test + 1):
        for j in range(per_item):
            rel = f"img/WOMEN/Dresses/id_{item:08d}/{j:02d}_1_front.jpg"
            _image(root / rel, rng)
            status = "train" if item <= n_train else ("query" if j % 2 == 0 else "gallery")
            rows.append(f"{rel} id_{item:08d} {status}")
            expected[rel] = (item, status)
    (root / "Eval").mkdir(parents=True)
    header = [str(len(rows)), "image_name item_id evaluation_status"]
    (root / "Eval" / "list_eval_partition.txt").write_text("\n".join(header + rows) + "\n")
    return root, expected


def write_flowers(base: Path, n_classes: int = 6, per_class: int = 3, seed: int = 0) -> tuple[Path, dict[str, int]]:
    """``base/flowers102/{jpg/image_00001.jpg ..., imagelabels.mat}`` (labels not sorted, as in the real file)."""
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    root = base / _folder("flowers102")
    labels = rng.permutation(np.repeat(np.arange(1, n_classes + 1), per_class))
    expected = {}
    for i, c in enumerate(labels, start=1):
        rel = f"jpg/image_{i:05d}.jpg"
        _image(root / rel, rng)
        expected[rel] = int(c)
    savemat(root / "imagelabels.mat", {"labels": labels[None, :].astype(np.uint8)})
    return root, expected


def write_cifar10(
    base: Path, per_batch: int = 20, n_test: int = 30, seed: int = 0
) -> tuple[Path, dict[str, np.ndarray]]:
    """``base/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`` as python pickles."""
    rng = np.random.default_rng(seed)
    root = base / _folder("cifar10")
    root.mkdir(parents=True)
    written: dict[str, list[np.ndarray]] = {"train_x": [], "train_y": [], "test_x": [], "test_y": []}
    for name, n in [*((f"data_batch_{i}", per_batch) for i in range(1, 6)), ("test_batch", n_test)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n)]
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * n}
        with (root / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)
        key = "test" if name == "test_batch" else "train"
        written[f"{key}_x"].append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        written[f"{key}_y"].append(np.array(labels))
    with (root / "batches.meta").open("wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f, protocol=2)
    return root, {k: np.concatenate(v) for k, v in written.items()}


def write_imagefolder(
    base: Path, classes: tuple[str, ...] = ("ant", "bee", "cat", "dog", "eel"), per_class: int = 3, seed: int = 0
) -> tuple[Path, dict[str, str]]:
    """``base/folder/<class>/<image>`` with a mix of JPEG and PNG files and a non-image file to ignore."""
    rng = np.random.default_rng(seed)
    root = base / "folder"
    expected = {}
    for c in classes:
        for j in range(per_class):
            rel = f"{c}/{j}.{'png' if j % 2 else 'jpg'}"
            _image(root / rel, rng)
            expected[rel] = c
        (root / c / "notes.txt").write_text("not an image")
    return root, expected
