"""The dashboard built from a synthetic MLflow store with known numbers: every panel, its numbers, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from mlflow import MlflowClient

from dashboards.build import build_after_study, build_dashboard, main
from tests.dashboards.synthetic import NAME, ms_recall
from tests.dashboards.page import read_page

REPO = Path(__file__).resolve().parents[2]


def test_every_panel_is_drawn_with_its_figures(built):
    syn, path, page = built
    assert page.panels == ["leaderboard", "robustness", "optimisation", "weights", "noise_theory", "curves"]
    assert page.skipped == [] and "panel failed" not in page.text
    expected = {
        "robustness_vs_noise", "robustness_topline_ratio", f"optimisation_{NAME}_history",
        f"optimisation_{NAME}_importance", f"optimisation_{NAME}_slices", "weights_maw_sdaw", "weights_quantiles",
        "weights_class_weights", "weights_histogram", "weights_noise_auroc", "noise_theory_q_rates", "noise_theory_vs_noise", "curves_best",
    }
    assert set(page.figures) == expected
    for name, png in page.figures.items():
        assert png.startswith(b"\x89PNG") and len(png) > 5000, name
        # The PNG files beside the page are the embedded ones.
        assert (path.parent / "figures" / f"{name}.png").read_bytes() == png
    assert not page.running


def test_leaderboard_matches_mlflow(built):
    syn, _, page = built
    client = MlflowClient(syn.uri)
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id], "tags.`dmlstudy.role` = 'trial'")
    finished = [r for r in runs if r.info.status == "FINISHED"]
    best = max(finished, key=lambda r: r.data.metrics["recall_at_1"])
    rows = page.tables["leaderboard_table"]
    assert max(float(r["best run"]) for r in rows) == best.data.metrics["recall_at_1"]
    assert f"Best run overall: trial {best.info.run_name}" in page.text
    # The failed run (0.99) never reaches the board.
    assert all(float(r["best run"]) < 0.99 for r in rows)
    # ms at p = 0.2: configuration alpha=2 wins; mean ± std over its two seeds (sample std).
    row = next(r for r in rows if r["family"] == "ms" and r["noise"] == "uniform 0.2" and r["subset"] == "all")
    values = [ms_recall(0.2, 2.0, s) for s in (0, 1)]
    assert row["recall_at_1 mean ± std"] == f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"
    assert row["runs"] == "2" and row["seeds"] == "0, 1" and "ms_alpha=2" in row["params of the best configuration"]
    assert {(r["family"], r["noise"], r["subset"]) for r in rows} >= {
        ("ms", "none", "all"), ("ms", "uniform 0.4", "clean_only"), ("bspml", "per_class 0.2", "all"),
        ("triplet", "uniform 0.1", "all"),
    }


def test_robustness_table_and_topline_ratio(built):
    _, _, page = built
    rows = {(r["series"], r["noise ratio"]): r for r in page.tables["robustness_table"]}
    noisy = np.mean([ms_recall(0.4, 2.0, s) for s in (0, 1)])
    top = np.mean([ms_recall(0.4, 2.0, s, "clean_only") for s in (0, 1)])
    row = rows[("ms / uniform", "0.4")]
    assert row["recall_at_1"].startswith(f"{noisy:.4f} ± ")
    assert row["nmi"].startswith(f"{noisy - 0.1:.4f}")
    assert float(row["recall_at_1 / topline"]) == pytest.approx(noisy / top, abs=1e-4)
    assert float(row["nmi / topline"]) == pytest.approx((noisy - 0.1) / (top - 0.1), abs=1e-4)
    # The clean point belongs to ms's uniform curve only, not to the per_class families.
    assert ("ms / uniform", "0") in rows and ("ms / per_class", "0") not in rows


def test_importances_come_from_the_optuna_storage(built):
    syn, _, page = built
    table = {r["parameter"]: float(r["importance"]) for r in page.tables[f"optimisation_{NAME}_importance"]}
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{syn.study_dir / 'optuna.db'}")
    # The objective depends on ms_alpha alone.
    assert table["ms_alpha"] > 0.8 > table["train.optimizer.lr"]
    assert set(table) == set(study.best_trial.params)


def test_weight_heatmap_cells(built):
    _, _, page = built
    cells = {(r["lambda"], r["mu"]): r for r in page.tables["weights_maw_sdaw"]}
    assert set(cells) == {(lam, mu) for lam in ("1", "3") for mu in ("0", "1", "5")}
    assert float(cells[("1", "5")]["maw"]) == pytest.approx(0.6)
    assert float(cells[("1", "5")]["sdaw"]) == pytest.approx(0.2 / 6, rel=1e-3)
    # SPMS joins the μ = 0 cell (BSPML with μ = 0): mean of bspml's 0.2 and spms's 0.3.
    assert cells[("3", "0")]["runs"] == "2" and float(cells[("3", "0")]["sdaw"]) == pytest.approx(0.25)


def test_weight_tables_are_read_from_the_parquet_artifacts(built):
    from dashboards.load import load

    syn, _, _ = built
    data = load(syn.uri, [NAME], syn.study_dir / "scratch")
    run = data.runs.filter(data.runs["trial_id"] == "bspml_l3.0_m0.0")["run_id"][0]
    assert set(data.class_weights["run_id"]) == {run} == set(data.sample_weights["run_id"])
    at = data.class_weights.filter((data.class_weights["epoch"] == 2) & (data.class_weights["class"] == "3"))
    assert at["avg_weight"].to_list() == [pytest.approx(0.5 + 0.3 - 0.1)]
    assert data.sample_weights["noisy"].sum() == 30 and data.sample_weights["weight"].mean() == pytest.approx(0.74)


def test_noise_theory_table(built):
    _, _, page = built
    rows = {(r["rule"], r["noise ratio"]): r for r in page.tables["noise_theory_table"]}
    assert set(rows) == {(f"triplet / {m}", p) for m in ("random_semihard", "fixed_semihard") for p in ("0.1", "0.3")}
    row = rows[("triplet / fixed_semihard", "0.3")]
    assert float(row["q_pos"]) == pytest.approx(0.3 * 1.7) and float(row["q_neg_obs"]) == pytest.approx(0.075 - 0.01)
    assert float(row["eta_hat"]) == 4 and float(row["p_bound_triplet"]) == pytest.approx(1 - np.sqrt(0.75), abs=1e-4)
    assert float(row["miner_corrupt_neg_share"]) == pytest.approx(0.3)


def test_page_is_logged_to_the_parent_run(built):
    syn, _, _ = built
    client = MlflowClient(syn.uri)
    names = {a.path for a in client.list_artifacts(syn.parent_run_id, "dashboard")}
    assert "dashboard/index.html" in names and "dashboard/figures" in names


def test_running_study_draws_what_exists_and_says_so(running_store, tmp_path):
    uri, _ = running_store
    page = read_page(build_dashboard(["live"], uri, tmp_path / "live_out"))
    assert page.running and "still running: 2 trials logged of 8 planned, 1 running now" in page.text
    assert "leaderboard" in page.panels and "weights" in page.skipped and "noise_theory" in page.skipped


def test_only_the_panels_with_data_are_drawn(running_store, tmp_path):
    uri, _ = running_store
    page = read_page(build_dashboard(["live"], uri, tmp_path / "o"))
    assert set(page.panels) == {"leaderboard", "robustness", "optimisation", "curves"}
    assert page.tables["leaderboard_table"][0]["best run"] == "0.6"  # the running trial's latest value counts


@pytest.mark.parametrize(
    "args, message",
    [
        (["--experiment", "nope"], "unknown experiment 'nope'"),
        (["--experiment", NAME, "--tracking-uri", "sqlite:////nonexistent/mlflow.db"], "no MLflow store at"),
    ],
)
def test_bad_input_is_one_line_exit_2(built, tmp_path, capsys, args, message):
    if "--tracking-uri" not in args:
        args = [*args, "--tracking-uri", built[0].uri]
    out = tmp_path / "never"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0
    assert not out.exists()


def test_empty_store_is_exit_2(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    client = MlflowClient(uri)
    client.create_experiment("hollow", artifact_location=(tmp_path / "a").as_uri())
    assert main(["--experiment", "hollow", "--tracking-uri", uri]) == 2
    assert "has no trial runs" in capsys.readouterr().err


def test_cli_prints_the_page_path(built, tmp_path):
    synthetic = built[0]
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "dashboards.build", "--experiment", NAME, "--tracking-uri", synthetic.uri, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str((out / "index.html").resolve())


def test_build_after_study_only_warns(tmp_path):
    from study.spec import parse_spec

    spec = parse_spec({"name": "ghost", "family": "ms", "storage": str(tmp_path)})
    with pytest.warns(UserWarning, match="dashboard not built"):
        assert build_after_study(spec) is None


def test_dashboards_never_import_trainables():
    code = "import sys, dashboards.build, dashboards.panels.weights; print(any(m.startswith('trainables') for m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr
