"""Honest selection: class-disjoint validation folds, validation-only search metrics, the final test stage.

The end-to-end tests run digits with 2 folds (5 training classes, P = 2) so they stay small; the embedded
default's specs run the same code with 4 folds.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from harness.driver import (
    final_runs_finished,
    honest_spec,
    mlflow_children,
    optuna_trials,
)
from harness.kill_resume import kill_then_resume
from study.final.stage import t_interval
from study.intake.spec_reader import parse_spec
from tests.dashboards.page import read_page
from trainables.data import load_dataset
from trainables.data.folds import check_validation, fold_splits, validation_groups
from trainables.loop import TrialRun
from trainables.schema import record as R
from trainables.schema.errors import DataError, SpecError
from trainables.schema.spec import ValidationSpec

DIGITS_TEST_CLASSES = {5, 6, 7, 8, 9}


# ------------------------------------------------------------------------------------------------ splits


@pytest.mark.parametrize("folds", [2, 4, 5])
def test_folds_partition_the_training_classes(folds):
    classes = np.arange(100, 140)
    groups = validation_groups(classes, ValidationSpec(kind="kfold", folds=folds, seed=3))
    assert len(groups) == folds
    assert sorted(np.concatenate(groups).tolist()) == classes.tolist()  # every class exactly once
    assert max(map(len, groups)) - min(map(len, groups)) <= 1
    assert [g.tolist() for g in groups] == [
        g.tolist() for g in validation_groups(classes[::-1], ValidationSpec(kind="kfold", folds=folds, seed=3))
    ]
    holdout = validation_groups(classes, ValidationSpec(kind="holdout", fraction=0.25))
    assert len(holdout) == 1 and len(holdout[0]) == 10


@pytest.mark.parametrize("labels", ["noisy", "clean"])
def test_fold_splits_never_see_test_classes_and_label_validation_as_asked(labels):
    spec = ValidationSpec(kind="kfold", folds=2, labels=labels)
    full = load_dataset(parse_spec(honest_spec()).dataset, 0)
    assert full.train.noisy_mask.any()
    for group in validation_groups(full.train.labels, spec):
        split = fold_splits(full, group, labels)
        seen = set(split.train.labels) | set(split.train.true_labels) | set(split.test.true_labels)
        assert not seen & DIGITS_TEST_CLASSES and split.gallery is None
        assert not set(split.train.labels) & set(group.tolist())  # class-disjoint: no validation class trains
        assert set(np.unique(split.train.labels)) | set(group.tolist()) == set(range(5))
        # The noise was injected before the split: the validation samples are those *observed* in the fold...
        observed = full.train.labels[np.isin(full.train.labels, group)]
        assert len(split.test) == observed.size
        if labels == "noisy":
            assert np.array_equal(split.test.labels, observed) and (split.test.labels != split.test.true_labels).any()
        else:  # ... and the oracle arm scores the same samples with their true labels.
            assert np.array_equal(split.test.labels, split.test.true_labels)


def test_too_few_classes_for_the_folds_are_one_line_data_errors():
    with pytest.raises(DataError, match=r"validation.folds=6 exceeds the 5 training classes of 'digits'"):
        check_validation(5, ValidationSpec(folds=6), 2, "digits")
    with pytest.raises(DataError, match=r"folds of 1 classes, fewer than train.classes_per_batch=5"):
        check_validation(5, ValidationSpec(folds=4), 5, "digits")
    with pytest.raises(DataError, match=r"holds out 1 classes"):
        check_validation(5, ValidationSpec(kind="holdout", fraction=0.2), 2, "digits")
    check_validation(32, ValidationSpec(folds=4), 8, "glyphs")  # 4 folds of 8 classes with P = 8 is fine


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"search": {"metric": "test/recall_at_1"}}, "is a test metric but validation.kind is 'kfold'"),
        ({"search": {"metric": "recall_at_1"}}, "did you mean 'val/recall_at_1'"),
        ({"validation": {"kind": "none"}, "search": {"metric": "val/recall_at_1"}}, "did you mean"),
        ({"validation": {"kind": "kfold", "folds": 1}}, "validation.folds"),
        ({"validation": {"kind": "holdout", "fraction": 1.5}}, "validation.fraction"),
        ({"validation": {"labels": "oracle"}}, "validation.labels"),
        ({"final": {"group_by": ["family"]}}, "final.group_by: 'family' is not a search.space entry"),
        ({"final": {"seeds": -1}}, "final.seeds"),
    ],
)
def test_malformed_selection_sections_are_spec_errors(over, needle):
    with pytest.raises(SpecError, match=needle.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_spec({**honest_spec(), **over})
    assert "\n" not in str(e.value)


def test_default_objective_follows_the_validation_kind():
    assert parse_spec({"name": "a", "family": "ms"}).search.metric == "val/recall_at_1"
    assert parse_spec({"name": "a", "family": "ms", "validation": {"kind": "none"}}).search.metric == "test/recall_at_1"


def test_t_interval_matches_hand_values():
    mean, std, low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} from a table
    assert (mean, std) == (2.0, 1.0) and low == pytest.approx(2 - half) and high == pytest.approx(2 + half)
    assert math.isnan(t_interval([0.5])[2])


# ---------------------------------------------------------------------------------------- the trial run


def test_kfold_trial_reports_validation_every_epoch_and_the_fold_ensemble_on_test_at_the_end(tmp_path):
    torch.set_num_threads(1)
    spec = parse_spec(honest_spec())
    run = TrialRun.build(spec)
    assert len(run.members) == 2
    first = run.run_epoch()
    assert not [k for k in first if k.startswith("test/")]  # the test classes are not touched mid-search
    folds = [first["val/fold0/recall_at_1"], first["val/fold1/recall_at_1"]]
    assert first["val/recall_at_1"] == pytest.approx(statistics.mean(folds))
    (tmp_path / "ckpt").mkdir()
    run.save(tmp_path / "ckpt")
    last = run.run_epoch()
    assert 0 <= last["test/recall_at_1"] <= 1 and {"test/map_at_r", "test/r_precision", "test/nmi"} <= set(last)
    restored = TrialRun.build(spec)
    restored.restore(tmp_path / "ckpt")
    assert restored.epoch == 1
    again = restored.run_epoch()
    assert again["val/recall_at_1"] == pytest.approx(last["val/recall_at_1"])
    assert again["test/recall_at_1"] == pytest.approx(last["test/recall_at_1"])


def test_final_trial_trains_on_all_training_classes_and_reports_test():
    spec = parse_spec(honest_spec())
    run = TrialRun.build(spec, final=True)
    assert len(run.members) == 1 and run.members[0].data.train.num_classes == 5
    assert run.members[0].data.test is run.full.test


# ------------------------------------------------------------------------------------------ end to end


def _check_honest_study(study_dir: Path, name: str, seeds: int) -> None:
    client, parents, children = mlflow_children(study_dir, name)
    search = [r for r in children if r.data.tags["stage"] == "search"]
    final = [r for r in children if r.data.tags["stage"] == "final"]
    (parent,) = parents
    assert parent.info.status == "FINISHED" and parent.data.tags["stage"] == "done"
    assert parent.data.tags["selection"] == "validation" and parent.data.tags["validation"] == "kfold"
    # The searcher saw validation values only: each Optuna value is its run's last val/recall_at_1.
    complete = [t for t in optuna_trials(study_dir, name) if t.state.name == "COMPLETE"]
    values = sorted(t.value for t in complete)
    assert values == pytest.approx(sorted(r.data.metrics["val/recall_at_1"] for r in search))
    # Each candidate keeps its search metric per validation class of each fold (what the class bootstrap resamples):
    # recomputed from them, its value is its Optuna value; its last two epochs' values end in it.
    for t in complete:
        folds = t.user_attrs[R.VAL_PER_CLASS]["folds"]
        per_fold = [sum(f["sums"]) / sum(f["counts"]) for f in folds]
        assert len(folds) == 2 and sum(per_fold) / len(folds) == pytest.approx(t.value, abs=1e-5)
        assert t.user_attrs[R.OPTUNA_LAST_TWO][1] == pytest.approx(t.value)
    chosen = parents[0].data.metrics
    assert chosen[R.selection_metric(name, "candidates")] == len(complete)
    assert 0.0 < chosen[R.selection_metric(name, "p_best")] <= 1.0
    for run in search:
        assert run.data.tags["val_labels"] == "noisy"
        val_steps = [m.step for m in client.get_metric_history(run.info.run_id, "val/recall_at_1")]
        test_steps = [m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1")]
        assert val_steps == [1, 2] and test_steps == [2]  # test: the fold ensemble, once, at the end
    # The final stage: the best configuration, retrained once per seed, tagged, with test metrics.
    # Ties (tiny digits trials can tie) go to the earliest trial (Optuna's number), as in study.final.stage.best_per_group.
    earliest_first = sorted(search, key=lambda r: int(r.data.tags["optuna_trial_number"]))
    best = max(earliest_first, key=lambda r: r.data.metrics["val/recall_at_1"])
    assert sorted(r.data.tags["seed"] for r in final) == [str(s) for s in range(seeds)]
    for run in final:
        assert run.info.status == "FINISHED" and run.data.tags["group"] == "all"
        assert run.data.tags["source_trial"] == best.data.tags["trial_id"]
        assert run.data.params["params.ms_alpha"] == best.data.params["params.ms_alpha"]
        assert not [k for k in run.data.metrics if k.startswith("val/")]
    finals = [r.data.metrics["test/recall_at_1"] for r in final]
    mean, std, low, high = t_interval(finals)
    m = parent.data.metrics
    assert m["test/recall_at_1_mean"] == pytest.approx(mean) and m["test/recall_at_1_std"] == pytest.approx(std)
    assert m["test/recall_at_1_ci95_low"] == pytest.approx(low) and m["test/recall_at_1_ci95_high"] == pytest.approx(
        high
    )
    assert m["fold_ensemble/test/recall_at_1"] == pytest.approx(best.data.metrics["test/recall_at_1"])
    table = client.download_artifacts(parent.info.run_id, "final_summary.csv", str(study_dir.parent))
    rows = list(csv.DictReader(io.StringIO(Path(table).read_text())))
    assert (
        len(rows) == 1
        and rows[0]["group"] == "all"
        and float(rows[0]["test/recall_at_1_mean"]) == pytest.approx(mean, abs=1e-5)
    )


@pytest.mark.e2e
def test_honest_study_selects_on_validation_and_resumes_inside_the_final_stage(tmp_path):
    """One study: kfold search, then the final stage, killed after its first final trial, then resumed; the resumed
    driver builds the dashboard, whose final-stage numbers are the parent run's (tests/PROMISES.md S15, C2, DB2)."""
    seeds = 3
    spec = honest_spec(final={"seeds": seeds}, search={**honest_spec()["search"], "max_concurrent": 1})
    out = kill_then_resume(tmp_path, spec, lambda study_dir: final_runs_finished(study_dir) >= 1)
    resumed, study_dir = out["resumed"], out["study_dir"]
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert not out["finished_before_kill"], "the study finished before the kill; nothing was resumed mid-final"
    assert "stage: final" in out["status"].stdout, out["status"].stdout
    assert f"selection: {spec['name']}: the winner is" in out["status"].stdout, out["status"].stdout
    assert "Final test stage" in resumed.stdout and "test/recall_at_1 =" in resumed.stdout
    _check_honest_study(study_dir, spec["name"], seeds)
    _, _, children = mlflow_children(study_dir, spec["name"])
    assert len([r for r in children if r.data.tags["stage"] == "final"]) == seeds  # no duplicates after resume
    _check_final_stage_page(study_dir, spec["name"], seeds)


