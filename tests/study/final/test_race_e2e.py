"""The finalist race end to end (``final.race``, issue 59 part 3): a SIGTERM while the race runs (a preemption)
stops the driver with exit 3, ``--status`` says the study is racing, and ``--resume`` finishes it with every search
trial, race run and final run once; the final stage retrains the finalist with the best mean over its search run and
its race run, which the parent run names as its best trial and whose standings it keeps (``race.csv``)."""

from __future__ import annotations

import csv
import io
import signal
from pathlib import Path

import pytest

from harness.driver import count_in_mlflow, mlflow_children, optuna_trials
from harness.kill_resume import EPOCHS, NUM_TRIALS, kill_spec, kill_then_resume
from study.runtime.stopping import EXIT_STOPPED
from trainables.schema import record as R

OBJECTIVE = "val/recall_at_1"


def _race_epochs(study_dir) -> int:
    """Epochs the race's runs have logged so far."""
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM metrics m JOIN tags t ON m.run_uuid = t.run_uuid "
        "WHERE m.key = ? AND t.key = ? AND t.value = ?",
        (OBJECTIVE, R.STAGE, R.STAGE_RACE),
    )


@pytest.mark.e2e
def test_sigterm_in_the_race_then_resume_retrains_the_race_winner(tmp_path):
    spec = kill_spec(60, name="t_race")
    spec["validation"] = {"kind": "kfold", "folds": 2}  # digits' 5 training classes: 2 class-disjoint folds
    spec["train"]["classes_per_batch"] = 2
    spec["final"] = {"seeds": 1, "race": {"finalists": 2, "seeds": 1}}
    out = kill_then_resume(tmp_path, spec, lambda d: _race_epochs(d) >= 1, stop_signal=signal.SIGTERM)
    first = out["first_output"]
    assert not out["finished_before_kill"] and out["first_code"] == EXIT_STOPPED, first[-3000:]
    assert "SIGTERM received" in first and "stopped on SIGTERM in its race stage" in first, first[-3000:]
    assert "stage: race (racing the finalists on more seeds: 2 runs planned)" in out["status"].stdout, out["status"]
    assert "race: 0 of 2 finalist runs finished" in out["status"].stdout or "race: 1 of 2" in out["status"].stdout
    resumed = out["resumed"]
    assert resumed.returncode == 0, first[-2000:] + resumed.stdout[-3000:] + resumed.stderr[-3000:]

    study_dir, name = out["study_dir"], spec["name"]
    assert sorted(t.state.name for t in optuna_trials(study_dir, name)) == ["COMPLETE"] * NUM_TRIALS
    client, parents, children = mlflow_children(study_dir, name)
    by_stage: dict[str, list] = {}
    for run in children:
        by_stage.setdefault(run.data.tags[R.STAGE], []).append(run)
        assert run.info.status == "FINISHED", run.info
        key = "test/recall_at_1" if run.data.tags[R.STAGE] == R.STAGE_FINAL else OBJECTIVE
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert steps == list(range(1, EPOCHS + 1)), (run.data.tags[R.STAGE], run.info.run_name, steps)
    assert {k: len(v) for k, v in by_stage.items()} == {R.STAGE_SEARCH: 3, R.STAGE_RACE: 2, R.STAGE_FINAL: 1}
    assert {r.data.tags[R.RAY_EXPERIMENT] for r in by_stage[R.STAGE_RACE]} == {R.RACE_EXPERIMENT}

    # The race: the search's 2 best trials, each retrained on its next seed; the winner has the best mean.
    search = {r.data.tags[R.TRIAL_ID]: r.data.metrics[OBJECTIVE] for r in by_stage[R.STAGE_SEARCH]}
    number = {r.data.tags[R.TRIAL_ID]: int(r.data.tags[R.OPTUNA_TRIAL_NUMBER]) for r in by_stage[R.STAGE_SEARCH]}
    finalists = sorted(search, key=lambda t: (-search[t], number[t]))[:2]  # ties: the earlier trial
    race = {r.data.tags[R.SOURCE_TRIAL]: r.data.metrics[OBJECTIVE] for r in by_stage[R.STAGE_RACE]}
    assert sorted(race) == sorted(finalists)
    means = {t: (search[t] + race[t]) / 2 for t in finalists}
    winner = max(finalists, key=lambda t: (means[t], -number[t]))
    (final,) = by_stage[R.STAGE_FINAL]
    assert final.data.tags[R.SOURCE_TRIAL] == winner
    (parent,) = parents
    assert parent.info.status == "FINISHED" and parent.data.tags[R.BEST_TRIAL_ID] == winner
    path = client.download_artifacts(parent.info.run_id, R.RACE_FILE, str(tmp_path))
    rows = list(csv.DictReader(io.StringIO(Path(path).read_text())))
    assert {r["source_trial"]: r["winner"] for r in rows} == {t: str(t == winner).lower() for t in finalists}
    assert float(next(r for r in rows if r["winner"] == "true")["race_mean"]) == pytest.approx(means[winner])
    assert "race: each group's finalists retrained on 1 more seeds" in resumed.stdout, resumed.stdout[-3000:]
