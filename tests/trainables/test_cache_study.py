"""A small_cnn study on a fake CUB tree trained from the decoded cache, read back from MLflow, against the same study
on the PIL pipeline: the cache changes where the pixels come from, not what the model sees."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from harness.fake_data import write_cub

pytestmark = pytest.mark.e2e


def _spec(root, cache: str, cache_dir) -> dict:
    return {
        "name": f"cub_{cache}",
        "family": "ms",
        "dataset": {"name": "cub200", "root": str(root), "cache": cache, "cache_dir": str(cache_dir)},
        "model": {"backbone": "small_cnn", "embedding_dim": 16},
        "train": {"epochs": 2, "classes_per_batch": 3, "samples_per_class": 2, "recall_at": [1, 2], "num_workers": 1},
        "validation": {"kind": "none"},
        "final": {"seeds": 0},
        "search": {"num_trials": 1, "space": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-3}}},
    }


def _trial_metrics(tmp_path, name: str) -> dict[str, float]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / name / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("dmlstudy.role") == "trial"]
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    return runs[0].data.metrics


@pytest.mark.usefixtures("on_warm_head")
def test_study_trains_from_the_cache_like_the_pil_pipeline(write_spec, run_cli, tmp_path):
    root, _ = write_cub(tmp_path / "data", n_classes=6, per_class=6, size=(60, 45))
    cache_dir = tmp_path / "node_cache"
    results = {}
    for cache in ("decoded", "none"):
        proc = run_cli(str(write_spec(_spec(root, cache, cache_dir), f"{cache}.yaml")))
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[cache] = _trial_metrics(tmp_path, f"cub_{cache}")
    # One file per dataset and size, in the node-local directory, none in the study storage.
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".lock", ".u8"]
    assert not list((tmp_path / "runs").rglob("*.u8"))
    # Same seed, same crops and flips, same normalised pixels: the same losses and retrieval metrics.
    for key in ("train/loss", "test/recall_at_1", "test/recall_at_2"):
        assert results["decoded"][key] == pytest.approx(results["none"][key], rel=1e-5, abs=1e-6), key
