"""Resume after a lost driver: SIGKILL mid-study (in Ray's checkpoint window), ``--status``, ``--resume``, and that
resume itself stopped (SIGUSR1) and continued with the command it printed; ASHA rungs survive; searchers reconcile."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from harness.driver import driver_env, logged_epochs, mlflow_children, optuna_trials
from harness.kill_resume import (
    EPOCHS,
    NUM_TRIALS,
    check_resumed,
    continue_args,
    kill_spec,
    leave_checkpoints_as_ray_does,
    run_and_stop,
    run_to_end,
    runs_left,
    signal_driver,
    snapshot_has_checkpointed_trial_in_flight,
    status_of,
    trial_rows,
)
from study.runtime.driver_run import read_run_progress
from study.runtime.stopping import EXIT_STOPPED
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH

#: Seconds one driver of the chain may take to reach its stop (or to stop): generous, for 2 cores shared with another
#: test (pytest's per-test limit, 900 s, still bounds the whole chain).
DRIVER_S = 600


@pytest.mark.e2e
def test_killed_in_rays_checkpoint_window_then_sigusr1_once_every_trial_exists_then_the_printed_command_finishes(
    tmp_path,
):
    # One study, three drivers (each stop of a chain costs a driver start, not a study):
    # 1. SIGKILL of the driver and its Ray mid-search: one trial finished, one in flight with a checkpoint in Ray's
    #    snapshot, one not started (S4). Between the drivers, the in-flight trial's folder is left as Ray leaves it when
    #    the driver dies inside its checkpoint window (S9: the snapshot names a checkpoint a newer one replaced), and
    #    --status says where the study stands, starting nothing (P7).
    # 2. --resume goes on from the checkpoint that replaced it, and is itself stopped with SIGUSR1 once every trial
    #    exists (the last at epoch 1 of 3, final.seeds 0: only Tune's state of each trial says the study is not done),
    #    exit 3, "no result yet" (S7), its last line the command that continues it with its --set storage= (P1).
    # 3. That command, as printed, finishes: every trial and epoch once, ranked on the mean of its own last 2 epochs.
    spec = kill_spec(160, name="t_kill_chain")
    spec["search"]["select_on"] = {"mean_last": 2}
    name, storage = spec["name"], tmp_path / "elsewhere"
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(spec))
    located = [str(path), "--set", f"storage={storage}"]
    study_dir = storage / name

    def in_flight(d):
        return logged_epochs(d, name) >= EPOCHS + 1 and snapshot_has_checkpointed_trial_in_flight(d)

    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        killed = run_and_stop(tmp_path, env, located, study_dir, in_flight, None, timeout=DRIVER_S)
        assert not killed["finished_before_kill"], killed["output"][-2000:]
        assert EPOCHS + 1 <= logged_epochs(study_dir, name) < NUM_TRIALS * EPOCHS
        moved = leave_checkpoints_as_ray_does(study_dir)
        status = status_of(tmp_path, env, located)
        stopped = run_and_stop(
            tmp_path,
            env,
            [*located, "--resume"],
            study_dir,
            lambda d: logged_epochs(d, name) >= (NUM_TRIALS - 1) * EPOCHS + 1,
            signal_driver(signal.SIGUSR1),
            timeout=DRIVER_S,
        )
        left, progress = runs_left(study_dir, name), read_run_progress(study_dir)
        resumed = run_to_end(tmp_path, env, continue_args(stopped["output"]))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)

    # --status between the kill and the resume: MLflow still says RUNNING; the study's lock, free since the kill,
    # says no driver is alive.
    assert status.returncode == 0, status.stderr
    assert f"of {NUM_TRIALS}" in status.stdout and "best so far" in status.stdout
    assert "continue with --resume" in status.stdout and str(study_dir) in status.stdout
    assert "driver: not running (it was killed or lost): continue with --resume" in status.stdout
    assert "optuna:   sqlite:///" in status.stdout

    # The trial in flight (exactly one: one at a time) resumed from the checkpoint that replaced the one its snapshot
    # named, at the epoch after it, not from scratch; Ray's count stayed the epoch.
    second = stopped["output"]
    assert len(moved) == 1, (moved, killed["output"][-2000:])
    assert "is gone: it resumes from" in second, second[-3000:]
    ((moved_trial, moved_epoch),) = moved
    rows = trial_rows(study_dir, moved_trial)
    assert all(r["training_iteration"] == r[EPOCH] for r in rows), rows
    restarts = [r["training_iteration"] for r in rows if r["iterations_since_restore"] == 1]
    assert restarts[-1] == moved_epoch + 1 and rows[-1]["training_iteration"] == EPOCHS, rows

    # The SIGUSR1 once every trial exists: exit 3, nothing half-written, the exact command that continues it.
    assert not stopped["finished_before_kill"], "the study ended before the signal"
    assert stopped["code"] == EXIT_STOPPED, second[-3000:]
    assert "SIGUSR1 received" in second and "Best trial" not in second
    assert "stopped on SIGUSR1 in its search stage" in second, second[-3000:]
    assert f"{NUM_TRIALS - 1} of {NUM_TRIALS} trials ended (0 failed), 1 stopped mid-way; no result yet" in second
    assert second.strip().splitlines()[-1] == (
        f"stopped on SIGUSR1; continue it with: python -m study.run {shlex.join(located)} --resume"
    )
    assert left["parent"] == [("KILLED", R.STAGE_SEARCH)], left
    assert left["children"] == ["FINISHED"] * (NUM_TRIALS - 1) + ["KILLED"], left
    assert left["optuna"] == ["COMPLETE"] * (NUM_TRIALS - 1) + ["RUNNING"], left  # the last one continues
    # The stopped run's progress: every epoch it checkpointed (the resumed trial's last ones, the last trial's up to
    # the stop's drained one), timed, and how it ended.
    assert progress is not None and (progress.exit_code, progress.stopped_on) == (EXIT_STOPPED, "SIGUSR1")
    resumed_epochs = EPOCHS - moved_epoch
    assert resumed_epochs + 1 <= progress.epochs_checkpointed < resumed_epochs + EPOCHS, (progress, moved)
    assert progress.startup_s is not None and 0 < progress.startup_s < progress.run_s, progress
    assert progress.epoch_s is not None and progress.epoch_s > 0, progress

    # The printed command finished: every trial COMPLETE once, each epoch's metrics once, ranked on its last 2 epochs.
    out = {"resumed": resumed, "study_dir": study_dir, "name": name, "first_output": second}
    check_resumed(out, "test/mean_last_2/recall_at_1")
    ended = read_run_progress(study_dir)
    assert ended is not None and (ended.exit_code, ended.stopped_on) == (0, None), ended
    assert ended.epochs_checkpointed >= 1, ended
    client, _, children = mlflow_children(study_dir, name)
    history = [
        sorted(client.get_metric_history(c.info.run_id, "test/recall_at_1"), key=lambda m: m.step) for c in children
    ]
    means = sorted(np.mean([m.value for m in h[-2:]]) for h in history)
    ranked = sorted(t.value for t in optuna_trials(study_dir, name))
    assert ranked == pytest.approx(means, abs=1e-9), (ranked, means)


def test_status_of_a_study_that_does_not_exist_exits_2(spec_dict, write_spec, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "study.run", str(write_spec(spec_dict)), "--status"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no study 't_study'" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_remote_storage_needs_tracking_servers(spec_dict, write_spec, run_cli, tmp_path):
    spec_dict["storage"] = "s3://bucket/studies"
    proc = run_cli(str(write_spec(spec_dict)), timeout=120)
    assert proc.returncode == 2 and "tracking.uri must name a server" in proc.stderr
    spec_dict["tracking"] = {"uri": "http://127.0.0.1:5000"}
    proc = run_cli(str(write_spec(spec_dict)), timeout=120)
    assert proc.returncode == 2 and "tracking.optuna_uri must name a server" in proc.stderr


def _fake_trial(trial_id: str) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id)


def test_asha_rungs_survive_a_new_scheduler(tmp_path):
    from study.search.persistent_asha import PersistentASHA

    def make() -> PersistentASHA:
        s = PersistentASHA(
            time_attr="training_iteration",
            max_t=8,
            grace_period=1,
            reduction_factor=2,
            state_file=str(tmp_path / "asha_state.pkl"),
        )
        s.set_search_properties("test/recall_at_1", "max")
        return s

    first = make()
    for i, value in enumerate([0.9, 0.8, 0.7, 0.6]):
        first.on_trial_add(None, _fake_trial(f"t{i}"))
        first.on_trial_result(None, _fake_trial(f"t{i}"), {"training_iteration": 1, "test/recall_at_1": value})
    first.on_trial_complete(None, _fake_trial("t0"), {"training_iteration": 1, "test/recall_at_1": 0.9})
    rungs = [(m, dict(r)) for m, r in first._brackets[0]._rungs]
    assert any(r for _, r in rungs)

    second = make()  # what Tuner.restore hands the resumed driver: empty rungs
    assert not any(r for _, r in second._brackets[0]._rungs)
    second.on_trial_add(None, _fake_trial("t1"))  # a restored live trial keeps its bracket
    assert [(m, dict(r)) for m, r in second._brackets[0]._rungs] == rungs
    assert set(second._trial_info) == {"t1", "t2", "t3"}
    # A new, poor trial is judged against the rungs recorded before the restart.
    second.on_trial_add(None, _fake_trial("t9"))
    assert second.on_trial_result(None, _fake_trial("t9"), {"training_iteration": 1, "test/recall_at_1": 0.1}) == "STOP"
    assert (
        second.on_trial_result(None, _fake_trial("t2"), {"training_iteration": 2, "test/recall_at_1": 0.95})
        == "CONTINUE"
    )


def _study_searcher(url: str):
    """A study's searcher of one float parameter on the Optuna store ``url`` (study ``s``, 3 epochs a trial)."""
    import optuna

    from study.search.space import to_optuna
    from study.search.study_search import StudySearch
    from trainables.schema.spec import FloatParam

    return StudySearch(
        space=to_optuna({"ms_alpha": FloatParam(type="float", low=1.0, high=3.0)}),
        metric="test/recall_at_1",
        mode="max",
        sampler=optuna.samplers.RandomSampler(seed=0),
        study_name="s",
        storage=optuna.storages.RDBStorage(url),
        max_t=3,
    )


def test_restored_searcher_adopts_unreported_optuna_trials_and_fails_forgotten_ones(tmp_path):
    """What a kill between Optuna's ask and Ray's snapshot leaves behind is reconciled on restore."""
    import optuna

    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def searcher():
        return _study_searcher(url)

    first = searcher()
    first.suggest("ray_a")
    first.save(str(tmp_path / "searcher.pkl"))  # Ray's last snapshot knows only ray_a
    study = optuna.load_study(study_name="s", storage=url)
    unreported = study.ask({"ms_alpha": optuna.distributions.FloatDistribution(1.0, 3.0)})
    reported = study.ask({"ms_alpha": optuna.distributions.FloatDistribution(1.0, 3.0)})
    reported.report(0.5, 1)

    second = searcher()
    second.restore(str(tmp_path / "searcher.pkl"))
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {0: "RUNNING", 1: "RUNNING", 2: "FAIL"}
    config = second.suggest("ray_b")  # the next new Ray trial takes over the unreported Optuna trial
    assert config["ms_alpha"] == unreported.params["ms_alpha"]
    assert len(study.get_trials()) == 3
    second.on_trial_complete("ray_b", {"test/recall_at_1": 0.7, "epoch": 3, "training_iteration": 3})
    assert study.get_trials()[1].state.name == "COMPLETE" and study.get_trials()[1].value == 0.7


