"""``dataset.cache: decoded`` against the PIL pipeline it replaces, on fake CUB trees: the same evaluation tensors,
the same training crops under the same seed, one build for concurrent builders, and rebuilds of corrupt or stale
files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.fake_data import write_cub
from trainables.data import decoded_cache, load_dataset
from trainables.data._splits import IndexedDataset
from trainables.data.decoded_cache import BLOCK, HEADER
from trainables.schema.spec import DatasetSpec


@pytest.fixture
def cub(tmp_path: Path) -> Path:
    # 120x90 (± 8) photos: resized to 73 or 256 px they are not square, so crops really move along the long side.
    root, _ = write_cub(tmp_path / "data", n_classes=6, per_class=4, size=(120, 90))
    return root


def _pair(root: Path, cache_dir: Path, **sizes):
    pil = load_dataset(DatasetSpec(name="cub200", root=str(root), cache="none", **sizes), seed=0)
    cached = load_dataset(DatasetSpec(name="cub200", root=str(root), cache_dir=str(cache_dir), **sizes), seed=0)
    return pil, cached


def _batch(data, split, transform, n: int, normalise: bool = True) -> torch.Tensor:
    ds = IndexedDataset(split, transform)
    x = torch.stack([ds[i % len(split)][0] for i in range(n)])
    return data.on_device(x) if normalise and data.on_device is not None else x


@pytest.fixture(autouse=True)
def _fresh_process_state():
    decoded_cache._OPENED.clear()  # every test opens (and so checks) its files like a new trial process
    yield
    decoded_cache._OPENED.clear()


@pytest.mark.parametrize("sizes", [{}, {"image_size": 64}, {"image_size": 64, "resize_size": 64}])
def test_eval_tensors_equal_the_pil_pipeline(cub, tmp_path, sizes):
    """Exact equality: the cache stores the very output of the PIL pipeline's resize, a center crop is slicing, and
    the batched normalisation runs torchvision's own kernels (elementwise, so batching changes no bit)."""
    pil, cached = _pair(cub, tmp_path / "cache", **sizes)
    assert cached.input_shape == pil.input_shape
    for split in ("train", "test"):
        a = _batch(pil, getattr(pil, split), pil.eval_transform, len(getattr(pil, split)))
        raw = _batch(cached, getattr(cached, split), cached.eval_transform, len(getattr(cached, split)), False)
        assert raw.dtype == torch.uint8  # what crosses to the device
        b = cached.on_device(raw)
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape
        assert torch.equal(a, b), (split, (a - b).abs().max())


@pytest.mark.parametrize("sizes", [{}, {"image_size": 64}, {"image_size": 64, "resize_size": 64}])
def test_training_crops_are_the_pil_pipelines_under_the_same_seed(cub, tmp_path, sizes):
    """Same RNG calls in the same order (crop top, left, then the flip draw): 60 draws give identical tensors, so
    the crop/flip distribution is torchvision's (the last case pads by crop // 8 first, the small-image rule)."""
    pil, cached = _pair(cub, tmp_path / "cache", **sizes)
    torch.manual_seed(7)
    a = _batch(pil, pil.train, pil.train_transform, 60)
    torch.manual_seed(7)
    b = _batch(cached, cached.train, cached.train_transform, 60)
    assert torch.equal(a, b)
    # and the draws really are random: several crops of the same image differ
    same_image = b[:: len(cached.train)]
    assert not all(torch.equal(same_image[0], x) for x in same_image[1:])


def test_view_crops_follow_the_random_resized_crop_rule(cub, tmp_path):
    """Two-view families: uint8 views of the crop size, the scale (0.2-1) and ratio (3/4-4/3) of torchvision's
    RandomResizedCrop box, whose parameters are drawn relative to the stored image."""
    from torchvision.transforms import v2

    _, cached = _pair(cub, tmp_path / "cache", image_size=64)
    views = IndexedDataset(cached.train, cached.view_transform, num_views=2)[0][0]
    assert views.shape == (2, 3, 64, 64) and views.dtype == torch.uint8 and not torch.equal(views[0], views[1])
    on_device = cached.views_on_device(views)  # colour jitter, grayscale and normalisation, batched
    assert on_device.dtype == torch.float32 and on_device.shape == views.shape
    image = torch.zeros(3, 73, 97)
    rrc = v2.RandomResizedCrop(64, scale=(0.2, 1.0))
    boxes = np.array([[p["height"], p["width"]] for p in (rrc.make_params([image]) for _ in range(4000))])
    area = boxes.prod(1) / (73 * 97)
    assert area.max() <= 1.0 and np.quantile(area, 0.02) >= 0.19 and 0.45 < np.median(area) < 0.75