def _check_final_stage_page(study_dir: Path, name: str, seeds: int) -> None:
    """The dashboard of an honest study shows the final stage's mean and 95 % interval (cut to [0, 1]) beside the
    selected configuration, the same numbers as the parent run's."""
    page = read_page(study_dir / "dashboard" / "index.html")
    assert {"leaderboard", "robustness", "optimisation", "curves"} <= set(
        page.panels
    ) and "panel failed" not in page.text
    assert not page.selection_test
    # Two search trials are too few for a rank correlation (said, with its reason); how reliable the choice between
    # them is stands in the panel alone (the parent run's selection metrics).
    assert "validation" in page.panels and "fewer than 3 search trials have both val/recall_at_1" in page.text
    (reliable,) = page.tables["validation_reliability"]
    assert reliable["cell"] == name and reliable["candidates"] == "2" and reliable["1/n"] == "0.50"
    assert "curves_final" in page.figures
    _, (parent,), trials = mlflow_children(study_dir, name)
    search = [r for r in trials if r.data.tags["stage"] == "search"]
    final = [r for r in trials if r.data.tags["stage"] == "final"]
    top = max(r.data.metrics["val/recall_at_1"] for r in search)
    (row,) = page.tables["leaderboard_table"]
    assert row["best run"] == f"{top:.4f}"  # ranked on validation
    # The final stage retrained the best search trial (on a tie, the dashboard prefers the retrained one).
    (best,) = [r for r in search if r.data.tags["trial_id"] == final[0].data.tags["source_trial"]]
    assert best.data.metrics["val/recall_at_1"] == top and row["best trial"] == best.data.tags["trial_id"]
    values = np.array([r.data.metrics["test/recall_at_1"] for r in final])
    half = stats.t.ppf(0.975, df=seeds - 1) * values.std(ddof=1) / math.sqrt(seeds)
    # Recall@1 is a share: its interval is cut to [0, 1] (seeds near 1 would otherwise pass 1).
    mean, low, high = values.mean(), max(0.0, values.mean() - half), min(1.0, values.mean() + half)
    (summary,) = page.tables["leaderboard_final"]
    assert summary["group"] == "all" and summary["source trial"] == best.data.tags["trial_id"]
    assert float(summary["test/recall_at_1 ci95 low"]) == pytest.approx(low, abs=5e-5)
    assert float(summary["test/recall_at_1 ci95 high"]) == pytest.approx(high, abs=5e-5)
    # The same numbers as the study's own summary on the parent run.
    assert parent.data.metrics["test/recall_at_1_mean"] == pytest.approx(mean)
    assert parent.data.metrics["test/recall_at_1_ci95_low"] == pytest.approx(low)
    # One seed per configuration: the best configuration is the best run, the one the final stage retrained.
    assert row["final test/recall_at_1 mean [95 % CI]"] == f"{mean:.4f} [{low:.4f}, {high:.4f}] (n={seeds})"
    assert row["final group"] == "all"
    (robust,) = page.tables["robustness_table"]
    assert robust["source"] == f"final stage ({seeds} seeds)"
    assert robust["test/recall_at_1 95 % CI"] == f"[{low:.4f}, {high:.4f}]"


