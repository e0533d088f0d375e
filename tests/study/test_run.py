"""End to end: ``python -m study.run`` on digits, read back from MLflow, Optuna and the dashboard it builds."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from tests.dashboards.page import read_page

pytestmark = pytest.mark.e2e

#: The libraries' start-up lines (Ray, MLflow, Optuna) that belong in the study's log, not on the terminal.
CHATTER = ("Token authentication is enabled", "Creating initial MLflow database tables", "A new study created in RDB")


def _runs(tmp_path, name):
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / name / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("dmlstudy.role") == "study"]
    children = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
    return client, parents, children


def test_study_end_to_end_logs_every_trial_and_epoch(spec_dict, write_spec, run_cli, tmp_path, capsys):
    spec_dict["search"]["max_concurrent"] = 2
    path = write_spec(spec_dict)
    proc = run_cli(str(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Best trial" in proc.stdout and "mlflow ui --backend-store-uri sqlite:///" in proc.stdout
    assert "optuna-dashboard sqlite:///" in proc.stdout
    # A quiet console: our warning and table on the terminal, the libraries' chatter in the study's log.
    study_log = tmp_path / "runs" / "t_study" / "study.log"
    for line in CHATTER:
        assert line not in proc.stderr and line not in proc.stdout, line
    # MLflow speaks only when it migrates a new sqlite store; the tests' stores are copies of a migrated one
    # ($DMLSTUDY_CACHE_DIR, study.tracking.store), so the log holds Ray's and Optuna's lines (MLflow's: test_console).
    assert CHATTER[0] in study_log.read_text() and CHATTER[2] in study_log.read_text()
    assert "Configuration for experiment" not in proc.stdout and "View detailed results here" not in proc.stdout
    assert proc.stderr.startswith("warning: validation.kind is none") and "== trials 2/2 done" in proc.stdout
    _check_dashboard(tmp_path / "runs" / "t_study", proc.stdout)
    # `dmlstudy status` names the study by its directory, as `dashboard` and `compare` do.
    from study.commands import cli

    capsys.readouterr()
    assert cli.main(["status", str(tmp_path / "runs" / "t_study")]) == 0
    assert "trials: 2 done (2 complete, 0 pruned), 0 running, 0 failed, of 2" in capsys.readouterr().out

    client, parents, children = _runs(tmp_path, "t_study")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2
    optuna_study = optuna.load_study(study_name="t_study", storage=f"sqlite:///{tmp_path / 'runs/t_study/optuna.db'}")
    optuna_trials = [t for t in optuna_study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(optuna_trials) == 2
    sampled_alphas = sorted(t.params["ms_alpha"] for t in optuna_trials)
    assert sorted(float(r.data.params["params.ms_alpha"]) for r in children) == pytest.approx(sampled_alphas)
    assert sorted(t.value for t in optuna_trials) == pytest.approx(
        sorted(r.data.metrics["test/recall_at_1"] for r in children)
    )
    for run in children:
        assert run.info.status == "FINISHED"
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert tags["family"] == "ms" and tags["dataset"] == "digits" and tags["noise_ratio"] == "0.0"
        assert run.info.run_name == f"trial {tags['optuna_trial_number']}"  # readable, not Ray's trial id
        params = run.data.params
        assert params["params.ms_beta"] == "50.0"  # the family default is logged too
        assert params["train.epochs"] == "2" and params["dataset.name"] == "digits"
        assert 1e-4 <= float(params["train.optimizer.lr"]) <= 1e-2
        for metric in ("test/recall_at_1", "test/recall_at_8", "test/nmi", "train/loss/ms", "epoch_time_s"):
            history = client.get_metric_history(run.info.run_id, metric)
            assert sorted(m.step for m in history) == [1, 2], metric
        assert all(0 <= m.value <= 1 for m in client.get_metric_history(run.info.run_id, "test/recall_at_1"))
    assert parents[0].data.metrics["best_test/recall_at_1"] == pytest.approx(max(t.value for t in optuna_trials))

    # Running it again never silently starts a second copy.
    again = run_cli(str(path), timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr
    # Resuming a finished study runs nothing new and duplicates nothing.
    resumed = run_cli(str(path), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Token authentication" not in resumed.stderr and study_log.read_text().count("Token authentication") == 2
    _, parents, children = _runs(tmp_path, "t_study")
    assert len(parents) == 1 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in [*parents, *children])
    note = parents[0].data.tags["mlflow.note.content"]  # the parent's description links its children
    for run in children:
        assert f"[{run.info.run_name}](#/experiments/{run.info.experiment_id}/runs/{run.info.run_id})" in note
    changed = run_cli(str(path), "--resume", "--set", "train.epochs=3", timeout=120)
    assert changed.returncode == 2 and "train.epochs" in changed.stderr


def _check_dashboard(study_dir: Path, stdout: str) -> None:
    """The page the study built at its end, from MLflow: the panels with data drawn, the others skipped with their
    reasons, the page logged on the parent run, and (``validation.kind: none``) the warning that it selected on the
    test classes (tests/PROMISES.md P8, DB1)."""
    name = study_dir.name
    page_path = study_dir / "dashboard" / "index.html"
    assert f"open {page_path}" in stdout
    page = read_page(page_path)
    assert page.panels == ["leaderboard", "robustness", "optimisation", "expected_best", "curves"]
    assert (
        set(page.skipped) == {"validation", "categories", "weights", "detectors", "noise_theory", "paired"}
        and "panel failed" not in page.text
    )
    assert {"robustness_vs_noise", f"optimisation_{name}_history", f"optimisation_{name}_slices", "curves_best"} <= set(
        page.figures
    )
    assert page.selection_test and "hyperparameters were selected on the test classes" in page.text
    client, parents, trials = _runs(study_dir.parent.parent, name)
    best = max(r.data.metrics["test/recall_at_1"] for r in trials)
    rows = page.tables["leaderboard_table"]
    assert len(rows) == 1 and rows[0]["family"] == "ms" and rows[0]["noise"] == "none"
    assert rows[0]["best run"] == f"{best:.4f}"  # the value MLflow holds, at 4 decimals
    (robust,) = page.tables["robustness_table"]
    assert robust["source"] == "search runs (selected on test)"
    # Searched parameters come from the parent run's recorded space; importances from optuna.db.
    assert {"ms_alpha", "train.optimizer.lr"} <= {
        r["parameter"] for r in page.tables[f"optimisation_{name}_importance"]
    }
    assert "dashboard/index.html" in {a.path for a in client.list_artifacts(parents[0].info.run_id, "dashboard")}
