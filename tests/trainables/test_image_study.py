"""``python -m study.run`` on image data: a 1-epoch ResNet-18 study on a fake CUB tree. (A missing dataset root or
weights file: tests/study/test_fuzz_specs.py::test_bad_input_end_to_end_in_subprocesses.)"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from harness.fake_data import write_cub

pytestmark = pytest.mark.e2e


def _cub_spec(root, **model):
    return {
        "name": "cub_smoke",
        "family": "ms",
        "dataset": {"name": "cub200", "root": str(root), "image_size": 32, "resize_size": 36},
        "model": {"backbone": "resnet18", "pretrained": False, "embedding_dim": 32, **model},
        "train": {
            "epochs": 1,
            "classes_per_batch": 3,
            "samples_per_class": 2,
            "recall_at": [1, 2, 4],
            "num_workers": 1,
        },
        "validation": {"kind": "none"},
        "final": {"seeds": 0},
        "search": {
            "num_trials": 1,
            "space": {"train.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}},
        },
    }


@pytest.mark.usefixtures("on_warm_head")
def test_one_epoch_resnet18_study_on_fake_cub(write_spec, run_cli, tmp_path):
    root, _ = write_cub(tmp_path, n_classes=6, per_class=6)
    proc = run_cli(str(write_spec(_cub_spec(tmp_path))))  # the folder holding CUB_200_2011/ works too
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 trials (0 failed)" in proc.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'cub_smoke' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cub_smoke")
    trials = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("dmlstudy.role") == "trial"]
    assert len(trials) == 1 and trials[0].info.status == "FINISHED"
    run = trials[0]
    assert run.data.tags["dataset"] == "cub200" and run.data.params["model.backbone"] == "resnet18"
    assert run.data.params["dataset.root"] == str(tmp_path)
    assert 0 <= run.data.metrics["test/recall_at_1"] <= run.data.metrics["test/recall_at_4"] <= 1
    assert run.data.metrics["epoch_time_s"] > 0
