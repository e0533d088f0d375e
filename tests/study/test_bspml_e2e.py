"""End to end: a 2-trial BSPML digits study logs every weight trace per epoch and the weight parquet."""

from __future__ import annotations

import polars as pl
import pytest
from mlflow import MlflowClient

from trainables.families.bspml.loss import BSPMLFamily
from trainables.schema import metric_names as names

pytestmark = pytest.mark.e2e


@pytest.mark.usefixtures("on_warm_head")
def test_bspml_digits_study_logs_weight_traces_and_artifacts(write_spec, run_cli, tmp_path):
    spec = {
        "name": "t_bspml",
        "family": "bspml",
        "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
        "train": {"epochs": 2, "classes_per_batch": 5, "samples_per_class": 4},
        "params": {"solver_sweeps": 5},
        "validation": {"kind": "none"},
        "final": {"seeds": 0},
        "search": {
            "num_trials": 2,
            "max_concurrent": 2,
            "metric": names.NOISE_AUROC,
            "space": {
                "lambda0": {"type": "float", "low": 0.5, "high": 3.0},
                "lambda_growth": {"type": "float", "low": 1.0, "high": 1.5},
                "lambda_max": {"type": "float", "low": 1.0, "high": 6.0},
                "mu": {"type": "float", "low": 0.0, "high": 5.0},
            },
        },
    }
    proc = run_cli(str(write_spec(spec)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs/t_bspml/mlflow.db'}")
    experiment = client.get_experiment_by_name("t_bspml")
    runs = client.search_runs([experiment.experiment_id])
    children = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
    assert len(children) == 2
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["family"] == "bspml"
        assert run.data.tags["noise_ratio"] == "0.2"
        for metric in BSPMLFamily.metric_names:
            history = client.get_metric_history(run.info.run_id, metric)
            assert sorted(m.step for m in history) == [1, 2], metric
        lam = {m.step: m.value for m in client.get_metric_history(run.info.run_id, names.LAMBDA)}
        lambda0 = min(float(run.data.params["params.lambda0"]), float(run.data.params["params.lambda_max"]))
        growth, cap = float(run.data.params["params.lambda_growth"]), float(run.data.params["params.lambda_max"])
        assert lam[1] == pytest.approx(lambda0) and lam[2] == pytest.approx(min(growth * lambda0, cap))
        assert 0.0 <= run.data.metrics[names.NOISE_AUROC] <= 1.0
        assert 0.0 <= run.data.metrics[names.W_Q10] <= run.data.metrics[names.W_Q90] <= 1.0
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"class_weights.parquet", "sample_weights.parquet", "train_labels.npz"} <= artifacts
        local = client.download_artifacts(run.info.run_id, "class_weights.parquet", str(tmp_path))
        table = pl.read_parquet(local)
        assert table.height == 2 * 5 and sorted(table["epoch"].unique().to_list()) == [1, 2]
        maw = client.get_metric_history(run.info.run_id, names.MAW)
        for m in maw:
            assert table.filter(pl.col("epoch") == m.step)["mean_weight"].mean() == pytest.approx(m.value, rel=1e-6)
