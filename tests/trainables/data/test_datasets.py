"""Each loader on a fake tree in its official layout: splits, labels, counts, transforms, layout errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from pytorch_metric_learning.samplers import MPerClassSampler

from harness.fake_data import (
    write_cars,
    write_cifar10,
    write_cub,
    write_flowers,
    write_imagefolder,
    write_inshop,
    write_sop,
)
from study.intake.spec_reader import load_spec, parse_spec
from trainables import datasets
from trainables.data import check_dataset, load_dataset
from trainables.data._splits import IndexedDataset
from trainables.data.sampler import BalancedMPerClassSampler, balanced_choice
from trainables.schema.errors import DataError, SpecError
from trainables.schema.spec import DatasetSpec


def _load(name: str, root, **kw):
    return load_dataset(DatasetSpec(name=name, root=str(root), **kw), seed=0)


def _check_split(split, expected: dict) -> None:
    """Every item carries the class the fake writer gave its file."""
    assert len(split) == len(split.items)
    for item, label in zip(split.items, split.labels):
        assert expected[item] == label, item
    np.testing.assert_array_equal(split.labels, split.true_labels)


def _first_input(data, split=None) -> torch.Tensor:
    x, _, _ = IndexedDataset(split or data.test, data.eval_transform)[0]
    return data.on_device(x[None])[0] if data.on_device is not None else x  # the cache normalises on the device


def test_cub_first_half_of_classes_trains_and_images_load(tmp_path):
    root, expected = write_cub(tmp_path, n_classes=6, per_class=4)
    for given in (root, tmp_path):  # the extracted folder itself, or the directory holding it
        data = _load("cub200", given, image_size=32)
        assert set(data.train.labels) == {1, 2, 3} and set(data.test.labels) == {4, 5, 6}
        assert len(data.train) == len(data.test) == 12
        _check_split(data.train, expected)
        _check_split(data.test, expected)
    assert data.input_shape == (3, 32, 32)
    x = _first_input(data)
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and type(x) is torch.Tensor
    # Two training draws of the same image differ (random crop/flip); eval is deterministic.
    train_set = IndexedDataset(data.train, data.train_transform)
    draws = torch.stack([train_set[0][0] for _ in range(8)])
    assert not all(torch.equal(draws[0], d) for d in draws[1:])
    assert torch.equal(_first_input(data), x)


@pytest.mark.parametrize(
    ("name", "writer", "sizes", "train_classes", "test_classes"),
    [
        ("cars196", write_cars, {"n_classes": 6, "per_class": 3}, {1, 2, 3}, {4, 5, 6}),  # cars_annos.mat
        ("flowers102", write_flowers, {"n_classes": 6, "per_class": 3}, {1, 2, 3}, {4, 5, 6}),  # imagelabels.mat
        ("sop", write_sop, {"n_train": 5, "n_test": 4, "per_class": 2}, set(range(1, 6)), set(range(6, 10))),
    ],
)
def test_loader_splits_and_labels(tmp_path, name, writer, sizes, train_classes, test_classes):
    """CARS and Flowers split by the first half of the classes (their files list classes unsorted); SOP by its
    Ebay_train / Ebay_test files (and its root may be the folder holding Stanford_Online_Products/)."""
    root, expected = writer(tmp_path, **sizes)
    data = _load(name, tmp_path if name == "sop" else root, image_size=24)
    assert set(data.train.labels) == train_classes and set(data.test.labels) == test_classes
    per_class = sizes["per_class"]
    assert (len(data.train), len(data.test)) == (per_class * len(train_classes), per_class * len(test_classes))
    _check_split(data.train, expected)
    _check_split(data.test, expected)
    assert _first_input(data).shape == (3, 24, 24)


def test_inshop_has_train_query_and_gallery(tmp_path):
    root, expected = write_inshop(tmp_path, n_train=4, n_test=3, per_item=4)
    data = _load("inshop", tmp_path, image_size=32)
    assert data.gallery is not None
    for split, status in ((data.train, "train"), (data.test, "query"), (data.gallery, "gallery")):
        for item, label in zip(split.items, split.labels):
            assert expected[item] == (label, status)
    assert (len(data.train), len(data.test), len(data.gallery)) == (16, 6, 6)
    assert set(data.test.labels) == set(data.gallery.labels) == {5, 6, 7}
    assert _first_input(data, data.gallery).shape == (3, 32, 32)


def test_cifar10_keeps_the_official_split_and_pixels(tmp_path):
    root, written = write_cifar10(tmp_path, per_batch=20, n_test=30)
    data = _load("cifar10", tmp_path)
    assert (len(data.train), len(data.test)) == (100, 30)
    np.testing.assert_array_equal(data.train.labels, written["train_y"])
    np.testing.assert_array_equal(data.test.labels, written["test_y"])
    # The stored image is exactly the pickle's row, in HWC order.
    np.testing.assert_array_equal(np.asarray(data.test.load_item(data.test.items[7])), written["test_x"][7])
    assert data.input_shape == (3, 32, 32)
    x = _first_input(data)
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    expected = (torch.from_numpy(written["test_x"][0]).permute(2, 0, 1).float() / 255 - mean) / std
    torch.testing.assert_close(x, expected)  # 32 → 32: the eval transform only normalises


def test_imagefolder_first_half_or_split_file(tmp_path):
    root, expected = write_imagefolder(tmp_path, per_class=3)
    data = _load("imagefolder", root, image_size=32)
    names = sorted({c for c in expected.values()})
    train_names = {names[i] for i in np.unique(data.train.labels)}
    assert train_names == {"ant", "bee", "cat"} and len(data.train) == 9 and len(data.test) == 6
    for split in (data.train, data.test):
        for item, label in zip(split.items, split.labels):
            assert names[label] == expected[item]
    split_file = tmp_path / "split.txt"
    split_file.write_text("# explicit\ndog train\neel train\nant test\n")
    data = _load("imagefolder", root, split_file=str(split_file))
    assert {names[i] for i in np.unique(data.train.labels)} == {"dog", "eel"}
    assert {names[i] for i in np.unique(data.test.labels)} == {"ant"}  # bee, cat left out
    split_file.write_text("dog train\nyak test\n")
    with pytest.raises(DataError, match="names class 'yak'"):
        _load("imagefolder", root, split_file=str(split_file))


def test_noise_touches_only_training_labels_of_a_real_loader(tmp_path):
    root, _ = write_cub(tmp_path, n_classes=6, per_class=10)
    data = _load("cub200", root, noise={"kind": "per_class", "ratio": 0.2, "seed": 0})
    assert data.train.noisy_mask.sum() == 6  # round(0.2 · 10) in each of 3 classes
    assert not data.test.noisy_mask.any()


@pytest.mark.parametrize(
    ("name", "writer", "expected"),
    [
        ("cub200", write_cub, "CUB_200_2011/{images/"),
        ("cars196", write_cars, "cars_annos.mat"),
        ("sop", write_sop, "Ebay_train.txt"),
        ("inshop", write_inshop, "list_eval_partition.txt"),
        ("flowers102", write_flowers, "imagelabels.mat"),
        ("cifar10", write_cifar10, "cifar-10-batches-py"),
        ("imagefolder", write_imagefolder, "<root>/<class>/<image>"),
    ],
)
def test_missing_root_names_dataset_path_layout_and_source(tmp_path, name, writer, expected):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as err:
        check_dataset(DatasetSpec(name=name, root=str(missing)))
    msg = str(err.value)
    assert "\n" not in msg and f"dataset {name!r}" in msg and str(missing) in msg and expected in msg
    assert "published at" in msg
    assert (f"python -m study.data fetch {name} --root DIR" in msg) == (name != "imagefolder")  # the fix, named
    root, _ = writer(tmp_path)
    check_dataset(DatasetSpec(name=name, root=str(root)))  # the real layout passes


def test_malformed_annotations_are_one_line_errors(tmp_path):
    root, _ = write_cub(tmp_path)
    (root / "images.txt").write_text("1 a.jpg extra\n")
    with pytest.raises(DataError, match=r"line 1 has 3 fields instead of 2: .*images.txt"):
        check_dataset(DatasetSpec(name="cub200", root=str(root)))
    root, _ = write_sop(tmp_path)
    (root / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n1 x 1 a.JPG\n")
    with pytest.raises(DataError, match=r"expected an integer, got 'x'"):
        check_dataset(DatasetSpec(name="sop", root=str(root)))
    root, _ = write_flowers(tmp_path)
    (root / "imagelabels.mat").write_bytes(b"not a mat file")
    with pytest.raises(DataError, match="cannot read 'labels'"):
        check_dataset(DatasetSpec(name="flowers102", root=str(root)))
    root, _ = write_cars(tmp_path)
    for f in (root / "car_ims").iterdir():
        f.unlink()
    with pytest.raises(DataError, match=r"missing: .*car_ims/000"):
        check_dataset(DatasetSpec(name="cars196", root=str(root)))


def test_unreadable_image_fails_with_its_path(tmp_path):
    root, _ = write_cub(tmp_path)
    data = _load("cub200", root)
    (root / data.test.items[0]).write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read image .*Bird_4"):
        IndexedDataset(data.test, data.eval_transform)[0]


def test_spec_needs_root_for_on_disk_data_and_makes_it_absolute(tmp_path, monkeypatch):
    with pytest.raises(SpecError, match="dataset.root: required for dataset 'cub200'"):
        parse_spec({"name": "s", "family": "ms", "dataset": {"name": "cub200"}})
    with pytest.raises(SpecError, match="split_file applies to imagefolder only"):
        parse_spec({"name": "s", "family": "ms", "dataset": {"name": "sop", "root": "x", "split_file": "y"}})
    with pytest.raises(SpecError, match="resize_size >= image_size"):
        parse_spec(
            {"name": "s", "family": "ms", "dataset": {"name": "sop", "root": "x", "image_size": 64, "resize_size": 32}}
        )
    monkeypatch.chdir(tmp_path)
    spec = parse_spec({"name": "s", "family": "ms", "dataset": {"name": "sop", "root": "data/SOP"}})
    assert spec.dataset.root == str(tmp_path / "data" / "SOP")  # trials run elsewhere (Ray's trial dir)


@pytest.mark.parametrize("dataset", ["cub", "cars", "sop", "inshop"])
def test_paper_specs_validate_without_the_data(dataset):
    from tests.conftest import REPO

    path = REPO / "search_spaces" / f"ms_{dataset}.yaml"
    spec = load_spec(path)
    raw = yaml.safe_load(path.read_text())
    assert raw["model"] == {**raw["model"], "backbone": "resnet50", "embedding_dim": 512}
    assert (spec.train.classes_per_batch, spec.train.samples_per_class) == (16, 4)
    assert spec.resources.gpu == 1
    assert spec.dataset.root is not None


# ------------------------------------------------------------------------------------------------ sampler


def test_balanced_choice_uses_every_image_of_a_small_class():
    rng = np.random.RandomState(0)
    for n, k in ((2, 4), (3, 4), (1, 4), (5, 4), (2, 2)):
        for _ in range(50):
            draw = balanced_choice(np.arange(n), k, rng)
            counts = np.bincount(draw, minlength=n)
            assert len(draw) == k
            assert counts.max() - counts.min() <= 1 if n < k else counts.max() == 1


def test_sop_like_classes_with_two_images_give_real_positive_pairs():
    labels = np.repeat(np.arange(40), 2)  # SOP: many classes with 2 images
    np.random.seed(0)
    sampler = BalancedMPerClassSampler(labels, m=4, batch_size=16, length_before_new_iter=len(labels))
    batches = np.array(list(sampler)).reshape(-1, 4)  # one row per class block
    assert len(batches) * 4 == len(sampler) == 80
    for block in batches:
        assert len(set(labels[block])) == 1 and len(set(block)) == 2  # both images, each twice
    # PML's sampler draws with replacement here, so some blocks hold one image four times (no positive pair).
    np.random.seed(0)
    pml = np.array(list(MPerClassSampler(labels, m=4, batch_size=16, length_before_new_iter=8000))).reshape(-1, 4)
    assert any(len(set(block)) == 1 for block in pml)


def test_sampler_with_hundreds_per_class_draws_distinct_images():
    labels = np.repeat(np.arange(6), 300)
    np.random.seed(1)
    idx = np.array(list(BalancedMPerClassSampler(labels, m=4, batch_size=12, length_before_new_iter=1200)))
    assert len(idx) == 1200
    for batch in idx.reshape(-1, 12):
        blocks = batch.reshape(3, 4)
        assert all(len(set(b)) == 4 and len(set(labels[b])) == 1 for b in blocks)
        assert len(set(labels[batch])) == 3


# ------------------------------------------------------------------------------------------ the contract


def _fake_root(name: str, tmp_path) -> dict:
    """A spec's dataset keys for ``name`` on a fake tree (on-disk) or as it is (embedded)."""
    from study.data._export import export_csv

    writers = {
        "cub200": write_cub,
        "cars196": write_cars,
        "sop": write_sop,
        "inshop": write_inshop,
        "flowers102": write_flowers,
        "cifar10": write_cifar10,
        "imagefolder": write_imagefolder,
    }
    if name in writers:
        root, _ = writers[name](tmp_path)
        return {"root": str(tmp_path if name == "sop" else root)}
    if name == "csv":
        write_cub(tmp_path, n_classes=6, per_class=3)
        export_csv("cub200", tmp_path, tmp_path / "cub.csv")
        return {"root": str(tmp_path), "annotations": "cub.csv"}
    return {"root": str(tmp_path)} if name == "flows2d" else {}


