from __future__ import annotations

import math
import pickle

import optuna
import pytest

from study.search.space import make_sampler, to_optuna
from trainables.schema.spec import SamplerSpec, SearchSpec

SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "margin": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
    "k": {"type": "int", "low": 2, "high": 16, "log": True},
    "p": {"type": "int", "low": 4, "high": 12, "step": 4},
    "opt": {"type": "categorical", "choices": ["sgd", "adam"]},
    "momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"opt": "sgd"}},
}


def _study(sampler_type: str = "random", n: int = 40) -> optuna.Study:
    space = SearchSpec.model_validate({"space": SPACE}).space
    define = to_optuna(space)
    study = optuna.create_study(sampler=make_sampler(SamplerSpec(type=sampler_type, seed=1)))
    for _ in range(n):
        trial = study.ask()
        define(trial)
        study.tell(trial, sum(v for v in trial.params.values() if isinstance(v, float)))
    return study


def test_distributions_match_the_spec():
    trial = _study(n=1).trials[0]
    d = trial.distributions
    assert isinstance(d["lr"], optuna.distributions.FloatDistribution) and d["lr"].log
    assert (d["lr"].low, d["lr"].high) == (1e-4, 1e-1)
    assert d["margin"].step == 0.25
    assert isinstance(d["k"], optuna.distributions.IntDistribution) and d["k"].log
    assert d["p"].step == 4
    assert d["opt"].choices == ("sgd", "adam")


def test_values_stay_in_bounds_and_conditionals_follow_their_parent():
    study = _study(n=60)
    for t in study.trials:
        assert 1e-4 <= t.params["lr"] <= 1e-1
        assert t.params["margin"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert 2 <= t.params["k"] <= 16 and t.params["p"] in (4, 8, 12)
        assert ("momentum" in t.params) == (t.params["opt"] == "sgd")
    assert {t.params["opt"] for t in study.trials} == {"sgd", "adam"}
    # log scale: a log-uniform sample lands in the lowest decade about a third of the time, uniform ~0.1 %
    low_decade = sum(t.params["lr"] < 1e-3 for t in study.trials) / len(study.trials)
    assert low_decade > 0.1


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "gp", "qmc"])
def test_every_sampler_runs_on_the_space_and_is_seeded(sampler):
    a = [t.params for t in _study(sampler, n=12).trials]
    b = [t.params for t in _study(sampler, n=12).trials]
    assert a == b
    assert all(math.isfinite(p["lr"]) for p in a)


def test_define_by_run_is_picklable():
    space = SearchSpec.model_validate({"space": SPACE}).space
    define = pickle.loads(pickle.dumps(to_optuna(space)))
    assert list(define.space) == list(SPACE)
