"""One fast test per private Ray/Optuna attribute that study/runtime/compat.py reads: an upgrade that renames one fails
here, not in the middle of a resumed study."""

from __future__ import annotations

import os

import optuna
import pytest
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.optuna import OptunaSearch

from study.runtime import compat, ray_node


@pytest.fixture
def searcher() -> OptunaSearch:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = OptunaSearch(
        space={"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
        metric="m",
        mode="max",
        storage=optuna.storages.InMemoryStorage(),
    )
    s.suggest("ray_a")
    return s


def test_optuna_search_maps_ray_trials_to_optuna_trials(searcher):
    trials = compat.optuna_trials_of(searcher)
    assert set(trials) == {"ray_a"} and isinstance(trials["ray_a"], optuna.trial.Trial)
    assert isinstance(compat.optuna_study_of(searcher), optuna.Study)
    searcher.on_trial_complete("ray_a", {"m": 0.5})
    assert "ray_a" in compat.completed_trials_of(searcher)


def test_study_storage_and_storage_trial_ids(searcher):
    study = compat.optuna_study_of(searcher)
    trial = compat.optuna_trials_of(searcher)["ray_a"]
    storage = compat.study_storage(study)
    assert isinstance(storage, optuna.storages.BaseStorage)
    storage.set_trial_system_attr(compat.storage_trial_id(trial), "grid_id", 3)
    (frozen,) = study.get_trials(deepcopy=False)
    assert frozen.system_attrs["grid_id"] == 3 and compat.storage_trial_id(frozen) == compat.storage_trial_id(trial)


def test_a_tuner_exposes_its_run_config(tmp_path):
    config = tune.RunConfig(name="compat", storage_path=str(tmp_path))
    tuner = tune.Tuner(lambda c: None, run_config=config)
    assert compat.restored_run_config(tuner).name == "compat"


def test_a_tuner_exposes_its_searcher(searcher):
    """compat.restored_searcher: the object whose state Ray restores in place when a restored Tuner's fit starts."""
    tuner = tune.Tuner(lambda c: None, tune_config=tune.TuneConfig(search_alg=searcher))
    assert compat.restored_searcher(tuner) is searcher
    assert compat.restored_searcher(tune.Tuner(lambda c: None)) is None


def test_asha_keeps_its_trial_brackets():
    assert compat.asha_trial_info(ASHAScheduler(metric="m", mode="max", max_t=2)) == {}


def test_asha_rungs_are_its_first_brackets_milestones():
    rungs = compat.asha_rungs(ASHAScheduler(metric="m", mode="max", max_t=9, grace_period=1, reduction_factor=3))
    assert sorted(rungs) == [1, 3, 9] and all(recorded == {} for recorded in rungs.values())


def test_gcs_client_class_is_where_compat_reads_it():
    """ray_node.gcs_client builds ``ray._raylet.GcsClient(address=...)``; tests/study/runtime/test_ray_cli_cluster.py drives it
    against a real token-authenticated head (the driver without the token gets one line, exit 2)."""
    import ray._raylet

    assert isinstance(ray._raylet.GcsClient, type)


def test_a_local_instance_takes_loopback_inside_the_block_only(monkeypatch):
    """``loopback_local_instance`` turns Ray's local-only switch on while the block runs and restores it: Ray's
    address for a new node is 127.0.0.1 inside (tests/study/runtime/test_loopback.py checks a running study's sockets)."""
    import ray
    from ray._private import ray_constants, services

    monkeypatch.delenv(ray_node.LOCAL_ONLY_ENV, raising=False)
    before = ray_constants.ENABLE_RAY_CLUSTER
    with ray_node.loopback_local_instance():
        assert ray_constants.ENABLE_RAY_CLUSTER is False and os.environ[ray_node.LOCAL_ONLY_ENV] == "0"
        if not ray.is_initialized():  # with a node, Ray answers that node's address instead
            assert services.get_node_ip_address() == "127.0.0.1"
    assert ray_constants.ENABLE_RAY_CLUSTER is before and ray_node.LOCAL_ONLY_ENV not in os.environ


def test_finish_threads_stops_idle_executor_workers_and_joins_the_rest():
    """The fast exit's first step: an idle ThreadPoolExecutor's workers are told to stop (threading's exit hooks) and
    every non-daemon thread is joined; joining alone would hang on those workers."""
    import subprocess
    import sys

    code = (
        "import concurrent.futures, threading, time\n"
        "from study.runtime.compat import finish_threads\n"
        "pool = concurrent.futures.ThreadPoolExecutor(2); pool.submit(time.sleep, 0.1).result()\n"
        "done = []; t = threading.Thread(target=lambda: (time.sleep(0.3), done.append(1))); t.start()\n"
        "finish_threads(); me = threading.current_thread()\n"
        "print(len(done), sum(x.is_alive() for x in threading.enumerate() if x is not me))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["1", "0"], proc.stderr  # the thread ran to its end; no other thread is left


def test_a_study_view_shows_samplers_its_own_trials():
    """``Study._get_trials`` is what ``get_trials``, ``trials`` and the samplers read (TPE, the intersection search
    space): a view replacing it replaces the history every one of them sees."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for x in (0.1, 0.2, 0.3):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": x}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)}, value=x
            )
        )
    every = compat.study_trials(study, deepcopy=False, use_cache=False)
    assert [t.number for t in every] == [0, 1, 2]
    view = compat.study_with_trials(study, lambda deepcopy=True, states=None, use_cache=False: every[:1])
    assert [t.number for t in view.trials] == [0] and [t.number for t in view.get_trials(deepcopy=False)] == [0]
    assert optuna.search_space.IntersectionSearchSpace().calculate(view) == {
        "x": optuna.distributions.FloatDistribution(0, 1)
    }
    assert len(study.trials) == 3  # the study itself is untouched


def test_the_guard_wraps_every_private_storage_call_optunas_cache_makes():
    """Optuna's ``_CachedStorage`` calls these private ``RDBStorage`` methods besides the public API; an upgrade that
    adds one would leave it unguarded (a database restart would end the study there): read from Optuna's source."""
    import inspect
    import re

    from optuna.storages import RDBStorage, _cached_storage

    called = set(re.findall(r"self\._backend\.(_\w+)", inspect.getsource(_cached_storage)))
    assert called == set(compat.RDB_PRIVATE_CALLS)
    assert all(callable(getattr(RDBStorage, name, None)) for name in compat.RDB_PRIVATE_CALLS)


def test_gcs_node_info_is_where_compat_reads_it():
    """ray_node.cluster_nodes calls ``get_all_node_info`` (``GcsClient`` hands it to ``InnerGcsClient``) and reads
    ``is_head_node``, ``state`` and ``temp_dir`` of each ``GcsNodeInfo``; tests/study/deploy/test_slurm_job.py drives it
    against a real token-authenticated head."""
    import ray._raylet
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    assert callable(ray._raylet.InnerGcsClient.get_all_node_info)
    info = GcsNodeInfo(is_head_node=True, temp_dir="/tmp/dmlray-7", state=GcsNodeInfo.ALIVE)
    assert ray_node.GcsNode(info.is_head_node, info.state == GcsNodeInfo.ALIVE, info.temp_dir) == (
        True,
        True,
        "/tmp/dmlray-7",
    )


def test_ray_client_check_is_where_compat_reads_it():
    """``ray start --head`` starts a Ray Client server (port 10001) exactly when this is true (ray/scripts)."""
    assert isinstance(ray_node.ray_client_installed(), bool)


def test_a_concurrency_limiter_counts_live_trials_where_compat_reads_them():
    """compat.concurrency_limiter / release_concurrency / hold_concurrency (study.search.halving: a trial waiting at a
    barrier frees its slot) and keep_paused_on_add (a restored waiting trial stays PAUSED)."""
    from types import SimpleNamespace

    from ray.tune.experiment import Trial
    from ray.tune.search import ConcurrencyLimiter, Searcher

    class One(Searcher):
        def suggest(self, trial_id):
            return {"x": 1}

    limiter = ConcurrencyLimiter(One(metric="m", mode="max"), max_concurrent=1)
    controller = SimpleNamespace(search_alg=SimpleNamespace(searcher=limiter))
    assert compat.concurrency_limiter(controller) is limiter
    assert limiter.suggest("a") == {"x": 1} and limiter.suggest("b") is None  # the limit counts "a"
    compat.release_concurrency(limiter, "a")
    assert limiter.suggest("b") == {"x": 1}
    compat.hold_concurrency(limiter, "a")
    assert limiter.live_trials == {"a", "b"} and limiter.num_unfinished_live_trials == 2
    trial = SimpleNamespace(status=Trial.PENDING, set_status=lambda s: setattr(trial, "status", s))
    compat.keep_paused_on_add(trial)
    assert trial.status == Trial.PAUSED


def test_a_trial_is_pointed_at_another_checkpoint_where_compat_sets_it(tmp_path):
    """compat.trial_checkpoint_result / set_trial_checkpoint (study.runtime.checkpoint_repair): the trial resumes from
    the new checkpoint with its metrics, writes its next one past it, and its next snapshot says so (Ray caches the
    trial's JSON state)."""
    from ray.train._internal.checkpoint_manager import _TrainingResult
    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.experiment import Trial

    resources = PlacementGroupFactory([{"CPU": 1}])
    tune.register_trainable("compat_probe", lambda config: None)
    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp", trial_dir_name="trial_a")
    trial = Trial("compat_probe", config={}, storage=storage, trial_id="a", placement_group_factory=resources)
    trial.create_placement_group_factory()
    first, newer = tmp_path / "exp/trial_a/checkpoint_000000", tmp_path / "exp/trial_a/checkpoint_000003"
    first.mkdir(parents=True)
    trial.on_checkpoint(_TrainingResult(tune.Checkpoint.from_directory(str(first)), {"training_iteration": 1}))
    assert compat.trial_checkpoint_result(trial).checkpoint.path == str(first)
    trial.get_json_state()  # cached, as a snapshot leaves it
    compat.set_trial_checkpoint(trial, tune.Checkpoint.from_directory(str(newer)), {"training_iteration": 4}, 3)
    state, metadata = trial.get_json_state()
    back = Trial.from_json_state(state)
    back.restore_run_metadata(metadata)
    for t in (trial, back):
        assert t.checkpoint.path == str(newer) and t.latest_checkpoint_result.metrics == {"training_iteration": 4}
        assert t.storage.current_checkpoint_index == 3  # the next checkpoint is checkpoint_000004
    compat.set_trial_checkpoint(trial, None, {})
    assert trial.checkpoint is None and compat.trial_checkpoint_result(trial) is None
