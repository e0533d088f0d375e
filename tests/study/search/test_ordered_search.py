"""study/search/ordered_sampler.py: trial i is sampled from a history that depends on i alone, whatever order the trials end
in. Real Optuna samplers (TPE past its start-up trials, constant liar on and off), trials finishing in random orders
simulated with Optuna's ask/tell, as Ray drives it; the Ray end-to-end check is tests/study/test_reproducible_e2e.py."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.trial import TrialState

from study.search.ordered_sampler import OrderedSampler, may_ask, trials_seen_by
from study.search.space import make_sampler
from trainables.schema.space import SamplerSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objective(params: dict[str, float]) -> float:
    return -((params["x"] - 0.3) ** 2) - 0.5 * (params["y"] - 0.7) ** 2


def run_async(sampler: optuna.samplers.BaseSampler, order_seed: int, lag: int | None, c: int = 2, n: int = 12):
    """Asks and tells ``n`` trials with ``c`` in flight; a random running trial ends each step (``order_seed``).
    With ``lag`` a trial is asked only when :func:`may_ask` allows it (what StudySearch.suggest does)."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    order = random.Random(order_seed)
    running: list[optuna.Trial] = []
    asked = 0
    while asked < n or running:
        while asked < n and len(running) < c and (lag is None or may_ask(study.get_trials(), asked, lag)):
            trial = study.ask()
            trial.suggest_float("x", 0.0, 1.0)
            trial.suggest_float("y", 0.0, 1.0)
            running.append(trial)
            asked += 1
        done = running.pop(order.randrange(len(running)))
        study.tell(done, objective(done.params))
    return [(t.number, t.params, t.value) for t in study.trials]


@pytest.mark.parametrize("constant_liar", [False, True])
def test_finish_order_does_not_change_an_ordered_study(constant_liar):
    spec = SamplerSpec(type="tpe", seed=3, n_startup_trials=3, constant_liar=constant_liar)
    runs = [run_async(OrderedSampler(make_sampler(spec), 2), order_seed, lag=2) for order_seed in range(4)]
    assert all(run == runs[0] for run in runs[1:])
    # Past the start-up trials the plain sampler's study does depend on the order (what the ordering fixes).
    plain = [run_async(make_sampler(spec), order_seed, lag=None) for order_seed in range(4)]
    assert any(run != plain[0] for run in plain[1:])
    assert [p for _, p, _ in plain[0][:3]] == [p for _, p, _ in runs[0][:3]]  # start-up: random draws, same seed


def test_one_at_a_time_is_the_plain_sampler():
    spec = SamplerSpec(type="tpe", seed=1, n_startup_trials=2)
    assert run_async(OrderedSampler(make_sampler(spec), 1), 0, lag=1, c=1) == run_async(
        make_sampler(spec), 0, lag=None, c=1
    )


def _frozen(number: int, state: TrialState, value: float | None) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        params={"x": number / 10},
        distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        value=value,
        state=state,
        intermediate_values={1: 0.5} if state == TrialState.RUNNING else None,
    )
    trial.number = number
    return trial


def test_the_view_of_trial_i():
    trials = [
        _frozen(0, TrialState.COMPLETE, 0.1),
        _frozen(1, TrialState.FAIL, None),
        _frozen(2, TrialState.COMPLETE, 0.3),  # finished early: trial 4 must not know its value with lag 3
        _frozen(3, TrialState.RUNNING, None),
        _frozen(4, TrialState.RUNNING, None),  # being sampled
        _frozen(5, TrialState.RUNNING, None),  # a later one (a resumed study's): not seen
    ]
    seen = trials_seen_by(trials, 4, lag=3)
    assert [(t.number, t.state, t.value, t.intermediate_values) for t in seen] == [
        (0, TrialState.COMPLETE, 0.1, {}),
        (1, TrialState.FAIL, None, {}),
        (2, TrialState.RUNNING, None, {}),
        (3, TrialState.RUNNING, None, {}),
        (4, TrialState.RUNNING, None, {1: 0.5}),
    ]
    assert seen[2].params == {"x": 0.2}
    assert may_ask(trials, 4, lag=3) and may_ask(trials, 5, lag=3) and not may_ask(trials, 6, lag=3)


