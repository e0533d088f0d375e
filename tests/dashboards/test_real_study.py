"""End to end: a real digits study (2 trials, 1 epoch) builds its dashboard at the end, from MLflow."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tests.dashboards.page import read_page

pytestmark = pytest.mark.e2e


def test_study_run_builds_the_dashboard(spec_dict, write_spec, run_cli, tmp_path):
    spec_dict["name"] = "t_dash"
    spec_dict["train"]["epochs"] = 1
    proc = run_cli(str(write_spec(spec_dict)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_dir = tmp_path / "runs" / "t_dash"
    page_path = study_dir / "dashboard" / "index.html"
    assert f"open {page_path}" in proc.stdout
    page = read_page(page_path)
    assert page.panels == ["leaderboard", "robustness", "optimisation", "curves"]
    assert set(page.skipped) == {"weights", "noise_theory"} and "panel failed" not in page.text
    assert {"robustness_vs_noise", "optimisation_t_dash_history", "optimisation_t_dash_slices", "curves_best"} <= set(page.figures)

    client = MlflowClient(f"sqlite:///{study_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("t_dash")
    runs = client.search_runs([experiment.experiment_id])
    trials = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
    parent = next(r for r in runs if r.data.tags.get("dmlstudy.role") == "study")
    assert len(trials) == 2
    best = max(r.data.metrics["recall_at_1"] for r in trials)
    rows = page.tables["leaderboard_table"]
    assert len(rows) == 1 and rows[0]["family"] == "ms" and rows[0]["noise"] == "none"
    assert float(rows[0]["best run"]) == best  # exactly the value MLflow holds
    assert parent.data.metrics["best_recall_at_1"] == pytest.approx(best)
    # Searched parameters come from the parent run's recorded space; importances from optuna.db.
    assert {"ms_alpha", "train.optimizer.lr"} <= {r["parameter"] for r in page.tables["optimisation_t_dash_importance"]}
    assert "dashboard/index.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "dashboard")}