@pytest.mark.parametrize("name", datasets.DATASET_NAMES)
def test_every_dataset_name_builds_or_names_how_to_get_it(name, tmp_path, monkeypatch):
    """Every name a spec may use: an on-disk one without its data is one line naming the dataset, the directory and
    (for the published ones) ``python -m study.data fetch``; on its layout (fake files) or embedded, it loads a
    class-disjoint split (the same classes for ``SAME_CLASS_TEST_DATASETS`` and flows2d) whose items load, paired exactly for
    ``PAIRED_DATASETS`` (whose trials report the paired metrics)."""
    from tests.trainables.test_flows2d import TINY
    from trainables.data import flows2d

    monkeypatch.setattr(flows2d, "DEFAULT_FLOWS", TINY)
    extra = {"annotations": "d.csv"} if name == "csv" else {}
    if name in datasets.ON_DISK_DATASETS:
        missing = tmp_path / "nowhere"
        with pytest.raises(DataError) as err:
            check_dataset(DatasetSpec(name=name, root=str(missing), **extra))
        msg = str(err.value)
        assert "\n" not in msg and f"dataset {name!r}" in msg and str(missing) in msg
        assert (f"python -m study.data fetch {name}" in msg) == (name not in {"imagefolder", "csv"}), msg
    keys = _fake_root(name, tmp_path / "data")
    spec = DatasetSpec(name=name, image_size=16, **keys) if name not in datasets.EMBEDDED_DATASETS else None
    data = load_dataset(spec or DatasetSpec(name=name, **keys), seed=0)
    train, test = set(data.train.labels.tolist()), set(data.test.labels.tolist())
    assert train and test and len(data.train) and len(data.test)
    # flows2d's labels are the octants of the latent z in both splits (they drive the sampler and Recall@1 only).
    same_classes = datasets.SAME_CLASS_TEST_DATASETS | {"flows2d"}
    assert (train == test) if name in same_classes else not (train & test)
    assert data.test.paired == (name in datasets.PAIRED_DATASETS)
    x, label, index = IndexedDataset(data.test, data.eval_transform)[0]
    assert int(label) == int(data.test.labels[0]) and int(index) == 0 and isinstance(x, torch.Tensor)