@pytest.mark.parametrize("replayed", [(2, 3), ()])
def test_a_trial_told_before_the_kill_and_running_in_the_snapshot_goes_on_without_failing(tmp_path, replayed):
    """Optuna was told the trial's end after Ray's last snapshot: the restored Ray trial runs on from its checkpoint,
    reporting epochs again (``replayed``) or none (its checkpoint was its last epoch's), and ends again. The run's
    searcher neither reports nor records costs on the finished Optuna trial (Optuna would raise, and Ray would fail
    the trial) nor tells it twice."""
    import optuna

    from study.search.cell_search import CellSearch
    from trainables.schema.metric_names import COST_MODEL_EPOCHS

    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def searcher() -> CellSearch:
        return CellSearch([("s", {}, _study_searcher(url))], 1, "test/recall_at_1", "max")

    def result(epoch: int) -> dict:
        return {
            "test/recall_at_1": 0.4 + epoch / 10,
            "epoch": epoch,
            "training_iteration": epoch,
            COST_MODEL_EPOCHS: epoch,
        }

    first = searcher()
    first.suggest("ray_a")
    first.on_trial_result("ray_a", result(1))
    first.save(str(tmp_path / "searcher.pkl"))  # Ray's last snapshot: ray_a RUNNING after epoch 1
    first.on_trial_result("ray_a", result(2))
    first.on_trial_complete("ray_a", result(3))

    restored = searcher()
    restored.restore(str(tmp_path / "searcher.pkl"))
    for epoch in replayed:
        restored.on_trial_result("ray_a", result(epoch))
    restored.on_trial_complete("ray_a", result(3))
    (trial,) = optuna.load_study(study_name="s", storage=url).get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == pytest.approx(0.7)
    assert trial.intermediate_values == pytest.approx({1: 0.5, 2: 0.6, 3: 0.7})
    assert trial.user_attrs[COST_MODEL_EPOCHS] == 3.0