def test_the_searcher_waits_for_trial_i_minus_lag_and_keeps_waiting_after_a_restore(tmp_path):
    """StudySearch with ``lag``: the next trial is asked only once the trial ``lag`` before it has ended; a restored
    searcher (pickled, as Ray restores it) keeps the rule, after adopting an Optuna trial a killed driver left asked."""
    from study.search.space import to_optuna
    from study.search.study_search import StudySearch
    from trainables.schema.record import OPTUNA_RAY_TRIAL_ID
    from trainables.schema.spec import FloatParam

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = {"ms_alpha": FloatParam(type="float", low=1.0, high=3.0)}

    def searcher() -> StudySearch:
        return StudySearch(
            space=to_optuna(space),
            metric="test/recall_at_1",
            mode="max",
            sampler=OrderedSampler(optuna.samplers.TPESampler(seed=0, n_startup_trials=1), 2),
            study_name="s",
            storage=optuna.storages.RDBStorage(url),
            max_t=1,
            lag=2,
        )

    def done(s: StudySearch, ray_id: str, value: float) -> None:
        s.on_trial_complete(ray_id, {"test/recall_at_1": value, "epoch": 1, "training_iteration": 1})

    first = searcher()
    assert first.suggest("ray_a") is not None and first.suggest("ray_b") is not None  # trials 0, 1
    assert first.suggest("ray_c") is None  # trial 2 needs trial 0's outcome
    done(first, "ray_b", 0.4)
    assert first.suggest("ray_c") is None  # trial 1 ending changes nothing
    done(first, "ray_a", 0.5)
    assert first.suggest("ray_c") is not None  # trial 2
    first.save(str(tmp_path / "searcher.pkl"))
    study = optuna.load_study(study_name="s", storage=url)
    study.ask({"ms_alpha": optuna.distributions.FloatDistribution(1.0, 3.0)})  # trial 3: asked, then the driver died

    second = searcher()
    second.restore(str(tmp_path / "searcher.pkl"))
    assert second.suggest("ray_d") is not None  # adopts trial 3 (needs trials <= 1: ended)
    assert second.suggest("ray_e") is None  # trial 4 needs trial 2 (ray_c, still running)
    done(second, "ray_c", 0.6)
    assert second.suggest("ray_e") is not None
    trials = study.get_trials()
    assert [t.user_attrs.get(OPTUNA_RAY_TRIAL_ID) for t in trials] == ["ray_a", "ray_b", "ray_c", "ray_d", "ray_e"]
    assert study.metric_names == ["test/recall_at_1"]


def test_a_trial_restored_from_its_last_checkpoint_ends_complete_with_its_last_epoch(tmp_path):
    """A driver stopped after a trial's last epoch reached Optuna but before Ray's snapshot held it ended (a warm
    head killed): restored, the trial ends at once and Ray hands over a result without the metric. Optuna records it
    COMPLETE with its last epoch's value, as MLflow has it FINISHED (it was told PRUNED, measured in CI). A trial that
    ended early or failed is still PRUNED or FAIL."""
    from study.search.space import to_optuna
    from study.search.study_search import StudySearch
    from trainables.schema.spec import FloatParam

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher = StudySearch(
        space=to_optuna({"ms_alpha": FloatParam(type="float", low=1.0, high=3.0)}),
        metric="val/recall_at_1",
        mode="max",
        sampler=optuna.samplers.RandomSampler(seed=0),
        study_name="s",
        storage=optuna.storages.RDBStorage(url),
        max_t=2,
    )
    for ray_id in ("whole", "early", "failed"):
        assert searcher.suggest(ray_id) is not None
        searcher.on_trial_result(ray_id, {"val/recall_at_1": 0.5, "epoch": 1, "training_iteration": 1})
    searcher.on_trial_result("whole", {"val/recall_at_1": 0.75, "epoch": 2, "training_iteration": 2})
    searcher.on_trial_complete("whole", {}, error=False)
    searcher.on_trial_complete("early", {}, error=False)
    searcher.on_trial_complete("failed", None, error=True)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert [(t.state.name, t.value) for t in trials] == [("COMPLETE", 0.75), ("PRUNED", 0.5), ("FAIL", None)]
