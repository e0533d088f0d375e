"""End to end (issue 36): ``python -m study.run search_spaces/table_glyphs_quick.yaml``, cut by ``--set`` to what
the CI affords (2 trials per cell, the second one TPE's, 2 epochs, 2 folds, 8 batches per epoch: the shipped 4 × 4 × 4 takes ~15 min on
2 shared cores), read back from Optuna (one study per cell, its COMPLETE trials), MLflow (search runs per cell,
final runs per cell and seed, the report artifact) and the printed table; then ``--status`` per cell."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.e2e

QUICK = str(Path(__file__).resolve().parents[3] / "search_spaces" / "table_glyphs_quick.yaml")
CELLS = ["ms.p0", "ms.p0.3", "bspml.p0", "bspml.p0.3"]
FAST = [
    "search.num_trials=2",
    "search.sampler.n_startup_trials=1",  # 1 random start-up trial, then TPE
    "train.epochs=2",
    "validation.folds=2",
    "train.batches_per_epoch=8",
]


@pytest.mark.usefixtures("on_warm_head")
def test_the_quick_glyphs_table_end_to_end(tmp_path, run_cli):
    sets = [a for kv in [*FAST, f"storage={tmp_path / 'runs'}"] for a in ("--set", kv)]
    proc = run_cli(QUICK, *sets, "--no-dashboard", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    size, priced = out.splitlines()[0].split(", ≈ ", 1)
    assert size == (
        "Table table_glyphs_quick: 2 arms × 2 cells × 2 trials × 2 epochs = 8 search trials (2 folds), "
        "then 4 × 2 final seeds = 8 final runs; 2 at a time; every trial to the end (FIFO): 32 model-epochs"
    )  # 8 trials × 2 epochs × 1 model on all training classes (2 folds of half each) + 8 final runs × 2 epochs
    # priced from the bill measured before the run (study.search.calibration), per arm
    assert re.fullmatch(r"[\d.]+ h on 2 slots measured on cpu: ms [\d.]+ s, bspml [\d.]+ s per model-epoch .*", priced)
    assert "ETA ≈" in out  # the live table, once trials have finished
    root = tmp_path / "runs" / "table_glyphs_quick"
    storage = f"sqlite:///{root / 'optuna.db'}"
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
    assert names == sorted(f"table_glyphs_quick.{c}" for c in CELLS)
    for name in names:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials()
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], name
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("table_glyphs_quick")
    runs = client.search_runs([experiment.experiment_id])
    trials = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial" and r.info.status == "FINISHED"]
    search = [r for r in trials if r.data.tags["stage"] == "search"]
    final = [r for r in trials if r.data.tags["stage"] == "final"]
    assert len(search) == 8 and len(final) == 8
    per_cell = sorted((r.data.tags["family"], r.data.tags["noise_ratio"]) for r in search)
    assert per_cell == sorted([("ms", "0.0"), ("ms", "0.3"), ("bspml", "0.0"), ("bspml", "0.3")] * 2)
    seeds = sorted((r.data.tags["group"], r.data.tags["seed"]) for r in final)
    assert seeds == sorted((c, s) for c in CELLS for s in ("0", "1"))
    for r in final:  # the noise is drawn with the final seed: every arm's seed s trains on the same labels
        assert r.data.params["dataset.noise.seed"] == r.data.tags["seed"]
    # The printed report: the comparison table (Δ against ms) and the winners per cell.
    assert "reference family **ms**" in out and "| bspml | Δ " in out
    for cell in CELLS:
        assert f"\n{cell} " in out
    assert (root / "table.md").read_text() in out
    parent = next(r for r in runs if r.data.tags.get("dmlstudy.role") == "study")
    assert "table.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert parent.data.tags["reference"] == "ms"  # the dashboard compares with the table's reference
    status = run_cli(QUICK, *sets, "--status")
    assert status.returncode == 0, status.stderr
    for cell in CELLS:
        line = next(ln for ln in status.stdout.splitlines() if ln.startswith(cell + " "))
        assert " 2/2 " in line and line.count("2/2") == 2, line  # trials 2/2, final seeds 2/2
    # the lock is free: no "running"
    assert "  stage: done; hyperparameters selected on the validation classes\n" in status.stdout
    assert "  driver: ended FINISHED\n" in status.stdout
    # Between the two, each comparison's verdict as the report tagged the parent run (one per arm × cell).
    verdicts = [ln for ln in status.stdout.splitlines() if ln.startswith("  verdict: ")]
    assert len(verdicts) == 2 and all("bspml" in ln for ln in verdicts), verdicts