def test_a_restored_searcher_adopts_a_final_trial_ray_restored_and_does_not_ask_its_seed_again(tmp_path):
    """Ray's restored trial list is newer than the searcher's snapshot (the two files reach the storage one after the
    other): a final trial Ray restored is adopted on the first step (ReconcileTrials), so its seed is not asked
    again and the other seed is; before, the resumed study ran the seed twice."""
    from types import SimpleNamespace

    from study.search.cell_search import CellBudget, CellSearch
    from study.search.reconcile import ReconcileTrials
    from trainables.schema import record as R
    from trainables.schema.spec import FinalSpec
    from trainables.schema.trial import FINAL_KEY

    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def searcher() -> CellSearch:
        budget = CellBudget(1, replace_lost=False, final=FinalSpec(seeds=2), epochs=3)
        return CellSearch([("s", {}, _study_searcher(url))], budget, "test/recall_at_1", "max")

    first = searcher()
    first.suggest("t1")
    first.on_trial_complete("t1", {"test/recall_at_1": 0.7, "epoch": 3, "training_iteration": 3})
    first.save(str(tmp_path / "searcher.pkl"))  # the snapshot's searcher: both seeds due
    seed_0 = first.suggest("f0")  # asked after it, and in the restored trial list
    assert seed_0[FINAL_KEY]["params"]["seed"] == 0

    restored = searcher()
    restored.restore(str(tmp_path / "searcher.pkl"))
    callback = ReconcileTrials(restored, restored=True)
    ended = SimpleNamespace(trial_id="t1", config={}, status="TERMINATED", last_result={})
    callback.on_step_begin(0, [ended, SimpleNamespace(trial_id="f0", config=seed_0, status="PENDING", last_result={})])
    callback.on_step_begin(1, [])  # once only
    assert restored.final_trials["f0"] == seed_0[FINAL_KEY]
    asked = restored.suggest("f1")
    assert asked[FINAL_KEY][R.GROUP] == "s" and asked[FINAL_KEY]["params"]["seed"] == 1
    assert restored.suggest("f2") == "FINISHED"  # both seeds asked once, the search done


def test_ghost_runs_of_forgotten_trials_are_deleted(tmp_path):
    from study.tracking.callback import MlflowTrialCallback, ParentRun
    from study.tracking.store import TrackingStore

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = TrackingStore(uri, "s")
    parent = store.start_parent("s", {}, {})
    for trial_id, stage in (("kept", "search"), ("ghost", "search"), ("final_run", "final")):
        store.client.create_run(
            store.experiment_id, tags={"mlflow.parentRunId": parent, "trial_id": trial_id, "stage": stage}
        )
    time.sleep(0.01)
    callback = MlflowTrialCallback(ParentRun(uri, store.experiment_id, parent), describe_trial=None, total_epochs=1)
    callback.on_step_begin(0, [SimpleNamespace(trial_id="kept")])
    left = store.client.search_runs([store.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    # The search stage's callback reconciles search runs only: the final stage's runs are not its ghosts.
    assert sorted(r.data.tags["trial_id"] for r in left) == ["final_run", "kept"]
