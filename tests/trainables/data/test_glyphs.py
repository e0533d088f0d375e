"""The generated ``glyphs`` dataset: deterministic, class-disjoint, well-formed, and classes look different."""

from __future__ import annotations

import numpy as np
import torch

from trainables.data import ON_DISK_DATASETS, check_dataset, load_dataset
from trainables.data.glyphs import DEFAULT_CONFIG, make_glyphs
from trainables.models import build_model
from trainables.schema.spec import DatasetSpec, ModelSpec

CFG = DEFAULT_CONFIG
#: Summary of the default build (see test_fingerprint_is_pinned).
FINGERPRINT_LABEL_SUM = 260864
FINGERPRINT_MEAN = 0.14707735877336817
FINGERPRINT_BRIGHT = 84111


def _load(**kw):
    return load_dataset(DatasetSpec(name="glyphs", **kw), seed=0)


def test_generation_is_deterministic():
    images, labels = make_glyphs.__wrapped__(CFG)  # a fresh build, not the cached one
    again, again_labels = make_glyphs.__wrapped__(CFG)
    assert torch.equal(images, again) and np.array_equal(labels, again_labels)
    a, b = _load(), _load()
    assert torch.equal(a.train.items, b.train.items) and torch.equal(a.test.items, b.test.items)
    assert np.array_equal(a.train.labels, b.train.labels) and np.array_equal(a.test.labels, b.test.labels)


def test_fingerprint_is_pinned():
    """Every process and machine must build the same images: a change of the generator (or of numpy's
    random streams) shows up here; update the numbers only on purpose, with the benchmark re-measured."""
    images, labels = make_glyphs(CFG)
    assert int(labels.sum()) == FINGERPRINT_LABEL_SUM
    assert abs(float(images.double().mean()) - FINGERPRINT_MEAN) < 1e-5
    assert int((images > 0.5).sum()) == FINGERPRINT_BRIGHT


def test_split_is_class_disjoint_with_enough_training_classes():
    data = _load()
    train, test = set(data.train.labels.tolist()), set(data.test.labels.tolist())
    assert not train & test
    assert len(train) == CFG.train_classes and len(test) == CFG.test_classes
    # 4 class-disjoint validation folds of at least P = 8 classes each (the shipped P).
    assert len(train) >= 4 * 8
    assert np.bincount(data.train.labels)[sorted(train)].tolist() == [CFG.train_samples] * CFG.train_classes
    assert len(data.test) == CFG.test_classes * CFG.test_samples
    np.testing.assert_array_equal(data.train.labels, data.train.true_labels)


def test_shapes_dtypes_and_range():
    data = _load()
    s = CFG.image_size
    assert data.name == "glyphs" and data.input_shape == (1, s, s)
    for split in (data.train, data.test):
        x = split.items
        assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.shape[1:] == (1, s, s)
        assert split.labels.dtype == np.int64
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        assert torch.allclose(torch.round(x * 255), x * 255, atol=1e-3)  # 8-bit levels
    # every image holds a glyph, not just noise
    assert bool(((data.train.items > 0.5).flatten(1).sum(1) >= 5).all())
    view = data.view_transform(data.train.items[0])
    assert view.shape == (1, s, s)


def test_classes_differ_more_than_samples_within_a_class():
    images, labels = make_glyphs(CFG)
    x = images.flatten(1).double()
    classes = np.unique(labels)
    means = torch.stack([x[torch.as_tensor(labels == c)].mean(0) for c in classes])
    d2 = torch.cdist(x, x).pow(2)
    same = torch.as_tensor(labels[:, None] == labels[None, :])
    off_diagonal = ~torch.eye(len(labels), dtype=torch.bool)
    # two samples of different classes are further apart than two samples of one class ...
    assert d2[~same].mean() > 1.1 * d2[same & off_diagonal].mean()
    # ... and a nearest-class-mean classifier in pixel space is far above chance, but not perfect
    assign = torch.cdist(x, means).argmin(1).numpy()
    accuracy = float((classes[assign] == labels).mean())
    assert 10 / len(classes) < accuracy < 0.999


def test_name_validates_without_a_root_and_small_cnn_takes_it():
    spec = DatasetSpec(name="glyphs", noise={"kind": "per_class", "ratio": 0.2, "seed": 0})
    assert "glyphs" not in ON_DISK_DATASETS
    check_dataset(spec)  # nothing to check: no root
    data = load_dataset(spec, seed=0)
    assert 0.15 < data.train.noisy_mask.mean() < 0.25 and not (data.test.labels != data.test.true_labels).any()
    model = build_model(ModelSpec(backbone="small_cnn", embedding_dim=16), data.input_shape)
    out = model(data.train.items[:4])
    assert out.shape == (4, 16) and torch.allclose(out.norm(dim=1), torch.ones(4), atol=1e-5)
