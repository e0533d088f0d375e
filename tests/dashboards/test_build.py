"""The dashboard built from a synthetic MLflow store with known numbers: every panel, its numbers, the CLI."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from mlflow import MlflowClient
from scipy import stats

from dashboards.build import build_after_study, build_dashboard, main
from tests.dashboards.page import read_page
from tests.dashboards.synthetic import FINAL_OFFSETS, NAME, final_group, final_recall, ms_recall, ms_test

REPO = Path(__file__).resolve().parents[2]


def test_every_panel_is_drawn_with_its_figures(built):
    syn, path, page = built
    assert page.panels == [
        "leaderboard",
        "validation",
        "robustness",
        "optimisation",
        "expected_best",
        "weights",
        "detectors",
        "noise_theory",
        "curves",
    ]
    # The synthetic store has no paired two-modality runs (flows2d) and no CSV categories: those panels say why they
    # are not drawn.
    assert page.skipped == ["categories", "paired"] and "panel failed" not in page.text
    expected = {
        "validation_scatter_recall_at_1",
        "validation_scatter_nmi",
        "robustness_vs_noise",
        "robustness_topline_ratio",
        f"optimisation_{NAME}_history",
        f"optimisation_{NAME}_importance",
        f"optimisation_{NAME}_slices",
        f"expected_best_{NAME}",
        "weights_maw_sdaw",
        "weights_quantiles",
        "weights_class_weights",
        "weights_histogram",
        "weights_noise_auroc",
        "detectors_auroc",
        "noise_theory_q_rates",
        "noise_theory_vs_noise",
        "curves_best",
        "curves_final",
    }
    assert set(page.figures) == expected
    for name, png in page.figures.items():
        assert png.startswith(b"\x89PNG") and len(png) > 5000, name
        # The PNG files beside the page are the embedded ones.
        assert (path.parent / "figures" / f"{name}.png").read_bytes() == png
    assert not page.running
    # A k-fold study selected on validation classes: no warning.
    assert not page.selection_test and "selected on the test classes" not in page.text


def _runs(syn):
    client = MlflowClient(syn.uri)
    return client.search_runs([client.get_experiment_by_name(NAME).experiment_id], "tags.`dmlstudy.role` = 'trial'")


def _t95(values):
    """Student's t 95 % interval of the mean, computed here independently of the dashboards."""
    x = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, df=len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean(), x.std(ddof=1), x.mean() - half, x.mean() + half


def test_leaderboard_ranks_search_runs_by_validation(built):
    syn, _, page = built
    runs = _runs(syn)
    search = [r for r in runs if r.info.status == "FINISHED" and r.data.tags["stage"] == "search"]
    best = max(search, key=lambda r: r.data.metrics["val/recall_at_1"])
    rows = page.tables["leaderboard_table"]
    assert max(float(r["best run"]) for r in rows) == round(best.data.metrics["val/recall_at_1"], 4)
    assert f"Best run overall: trial {best.info.run_name}" in page.text
    # The failed run (0.99) never reaches the board, and neither does a final-stage run.
    assert all(float(r["best run"]) < 0.99 for r in rows)
    assert not any(r["best trial"].startswith("final_") for r in rows)
    # ms at p = 0.2: configuration alpha=2 wins; mean ± std of val/recall_at_1 over its two seeds (sample std).
    row = next(r for r in rows if r["family"] == "ms" and r["noise"] == "uniform 0.2" and r["subset"] == "all")
    values = [ms_recall(0.2, 2.0, s) for s in (0, 1)]
    assert row["val/recall_at_1 mean ± std"] == f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"
    assert row["runs"] == "2" and row["seeds"] == "0, 1" and "ms_alpha=2" in row["params of the best configuration"]
    assert {(r["family"], r["noise"], r["subset"]) for r in rows} >= {
        ("ms", "none", "all"),
        ("ms", "uniform 0.4", "clean_only"),
        ("bspml", "per_class 0.2", "all"),
        ("triplet", "uniform 0.1", "all"),
    }