@pytest.mark.parametrize("reseed", [False, True])
def test_final_points_retrain_each_group_best_with_every_seed(reseed, tmp_path):
    from types import SimpleNamespace

    from study.final.stage import best_per_group, final_points
    from study.intake.validation import resolve_trial

    raw = honest_spec(final={"seeds": 3, "group_by": ["family"], "reseed_noise": reseed})
    raw["search"]["space"]["family"] = {"type": "categorical", "choices": ["ms", "spms"]}
    spec = parse_spec(raw)
    results = [
        SimpleNamespace(
            config={"spec": {}, "family": f, "ms_alpha": a},
            metrics={"val/recall_at_1": v},
            error=None,
            path=str(tmp_path / f"trial_{i}"),
        )
        for i, (f, a, v) in enumerate([("ms", 1.0, 0.5), ("ms", 2.0, 0.7), ("spms", 1.5, 0.6), ("spms", 2.5, 0.6)])
    ]
    grid = type("Grid", (), {"__len__": lambda self: len(results), "__getitem__": lambda self, i: results[i]})()
    best = best_per_group(spec, grid, {})
    assert {k: v.config["ms_alpha"] for k, v in best.items()} == {
        "family=ms": 2.0,
        "family=spms": 1.5,
    }  # tie → smaller id
    points = final_points(spec, best)
    assert [(p["group"], p["params"]["seed"]) for p in points] == [
        (g, s) for g in ("family=ms", "family=spms") for s in range(3)
    ]
    for point in points:
        trial = resolve_trial(spec, point["params"])
        assert trial.seed == point["params"]["seed"] and trial.family == point["params"]["family"]
        assert trial.dataset.noise.seed == (point["params"]["seed"] if reseed else 0)