def _cache_file(cached) -> Path:
    return cached.image_cache.path


def test_file_is_built_once_then_reused_and_holds_the_resized_pixels(cub, tmp_path):
    _, cached = _pair(cub, tmp_path / "cache")
    path = _cache_file(cached)
    assert not path.exists()  # loading the dataset (the driver's checks) builds nothing
    cached.image_cache.ensure()
    mtime = path.stat().st_mtime_ns
    decoded_cache._OPENED.clear()
    cached.image_cache.ensure()
    assert path.stat().st_mtime_ns == mtime and cached.image_cache.verify()
    rel = cached.test.items[3]
    with Image.open(cub / rel) as img:
        expected = img.convert("RGB")
    from torchvision.transforms import v2

    np.testing.assert_array_equal(cached.test.load_item(rel), np.asarray(v2.Resize(256)(expected)))
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.parametrize("damage", ["pixel", "truncate", "header", "no_trailer"])
def test_corrupt_file_is_detected_and_rebuilt(cub, tmp_path, damage):
    pil, cached = _pair(cub, tmp_path / "cache")
    cached.image_cache.ensure()
    path = _cache_file(cached)
    raw = bytearray(path.read_bytes())
    if damage == "pixel":
        raw[HEADER + 5] ^= 0xFF  # in the first block, which every open checks
    elif damage == "truncate":
        raw = raw[: HEADER + BLOCK // 2]
    elif damage == "header":
        raw[:8] = b"garbage!"
    else:
        raw[-32:] = bytes(32)
    path.write_bytes(bytes(raw))
    decoded_cache._OPENED.clear()
    assert decoded_cache._open(path, cached.image_cache.fingerprint(), cached.image_cache.items) is None
    a = _batch(pil, pil.test, pil.eval_transform, 12)
    b = _batch(cached, cached.test, cached.eval_transform, 12)  # the first read rebuilds
    assert torch.equal(a, b) and cached.image_cache.verify()


def test_a_flipped_byte_anywhere_fails_the_full_check(cub, tmp_path):
    _, cached = _pair(cub, tmp_path / "cache")
    cached.image_cache.ensure()
    path = _cache_file(cached)
    raw = bytearray(path.read_bytes())
    raw[HEADER + len(raw) // 3] ^= 0x01
    path.write_bytes(bytes(raw))
    assert not cached.image_cache.verify()


def test_changed_source_image_makes_the_file_stale(cub, tmp_path):
    pil, cached = _pair(cub, tmp_path / "cache")
    cached.image_cache.ensure()
    rel = cached.test.items[0]
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (100, 130, 3), dtype=np.uint8)).save(cub / rel)
    decoded_cache._OPENED.clear()
    a = _batch(pil, pil.test, pil.eval_transform, 12)
    b = _batch(cached, cached.test, cached.eval_transform, 12)
    assert torch.equal(a, b)  # the new pixels, not the stored ones
    assert tuple(cached.test.load_item(rel).shape) == (256, 332, 3)


_BUILDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from trainables.schema.spec import DatasetSpec
    from trainables.data import load_dataset
    from trainables.data import decoded_cache

    builds = []
    real_build = decoded_cache.DecodedImages.build
    def counted(self, *a, **k):
        builds.append(1)
        time.sleep(0.5)  # widen the window in which the other process would start a build of its own
        return real_build(self, *a, **k)
    decoded_cache.DecodedImages.build = counted
    root, cache_dir, go = sys.argv[1:]
    data = load_dataset(DatasetSpec(name="cub200", root=root, cache_dir=cache_dir), seed=0)
    while not Path(go).exists():
        time.sleep(0.01)
    data.image_cache.ensure()
    print(len(builds), data.image_cache.path.stat().st_ino)
    """
)


def test_concurrent_builders_build_one_file(cub, tmp_path):
    cache_dir, go = tmp_path / "cache", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILDER, str(cub), str(cache_dir), str(go)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    go.touch()
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(int(o[0]) for o in outs) == [0, 1]  # one built, the other waited on the lock and reused it
    assert outs[0][1] == outs[1][1]  # both mapped the same file
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".lock", ".u8"]


def test_unreadable_image_fails_the_build_with_its_path(cub, tmp_path):
    from trainables.schema.errors import DataError

    _, cached = _pair(cub, tmp_path / "cache")
    (cub / cached.test.items[0]).write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read image .*Bird_4"):
        cached.image_cache.ensure()
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".lock"]  # nothing half-written


def test_device_colour_jitter_is_torchvisions_per_sample():
    """Each sample's own draws, applied batched, give what torchvision's functional ops give that image alone."""
    from torchvision.transforms.v2 import functional as F

    from trainables.data.cached_transforms import DeviceColorJitter

    torch.manual_seed(0)
    x = torch.rand(24, 3, 12, 10)
    jitter = DeviceColorJitter()
    prm = jitter.sample(len(x), x.device)
    out = jitter.apply(x.clone(), prm)
    ops = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    for i in range(len(x)):
        y = x[i]
        if prm.jitter[i]:
            for k in prm.order[i].tolist():
                y = ops[k](y, float(prm.factors[i, k]))
        if prm.gray[i]:
            y = F.rgb_to_grayscale(y, num_output_channels=3)
        torch.testing.assert_close(out[i], y, atol=2e-6, rtol=0)
    assert 0 < int(prm.jitter.sum()) < len(x)  # both branches were exercised


def test_device_colour_jitter_draws_follow_view_transforms_rule():
    from trainables.data.cached_transforms import DeviceColorJitter

    torch.manual_seed(1)
    prm = DeviceColorJitter().sample(40000, torch.device("cpu"))
    assert abs(prm.jitter.float().mean() - 0.8) < 0.01 and abs(prm.gray.float().mean() - 0.2) < 0.01
    lo, hi = prm.factors.min(0).values, prm.factors.max(0).values
    assert torch.all(lo >= torch.tensor([0.6, 0.6, 0.6, -0.1])) and torch.all(hi <= torch.tensor([1.4, 1.4, 1.4, 0.1]))
    torch.testing.assert_close(prm.factors.mean(0), torch.tensor([1.0, 1.0, 1.0, 0.0]), atol=0.01, rtol=0)
    first = torch.bincount(prm.order[:, 0], minlength=4).float() / len(prm.order)
    torch.testing.assert_close(first, torch.full((4,), 0.25), atol=0.01, rtol=0)  # every op first as often
    assert torch.equal(prm.order.sort(1).values, torch.arange(4).expand(len(prm.order), 4))  # permutations


@pytest.mark.parametrize("family", ["ms", "debiased_neg"])
def test_a_trial_trains_and_evaluates_from_the_cache(cub, tmp_path, family):
    """The loop end to end on cached data: uint8 batches in, normalised (and, for two views, jittered) on the device."""
    from study.intake.spec_reader import parse_spec
    from trainables.loop import TrialRun

    spec = parse_spec(
        {
            "name": "cached",
            "family": family,
            "dataset": {"name": "cub200", "root": str(cub), "cache_dir": str(tmp_path / "cache"), "image_size": 32},
            "train": {"epochs": 1, "classes_per_batch": 3, "samples_per_class": 2, "batches_per_epoch": 2},
        }
    )
    trial = TrialRun.single(spec)
    assert trial.full.image_cache is not None and trial.full.image_cache.path.exists()
    metrics = trial.run_epoch()
    assert np.isfinite(metrics["train/loss"]) and 0 <= metrics["test/recall_at_1"] <= 1


def test_unwritable_cache_dir_is_one_line_naming_the_key(cub, tmp_path):
    from trainables.schema.errors import DataError

    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    _, cached = _pair(cub, blocker / "cache")
    with pytest.raises(DataError, match=r"dataset.cache_dir .*not_a_dir/cache: cannot write the decoded image cache"):
        cached.image_cache.ensure()
