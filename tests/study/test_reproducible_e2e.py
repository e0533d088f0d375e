"""A study run twice, the second time with half its epochs, at random, ending in a sleep, gives the same Optuna trials (params,
values, states) and the same final test metrics (``search.reproducible``, study/search/ordered_sampler.py): 2 trials at a
time, TPE past its start-up trials. The sleeps are seeded (:func:`~trainables.loop.trainable.epoch_delay`), so the
test knows which trials they delay and checks that the trials did end out of order. Also Optuna's conventions (metric names, each trial's Ray trial id and MLflow run
id) and the parent run's numerics record, read back from the stores."""

from __future__ import annotations

import os

import optuna
import pytest

from harness.driver import mlflow_children, optuna_trials, tiny_spec
from trainables.loop.trainable import DELAY_ENV, DELAY_SEED_ENV, epoch_delay
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

#: Each epoch of the second run ends with a sleep of this many seconds or none (seeded by DELAY_SEED).
DELAY_S = 4.0
#: With this seed, trials 0 and 1 (asked together, at the start) sleep 8 s and 0 s (checked below): trial 1 ends about
#: 8 s before trial 0. Without the sleeps the two end within a second or two of each other, in either order.
DELAY_SEED = 12


def _spec(name: str) -> dict:
    spec = tiny_spec(name, epochs=2, num_trials=8, max_concurrent=2)
    spec["train"]["batches_per_epoch"] = 3
    spec["search"]["sampler"] = {"type": "tpe", "seed": 4, "n_startup_trials": 2}  # trials 2-7: TPE's
    spec["final"] = {"seeds": 1}
    return spec


def _study(tmp_path, name: str) -> tuple[list[tuple], dict[str, float]]:
    study_dir = tmp_path / "runs" / name
    trials = [(t.number, t.state.name, t.params, t.value) for t in optuna_trials(study_dir, name)]
    _, parents, _ = mlflow_children(study_dir, name)
    final = {k: v for k, v in parents[0].data.metrics.items() if k.startswith("test/")}
    return trials, final


def test_random_delays_change_nothing(write_spec, run_cli, tmp_path, monkeypatch):
    assert run_cli(str(write_spec(_spec("t_calm"), "calm.yaml"))).returncode == 0
    # per epoch, inherited by the driver and its Ray workers: trials end out of order
    monkeypatch.setenv(DELAY_ENV, str(DELAY_S))
    monkeypatch.setenv(DELAY_SEED_ENV, str(DELAY_SEED))
    proc = run_cli(str(write_spec(_spec("t_jitter"), "jitter.yaml")))
    monkeypatch.delenv(DELAY_ENV)
    monkeypatch.delenv(DELAY_SEED_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calm, jitter = _study(tmp_path, "t_calm"), _study(tmp_path, "t_jitter")
    print("calm:  ", calm, "\njitter:", jitter)
    assert len(calm[0]) == 8 and all(state == "COMPLETE" for _, state, _, _ in calm[0])
    assert calm == jitter
    assert calm[1]["test/recall_at_1_mean"] > 0
    _assert_the_delays_reordered_the_trial_ends(tmp_path / "runs" / "t_jitter", "t_jitter")

    # Optuna's conventions: the objective named, each trial linked to its Ray trial and MLflow run.
    study_dir = tmp_path / "runs" / "t_calm"
    study = optuna.load_study(study_name="t_calm", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    assert study.metric_names == ["test/recall_at_1"]
    _, parents, children = mlflow_children(study_dir, "t_calm")
    runs = {r.data.tags[R.TRIAL_ID]: r.info.run_id for r in children if r.data.tags[R.STAGE] == R.STAGE_SEARCH}
    assert {t.user_attrs[R.OPTUNA_RAY_TRIAL_ID]: t.user_attrs[R.OPTUNA_MLFLOW_RUN_ID] for t in study.trials} == runs

    # The parent run records what decides the numerics.
    tags = parents[0].data.tags
    assert set(R.ENV_TAGS) <= set(tags)
    assert tags["env.optuna"] == optuna.__version__ and tags["env.torch_threads"] == "1"
    assert tags["env.cpu_count"] == str(os.cpu_count())


def _assert_the_delays_reordered_the_trial_ends(study_dir, name: str) -> None:
    """The sleeps took effect: trial 1, with none, ended well before trial 0, with 8 s of them, though both started
    together; so the trials' ends (Optuna's ``datetime_complete``) are not in their numbers' order."""
    trials = {t.number: t for t in optuna_trials(study_dir, name)}
    slept = {n: sum(epoch_delay(t.params, epoch, DELAY_S, DELAY_SEED) for epoch in (1, 2)) for n, t in trials.items()}
    assert (slept[0], slept[1]) == (8.0, 0.0), f"DELAY_SEED no longer delays trial 0 alone ({slept}): pick another"
    ends = [t.number for t in sorted(trials.values(), key=lambda t: t.datetime_complete)]
    ahead = (trials[0].datetime_complete - trials[1].datetime_complete).total_seconds()
    starts = abs((trials[0].datetime_start - trials[1].datetime_start).total_seconds())
    print(
        f"slept: {slept}; ends in the order {ends}; trial 1 ended {ahead:.1f} s before trial 0 (started {starts:.1f} s apart)"
    )
    assert starts < 1.0  # both asked at the start: only the sleeps set them apart
    assert ahead > DELAY_S, f"trial 1 ended only {ahead:.1f} s before trial 0: the sleeps did not take effect"
    assert ends != sorted(ends)
