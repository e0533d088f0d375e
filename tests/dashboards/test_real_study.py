"""End to end: real digits studies (2 trials) build their dashboard at the end, from MLflow.

The first selects on the test classes (``validation: {kind: none}``, no final stage): the page says so. The second
is honest (k-fold validation, then the final stage with 2 seeds): the leaderboard shows the final test mean and
its 95 % interval beside the selected configuration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mlflow import MlflowClient
from scipy import stats

from harness.driver import honest_spec
from tests.dashboards.page import read_page

pytestmark = pytest.mark.e2e


def _runs(study_dir, name):
    client = MlflowClient(f"sqlite:///{study_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    trials = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
    parent = next(r for r in runs if r.data.tags.get("dmlstudy.role") == "study")
    return client, parent, trials


def test_study_run_builds_the_dashboard(spec_dict, write_spec, run_cli, tmp_path):
    spec_dict["name"] = "t_dash"
    spec_dict["train"]["epochs"] = 1
    proc = run_cli(str(write_spec(spec_dict)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_dir = tmp_path / "runs" / "t_dash"
    page_path = study_dir / "dashboard" / "index.html"
    assert f"open {page_path}" in proc.stdout
    page = read_page(page_path)
    assert page.panels == ["leaderboard", "robustness", "optimisation", "expected_best", "curves"]
    assert (
        set(page.skipped) == {"validation", "categories", "weights", "detectors", "noise_theory", "paired"}
        and "panel failed" not in page.text
    )
    assert {"robustness_vs_noise", "optimisation_t_dash_history", "optimisation_t_dash_slices", "curves_best"} <= set(
        page.figures
    )
    # validation.kind: none selects on the test classes, and the page says so.
    assert page.selection_test and "hyperparameters were selected on the test classes" in page.text

    client, parent, trials = _runs(study_dir, "t_dash")
    assert len(trials) == 2
    best = max(r.data.metrics["test/recall_at_1"] for r in trials)
    rows = page.tables["leaderboard_table"]
    assert len(rows) == 1 and rows[0]["family"] == "ms" and rows[0]["noise"] == "none"
    assert rows[0]["best run"] == f"{best:.4f}"  # the value MLflow holds, at 4 decimals
    assert parent.data.metrics["best_test/recall_at_1"] == pytest.approx(best)
    (robust,) = page.tables["robustness_table"]
    assert robust["source"] == "search runs (selected on test)"
    # Searched parameters come from the parent run's recorded space; importances from optuna.db.
    assert {"ms_alpha", "train.optimizer.lr"} <= {r["parameter"] for r in page.tables["optimisation_t_dash_importance"]}
    assert "dashboard/index.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "dashboard")}


def test_honest_study_shows_its_final_stage(write_spec, run_cli, tmp_path):
    spec = honest_spec("t_dash_honest")
    proc = run_cli(str(write_spec(spec)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_dir = tmp_path / "runs" / spec["name"]
    page = read_page(study_dir / "dashboard" / "index.html")
    assert {"leaderboard", "robustness", "optimisation", "curves"} <= set(
        page.panels
    ) and "panel failed" not in page.text
    assert not page.selection_test
    # Two search trials are too few for a rank correlation (said, with its reason); how reliable the choice between
    # them is stands in the panel alone (the parent run's selection metrics).
    assert "validation" in page.panels and "fewer than 3 search trials have both val/recall_at_1" in page.text
    (reliable,) = page.tables["validation_reliability"]
    assert reliable["cell"] == spec["name"] and reliable["candidates"] == "2" and reliable["1/n"] == "0.50"
    assert "curves_final" in page.figures

    _, parent, trials = _runs(study_dir, spec["name"])
    search = [r for r in trials if r.data.tags["stage"] == "search"]
    final = [r for r in trials if r.data.tags["stage"] == "final"]
    assert len(search) == 2 and len(final) == 2
    top = max(r.data.metrics["val/recall_at_1"] for r in search)
    (row,) = page.tables["leaderboard_table"]
    assert row["best run"] == f"{top:.4f}"  # ranked on validation
    # The final stage retrained the best search trial (on a tie, the dashboard prefers the retrained one).
    (best,) = [r for r in search if r.data.tags["trial_id"] == final[0].data.tags["source_trial"]]
    assert best.data.metrics["val/recall_at_1"] == top and row["best trial"] == best.data.tags["trial_id"]
    values = np.array([r.data.metrics["test/recall_at_1"] for r in final])
    half = stats.t.ppf(0.975, df=1) * values.std(ddof=1) / math.sqrt(2)
    # Recall@1 is a share: its interval is cut to [0, 1] (2 seeds near 1 would otherwise pass 1).
    mean, low, high = values.mean(), max(0.0, values.mean() - half), min(1.0, values.mean() + half)
    (summary,) = page.tables["leaderboard_final"]
    assert summary["group"] == "all" and summary["source trial"] == best.data.tags["trial_id"]
    assert float(summary["test/recall_at_1 ci95 low"]) == pytest.approx(low, abs=5e-5)
    assert float(summary["test/recall_at_1 ci95 high"]) == pytest.approx(high, abs=5e-5)
    # The same numbers as the study's own summary on the parent run.
    assert parent.data.metrics["test/recall_at_1_mean"] == pytest.approx(mean)
    assert parent.data.metrics["test/recall_at_1_ci95_low"] == pytest.approx(low)
    # One seed per configuration: the best configuration is the best run, the one the final stage retrained.
    assert row["final test/recall_at_1 mean [95 % CI]"] == f"{mean:.4f} [{low:.4f}, {high:.4f}] (n=2)"
    assert row["final group"] == "all"
    (robust,) = page.tables["robustness_table"]
    assert (
        robust["source"] == "final stage (2 seeds)" and robust["test/recall_at_1 95 % CI"] == f"[{low:.4f}, {high:.4f}]"
    )
