"""Grid sampler over family × noise ratio × seed, and fixed params shared by the sampled families."""

from __future__ import annotations

import itertools

import optuna
import pytest

from study.intake.spec_reader import parse_spec
from study.intake.validation import family_params
from study.intake.validation import resolve_trial as resolve_trial_spec
from study.search.space import make_sampler, to_optuna
from trainables.schema.errors import SpecError
from trainables.schema.grid import grid_points


def _comparison(**search) -> dict:
    return {
        "name": "cmp",
        "family": "bspml",
        "params": {"ms_beta": 40.0, "lambda0": 2.0, "mu": 4.0},
        "search": {
            "num_trials": 12,
            "sampler": {"type": "grid", "seed": 0},
            "space": {
                "family": {"type": "categorical", "choices": ["ms", "spms", "bspml"]},
                "dataset.noise.ratio": {"type": "categorical", "choices": [0.0, 0.3]},
                "seed": {"type": "categorical", "choices": [0, 1]},
            },
            **search,
        },
    }


def test_grid_enumerates_every_combination_once():
    spec = parse_spec(_comparison())
    study = optuna.create_study(sampler=make_sampler(spec.search.sampler, spec.search.space))
    space = to_optuna(spec.search.space)
    for _ in range(12):  # ask/tell as Ray Tune's OptunaSearch does (never inside study.optimize)
        trial = study.ask()
        space(trial)
        study.tell(trial, 0.5)
    seen = sorted((t.params["family"], t.params["dataset.noise.ratio"], t.params["seed"]) for t in study.trials)
    assert seen == sorted(itertools.product(["ms", "spms", "bspml"], [0.0, 0.3], [0, 1]))


def test_conditional_grid_visits_only_the_active_combinations_once_and_resumes():
    space = {
        "family": {"type": "categorical", "choices": ["triplet", "marginal"]},
        "mining": {
            "type": "categorical",
            "choices": ["random_semihard", "fixed_semihard"],
            "when": {"family": ["triplet"]},
        },
        "seed": {"type": "categorical", "choices": [0, 1]},
    }
    spec = parse_spec(
        {
            "name": "np",
            "family": "triplet",
            "search": {"num_trials": 6, "sampler": {"type": "grid", "seed": 3}, "space": space},
        }
    )
    expected = {
        ("triplet", "random_semihard", 0),
        ("triplet", "random_semihard", 1),
        ("triplet", "fixed_semihard", 0),
        ("triplet", "fixed_semihard", 1),
        ("marginal", None, 0),
        ("marginal", None, 1),
    }
    assert {(p["family"], p.get("mining"), p["seed"]) for p in grid_points(spec.search.space)} == expected
    storage = optuna.storages.InMemoryStorage()
    define = to_optuna(spec.search.space)

    def ask_tell(n: int) -> None:  # a fresh sampler each time, as a resumed driver builds one
        study = optuna.create_study(
            study_name="np",
            storage=storage,
            load_if_exists=True,
            sampler=make_sampler(spec.search.sampler, spec.search.space),
        )
        for _ in range(n):
            trial = study.ask()
            define(trial)
            study.tell(trial, 0.5)

    ask_tell(2)
    ask_tell(4)
    trials = optuna.load_study(study_name="np", storage=storage).trials
    assert len(trials) == 6  # each point once: the second driver skipped the two points the first one took
    assert {(t.params["family"], t.params.get("mining"), t.params["seed"]) for t in trials} == expected
    with pytest.raises(SpecError, match="exceeds the 6 points"):
        parse_spec(
            {
                "name": "np",
                "family": "triplet",
                "search": {"num_trials": 7, "sampler": {"type": "grid"}, "space": space},
            }
        )


def test_a_failed_grid_point_is_retried_once_the_fresh_points_are_used():
    spec = parse_spec(_comparison())
    study = optuna.create_study(sampler=make_sampler(spec.search.sampler, spec.search.space))
    space = to_optuna(spec.search.space)
    for i in range(13):
        trial = study.ask()
        space(trial)
        state = optuna.trial.TrialState.FAIL if i == 0 else optuna.trial.TrialState.COMPLETE
        study.tell(trial, None if i == 0 else 0.5, state=state)
    first_failed = study.trials[0].system_attrs["grid_id"]
    assert study.trials[12].system_attrs["grid_id"] == first_failed  # the 13th trial re-runs the failed cell
    done = {tuple(t.params.values()) for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE}
    assert len(done) == 12  # every cell has a completed trial


def test_family_search_keeps_the_fixed_params_each_family_has():
    spec = parse_spec(_comparison())
    ms = resolve_trial_spec(spec, {"family": "ms", "dataset.noise.ratio": 0.3, "seed": 1})
    assert ms.params == {"ms_beta": 40.0} and ms.dataset.noise.ratio == 0.3 and ms.seed == 1
    spms = resolve_trial_spec(spec, {"family": "spms"})
    assert spms.params == {"ms_beta": 40.0, "lambda0": 2.0}
    bspml = resolve_trial_spec(spec, {"family": "bspml"})
    assert family_params("bspml", bspml.params).mu == 4.0 and family_params("bspml", bspml.params).ms_beta == 40.0


def test_grid_and_family_search_errors_are_one_line():
    bad = _comparison()
    bad["params"]["nope"] = 1
    with pytest.raises(SpecError, match="params.nope is not a parameter of any family"):
        parse_spec(bad)
    with pytest.raises(SpecError, match="exceeds the 12 points"):
        parse_spec(_comparison(num_trials=13))
    cont = _comparison()
    cont["search"]["space"]["mu"] = {"type": "float", "low": 0.0, "high": 1.0}
    with pytest.raises(SpecError, match="search.space.mu: sampler 'grid' needs categorical"):
        parse_spec(cont)
    # A family hyperparameter in the space must be conditional on the families that have it.
    cont["search"]["sampler"] = {"type": "tpe"}
    with pytest.raises(SpecError, match="params.mu"):
        parse_spec(cont)
    cont["search"]["space"]["mu"]["when"] = {"family": ["bspml"]}
    parse_spec(cont)