def test_final_stage_beside_its_configuration_with_t_intervals(built):
    syn, _, page = built
    runs = _runs(syn)
    rows = page.tables["leaderboard_table"]
    finals = {(r["group"]): r for r in page.tables["leaderboard_final"]}
    assert set(finals) == {
        final_group(p, s)
        for p, s in ((0.0, "all"), (0.2, "all"), (0.4, "all"), (0.2, "clean_only"), (0.4, "clean_only"))
    }
    for p in (0.0, 0.2, 0.4):
        # The final runs of the group, read from MLflow (the FAILED one is left out).
        values = [
            r.data.metrics["test/recall_at_1"]
            for r in runs
            if r.data.tags.get("group") == final_group(p) and r.info.status == "FINISHED"
        ]
        assert sorted(values) == sorted(final_recall(p, s) for s in range(len(FINAL_OFFSETS)))
        mean, std, low, high = _t95(values)
        final = finals[final_group(p)]
        assert final["source trial"] == f"ms_p{p}_a2.0_s1" and final["seeds"] == "0, 1, 2"
        assert final["test/recall_at_1 mean ± std"] == f"{mean:.4f} ± {std:.4f}"
        assert float(final["test/recall_at_1 ci95 low"]) == pytest.approx(low, abs=5e-5)
        assert float(final["test/recall_at_1 ci95 high"]) == pytest.approx(high, abs=5e-5)
        nmi = _t95([v - 0.1 for v in values])
        assert float(final["test/nmi ci95 low"]) == pytest.approx(nmi[2], abs=5e-5)
        assert final["val/recall_at_1 of the source trial"] == f"{ms_recall(p, 2.0, 1):.4f}"
        assert float(final["test/recall_at_1 of the source trial (fold ensemble)"]) == pytest.approx(
            ms_test(p, 2.0, 1), abs=5e-5
        )
        # ... and in the leaderboard, beside the configuration the final stage retrained.
        noise = "none" if p == 0 else f"uniform {p:g}"
        row = next(r for r in rows if r["family"] == "ms" and r["noise"] == noise and r["subset"] == "all")
        assert row["final test/recall_at_1 mean [95 % CI]"] == f"{mean:.4f} [{low:.4f}, {high:.4f}] (n=3)"
        assert row["final group"] == final_group(p)
    # Groups without a final stage say so.
    assert next(r for r in rows if r["family"] == "bspml")["final test/recall_at_1 mean [95 % CI]"] == "—"


def test_robustness_uses_the_final_stage_with_its_interval(built):
    _, _, page = built
    rows = {(r["series"], r["noise ratio"]): r for r in page.tables["robustness_table"]}
    noisy = [final_recall(0.4, s) for s in range(3)]
    top = [final_recall(0.4, s, "clean_only") for s in range(3)]
    mean, std, low, high = _t95(noisy)
    row = rows[("ms / uniform", "0.4")]
    assert row["source"] == "final stage (3 seeds)" and row["seeds"] == "0, 1, 2"
    assert row["test/recall_at_1"] == f"{mean:.4f} ± {std:.4f}"
    assert row["test/recall_at_1 95 % CI"] == f"[{low:.4f}, {high:.4f}]"
    assert row["test/nmi"].startswith(f"{mean - 0.1:.4f} ± ")
    assert float(row["test/recall_at_1 / topline"]) == pytest.approx(mean / np.mean(top), abs=1e-4)
    assert float(row["test/nmi / topline"]) == pytest.approx((mean - 0.1) / (np.mean(top) - 0.1), abs=1e-4)
    # The clean point belongs to ms's uniform curve only, not to the per_class families.
    assert ("ms / uniform", "0") in rows and ("ms / per_class", "0") not in rows
    # Without a final stage: the test metrics (fold ensemble) of the best configuration's search runs.
    triplet = rows[("triplet / uniform", "0.3")]
    assert triplet["source"] == "search runs (fold ensemble)" and float(triplet["test/recall_at_1"]) == pytest.approx(
        0.41
    )


def test_validation_vs_test_scatter_and_its_spearman(built):
    syn, _, page = built
    search = [r for r in _runs(syn) if r.data.tags["stage"] == "search" and r.info.status != "FAILED"]
    table = {r["metric"]: r for r in page.tables["validation_spearman"]}
    assert set(table) == {"recall_at_1", "nmi"}  # map_at_r: no search run has val/map_at_r
    for base in ("recall_at_1", "nmi"):
        both = [r.data.metrics for r in search if f"val/{base}" in r.data.metrics and f"test/{base}" in r.data.metrics]
        rho = stats.spearmanr([m[f"val/{base}"] for m in both], [m[f"test/{base}"] for m in both]).statistic
        assert table[base]["search trials"] == str(len(both)) and len(both) >= 3
        assert float(table[base]["Spearman rho"]) == pytest.approx(rho, abs=5e-5)
        caption = page.captions[f"validation_scatter_{base}"]
        assert f"over {len(both)} search trials: Spearman ρ = {rho:.4f}" in caption
    assert len([r for r in search if "val/recall_at_1" in r.data.metrics]) == 27


def test_importances_come_from_the_optuna_storage(built):
    syn, _, page = built
    table = {r["parameter"]: float(r["importance"]) for r in page.tables[f"optimisation_{NAME}_importance"]}
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{syn.study_dir / 'optuna.db'}")
    # The objective depends on ms_alpha alone.
    assert table["ms_alpha"] > 0.8 > table["train.optimizer.lr"]
    assert set(table) == set(study.best_trial.params)


def test_expected_best_vs_trials_reads_the_cells_optuna_trials(built):
    """The synthetic study's one cell: 12 COMPLETE Optuna trials (no intermediate values: every epoch). E[best of k]
    recomputed here from the stored values as the mean best of k draws with replacement, Σ v_(i) ((i/n)^k −
    ((i−1)/n)^k); no selection metrics were logged, so the rise is held against the bootstrap sd."""
    syn, _, page = built
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{syn.study_dir / 'optuna.db'}")
    values = np.sort([t.value for t in study.trials])
    n = len(values)
    i = np.arange(1, n + 1)

    def best_of(k: int) -> float:
        return float(np.sum(values * ((i / n) ** k - ((i - 1) / n) ** k)))

    (row,) = page.tables["expected_best_table"]
    assert row["cell"] == NAME and row["trials"] == f"{n} of {n} ended trials trained every epoch"
    assert float(row["E[best of 1]"]) == pytest.approx(values.mean(), abs=5e-5)
    assert row["E[best of n/2]"] == f"{best_of(n // 2):.4f} (k = {n // 2})"
    assert row["E[best of n] [band]"].startswith(f"{best_of(n):.4f} [")
    assert float(row["rise"]) == pytest.approx(best_of(n) - best_of(n // 2), abs=5e-5)
    climbing = float(row["rise"]) > float(row["held against"])
    assert row["answer"] == (f"still climbing at n = {n}" if climbing else f"flat at n = {n}")
    assert f"budget: {NAME}: {row['answer']}: the last {n - n // 2} trials improved" in page.text
    assert "no tie set of two or more" in page.text and "Expected best validation vs trials" in page.text


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
    # Its test Recall@1 (search runs only: a k-fold trial's fold ensemble).
    assert float(row["test/recall_at_1"]) == pytest.approx(0.41)


def test_detector_panel_compares_the_detectors_with_the_familys_own_score(built):
    from dashboards.load import load
    from dashboards.panels.detectors import detector_history

    syn, _, page = built
    rows = {r["family / noise"]: r for r in page.tables["detectors_table"]}
    assert set(rows) == {"bspml per_class 0.2", "triplet uniform 0.1", "triplet uniform 0.3"}
    bspml = rows["bspml per_class 0.2"]
    assert bspml["runs"] == "6" and float(bspml["xi AUROC"]) == 0.9 and float(bspml["knn AP"]) == 0.5
    assert float(bspml["own AUROC"]) == 0.8
    triplet = rows["triplet uniform 0.3"]
    assert float(triplet["centroid AUROC"]) == pytest.approx(0.55) and triplet["own AUROC"] == "—"
    # Per epoch: the synthetic curves reach the last value as 0.7, 0.85, 1 of it.
    history = detector_history(load(syn.uri, [NAME], syn.study_dir / "scratch_detectors"))
    xi = history.filter((history["setting"] == "bspml per_class 0.2") & (history["detector"] == "xi"))
    assert xi["epoch"].to_list() == [1, 2, 3] and xi["runs"].to_list() == [6, 6, 6]
    assert xi["auroc"].to_list() == pytest.approx([0.9 * 0.7, 0.9 * 0.85, 0.9])
    assert "detectors_auroc" in page.captions


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
    assert "detectors" in page.skipped


def test_only_the_panels_with_data_are_drawn(running_store, tmp_path):
    uri, _ = running_store
    page = read_page(build_dashboard(["live"], uri, tmp_path / "o"))
    assert set(page.panels) == {"leaderboard", "robustness", "optimisation", "curves"}
    assert page.tables["leaderboard_table"][0]["best run"] == "0.6000"  # the running trial's latest value counts
    assert "test/recall_at_1 mean ± std" in page.tables["leaderboard_table"][0]


def test_a_study_selected_on_test_says_so_and_has_no_scatter(running_store, tmp_path):
    uri, _ = running_store
    path = build_dashboard(["live"], uri, tmp_path / "t")
    page = read_page(path)
    assert page.selection_test and "hyperparameters were selected on the test classes" in page.text
    assert 'data-selection="test"' in path.read_text()
    # validation.kind: none logs no val/ metrics: the scatter is skipped with its reason.
    assert "validation" in page.skipped
    assert re.search(r"fewer than 3 search trials have both val/recall_at_1 and test/recall_at_1 \(0\)", page.text)
    # Its robustness numbers are the runs' own test metrics, labelled as selected on test.
    (row,) = page.tables["robustness_table"]
    assert (
        row["source"] == "search runs (selected on test)"
        and row["test/recall_at_1"] == f"{0.55:.4f} ± {np.std([0.5, 0.6], ddof=1):.4f}"
    )


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
        [
            sys.executable,
            "-m",
            "dashboards.build",
            "--experiment",
            NAME,
            "--tracking-uri",
            synthetic.uri,
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str((out / "index.html").resolve())


def test_build_after_study_only_warns(tmp_path):
    from study.intake.spec_reader import parse_spec

    spec = parse_spec({"name": "ghost", "family": "ms", "storage": str(tmp_path)})
    with pytest.warns(UserWarning, match="dashboard not built"):
        assert build_after_study(spec) is None


def test_dashboards_import_nothing_of_trainables_but_the_schema():
    """The dashboards read the record (``trainables.schema``, torch-free), never the training side."""
    code = (
        "import sys, dashboards.build, dashboards.panels.weights; "
        "print([m for m in sys.modules if m.startswith('trainables.') and not m.startswith('trainables.schema')])"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
