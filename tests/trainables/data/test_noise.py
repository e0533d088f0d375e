from __future__ import annotations

import numpy as np
import pytest

from trainables.data import load_dataset
from trainables.data.noise import (
    clean_list_of,
    map_noisy_list,
    per_class_noise,
    small_cluster_noise,
    uniform_noise,
)
from trainables.schema.errors import DataError
from trainables.schema.spec import DatasetSpec


def _labels(classes: int = 10, per_class: int = 50) -> np.ndarray:
    return np.repeat(np.arange(classes), per_class)


@pytest.mark.parametrize("ratio", [0.1, 0.2, 0.3])
def test_per_class_noise_moves_the_ratio_of_every_class_and_every_class_receives(ratio):
    labels = _labels()
    noisy = per_class_noise(labels, ratio, np.random.default_rng(0))
    for c in range(10):
        moved = np.mean(noisy[labels == c] != c)
        assert moved == pytest.approx(ratio)
        received = np.sum((noisy == c) & (labels != c))
        assert received > 0
    assert np.all(noisy[noisy != labels] != labels[noisy != labels])


def test_uniform_noise_flips_at_rate_p_to_other_classes_uniformly():
    labels = _labels(classes=5, per_class=4000)
    noisy = uniform_noise(labels, 0.3, np.random.default_rng(1))
    flipped = noisy != labels
    assert flipped.mean() == pytest.approx(0.3, abs=0.01)
    targets = np.bincount(noisy[flipped & (labels == 0)], minlength=5)
    assert targets[0] == 0 and np.all(np.abs(targets[1:] / targets[1:].sum() - 0.25) < 0.03)


def test_noise_is_reproducible_by_seed_and_never_touches_test_labels():
    spec = DatasetSpec(name="digits", noise={"kind": "per_class", "ratio": 0.2, "seed": 3})
    a, b = load_dataset(spec, 0), load_dataset(spec, 1)
    c = load_dataset(DatasetSpec(name="digits", noise={"kind": "per_class", "ratio": 0.2, "seed": 4}), 0)
    clean = load_dataset(DatasetSpec(name="digits"), 0)
    assert np.array_equal(a.train.labels, b.train.labels) and not np.array_equal(a.train.labels, c.train.labels)
    assert np.array_equal(a.test.labels, clean.test.labels) and not a.test.noisy_mask.any()
    assert np.array_equal(a.train.true_labels, clean.train.labels)
    assert a.train.noisy_mask.mean() == pytest.approx(0.2, abs=0.01)


def test_clean_only_subset_is_the_topline_arm():
    noisy = DatasetSpec(name="digits", noise={"kind": "uniform", "ratio": 0.3, "seed": 0})
    full = load_dataset(noisy, 0)
    topline = load_dataset(noisy.model_copy(update={"subset": "clean_only"}), 0)
    assert len(topline.train) == int((~full.train.noisy_mask).sum())
    assert not topline.train.noisy_mask.any()


# --------------------------------------------------------------------------- PRISM's small-cluster noise


@pytest.mark.parametrize("ratio", [0.25, 0.5])
def test_small_cluster_noise_dissolves_the_ratio_of_classes_into_small_clusters(ratio):
    """PRISM's lists (CUB 0.25): a quarter of the classes lose every sample, no other class loses any, each
    dissolved class is spread in small groups (mean ~2.3) over many surviving classes."""
    labels = _labels(classes=80, per_class=60)
    noisy = small_cluster_noise(labels, ratio, np.random.default_rng(0))
    moved = noisy != labels
    dissolved = [c for c in range(80) if moved[labels == c].all()]
    assert len(dissolved) == round(ratio * 80)
    survivors = sorted(set(range(80)) - set(dissolved))
    assert not moved[np.isin(labels, survivors)].any()
    assert set(np.unique(noisy)) == set(survivors)  # every noisy label is a surviving class
    assert moved.mean() == pytest.approx(ratio)
    groups = {(int(t), int(o)) for t, o in zip(labels[moved], noisy[moved], strict=True)}
    sizes = [int(np.sum((labels == t) & (noisy == o))) for t, o in groups]
    assert 2.0 < np.mean(sizes) < 2.6  # small clusters (PRISM's lists: 2.3), not whole classes
    targets_per_class = len(groups) / len(dissolved)
    assert targets_per_class > 10
    again = small_cluster_noise(labels, ratio, np.random.default_rng(0))
    assert np.array_equal(noisy, again)


def test_small_cluster_noise_through_the_spec_on_glyphs():
    spec = DatasetSpec(name="glyphs", noise={"kind": "small_cluster", "ratio": 0.25, "seed": 0})
    train = load_dataset(spec, 0).train
    assert train.num_classes == 128 - 32
    assert train.noisy_mask.mean() == pytest.approx(0.25)


# ------------------------------------------------------------------------------- kind: file (noisy lists)


def _glyphs_list(tmp_path, fmt: str):
    """A hand-made list for glyphs: samples 0-2 of class 0 given the labels of classes 5, 6, 7; every other
    sample keeps its own label. Paths are glyphs' synthetic ``glyphs/<index in the training split>``."""
    clean = load_dataset(DatasetSpec(name="glyphs"), 0).train
    labels = clean.labels.copy()
    changed = np.flatnonzero(labels == 0)[:3]
    labels[changed] = [5, 6, 7]
    sep = "," if fmt == "csv" else " "
    lines = [f"glyphs/{i}{sep}{labels[i]}" for i in range(len(labels))]
    path = tmp_path / f"glyphs_noised_train.{fmt}"
    path.write_text("\n".join(lines[::-1]) + "\n")  # any order: rows are matched by path
    return path, labels, changed


@pytest.mark.parametrize("fmt", ["csv", "txt"])
def test_file_noise_reproduces_a_hand_made_list_exactly(tmp_path, fmt):
    path, expected, changed = _glyphs_list(tmp_path, fmt)
    spec = DatasetSpec(name="glyphs", noise={"kind": "file", "file": str(path)})
    train = load_dataset(spec, 0).train
    assert np.array_equal(train.labels, expected)
    assert np.array_equal(np.flatnonzero(train.noisy_mask), changed)  # true labels: glyphs' own


def test_file_noise_maps_prism_csv_paths_and_its_own_label_ids(tmp_path):
    """PRISM's format: absolute paths under another root, labels renumbered 0..C'-1 (its small-cluster lists)."""
    from harness.fake_data import write_cub

    root, _ = write_cub(tmp_path, n_classes=6, per_class=4)
    train = load_dataset(DatasetSpec(name="cub200", root=str(root)), 0).train  # classes 1-3
    # Class 3 dissolved into classes 1 and 2 (two samples each); list ids 0, 1 for classes 1, 2.
    list_label = {1: 0, 2: 1}
    rows, expected = [], train.labels.copy()
    for i, (item, y) in enumerate(zip(train.items, train.labels, strict=True)):
        target = y if y != 3 else (1 if i % 2 else 2)
        expected[i] = target
        rows.append(f"/data/CUB_200_2011/{item},{list_label[int(target)]}")
    path = tmp_path / "CUB_0.33smallclusternoised_train.csv"
    path.write_text("\n".join(rows) + "\n")
    noisy = load_dataset(DatasetSpec(name="cub200", root=str(root), noise={"kind": "file", "file": str(path)}), 0)
    assert np.array_equal(noisy.train.labels, expected)
    assert np.array_equal(noisy.train.noisy_mask, train.labels == 3)


def test_file_noise_names_the_first_unmatched_path(tmp_path):
    path, _, _ = _glyphs_list(tmp_path, "csv")
    path.write_text(path.read_text() + "glyphs/99999,3\nglyphs/100000,4\n")
    spec = DatasetSpec(name="glyphs", noise={"kind": "file", "file": str(path)})
    with pytest.raises(DataError, match="'glyphs/99999' matches no training sample") as e:
        load_dataset(spec, 0)
    assert "\n" not in str(e.value)


def test_file_noise_missing_samples_and_bad_lines_are_one_line(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("glyphs/0 0\n")
    with pytest.raises(DataError, match="lists 1 of the 1536 training samples; first one missing: 'glyphs/1'"):
        load_dataset(DatasetSpec(name="glyphs", noise={"kind": "file", "file": str(path)}), 0)
    path.write_text("glyphs/0 zero\n")
    with pytest.raises(DataError, match="line 1: label 'zero' is not an integer"):
        load_dataset(DatasetSpec(name="glyphs", noise={"kind": "file", "file": str(path)}), 0)


def test_an_unmatched_list_is_exit_2_with_one_line_and_nothing_started(tmp_path, write_spec, spec_dict, capsys):
    from study.commands.run import main

    path = tmp_path / "wrong.csv"
    path.write_text("/elsewhere/not_a_digit.png,1\n")
    spec_dict["dataset"] = {"name": "digits", "noise": {"kind": "file", "file": str(path), "ratio": 0.2}}
    code = main([str(write_spec(spec_dict)), "--no-dashboard", "--set", f"storage={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'/elsewhere/not_a_digit.png' matches no training sample" in err
    assert not (tmp_path / "runs").exists()


def test_noise_spec_file_rules():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs dataset.noise.file"):
        DatasetSpec(name="glyphs", noise={"kind": "file"})
    with pytest.raises(ValidationError, match="applies to kind 'file' only"):
        DatasetSpec(name="glyphs", noise={"kind": "uniform", "ratio": 0.2, "file": "x.csv"})


def test_prism_clean_list_beside_a_noisy_list_anchors_the_label_mapping(tmp_path):
    """Tiny classes (SOP): class 3's three samples all moved to class 1 (two own samples) outnumber it; the overlap
    alone would call class 1's own samples noisy. PRISM's ``*_cleaned_train.csv`` beside the list settles it."""
    paths = [f"s/{i}" for i in range(7)]
    true = np.array([1, 1, 2, 2, 3, 3, 3])
    rows = [(p, lab) for p, lab in zip(paths, [0, 0, 1, 1, 0, 0, 0], strict=True)]  # PRISM ids: 0 = class 1
    wrong = map_noisy_list(rows, paths, true, "x")
    assert (wrong != true).sum() == 2  # class 1's own samples look moved: the ambiguity
    clean_rows = rows[:4]
    right = map_noisy_list(rows, paths, true, "x", anchors=clean_rows)
    assert np.array_equal(right != true, true == 3)
    noisy = tmp_path / "X_0.5smallclusternoised_train.csv"
    noisy.write_text("".join(f"/d/{p},{lab}\n" for p, lab in rows))
    assert clean_list_of(noisy) is None
    (tmp_path / "X_0.5smallclusternoised_cleaned_train.csv").write_text(
        "".join(f"/d/{p},{lab}\n" for p, lab in clean_rows)
    )
    assert clean_list_of(noisy) == tmp_path / "X_0.5smallclusternoised_cleaned_train.csv"
