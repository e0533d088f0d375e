"""The sampler a spec builds has the settings the spec states (trainables/schema/space.py), whatever the installed Optuna's
defaults are (Optuna 5.0 turned TPE's multivariate and constant liar on): these pins fail on an Optuna whose sampler
ignores or renames a setting, instead of a study silently searching differently."""

from __future__ import annotations

import optuna
import pytest

from study.intake.spec_reader import parse_spec
from study.search.space import make_sampler
from trainables.schema.errors import SpecError


def _sampler(spec_dict: dict, **sampler: object) -> optuna.samplers.BaseSampler:
    spec_dict["search"]["sampler"] = sampler
    spec = parse_spec(spec_dict)
    return make_sampler(spec.search.sampler, spec.search.space)


def test_tpe_defaults_are_the_specs_not_optunas(spec_dict):
    tpe = _sampler(spec_dict, type="tpe")
    assert isinstance(tpe, optuna.samplers.TPESampler)
    # Optuna 4's TPE (every study in docs/ ran with it), stated by the spec: independent, no constant liar, 10 random.
    assert (tpe._multivariate, tpe._constant_liar, tpe._n_startup_trials) == (False, False, 10)
    assert tpe._random_sampler._rng.rng.randint(1 << 30) == optuna.samplers.RandomSampler(seed=0)._rng.rng.randint(
        1 << 30
    )  # seeded with search.sampler.seed (0)


def test_tpe_settings_from_the_spec(spec_dict):
    tpe = _sampler(spec_dict, type="tpe", seed=7, multivariate=True, constant_liar=True, n_startup_trials=3)
    assert (tpe._multivariate, tpe._constant_liar, tpe._n_startup_trials) == (True, True, 3)


def test_gp_startup_trials_from_the_spec(spec_dict):
    gp = _sampler(spec_dict, type="gp", n_startup_trials=4)
    assert isinstance(gp, optuna.samplers.GPSampler) and gp._n_startup_trials == 4


@pytest.mark.parametrize(
    ("sampler", "message"),
    [
        ({"type": "random", "multivariate": True}, "sampler.multivariate applies to tpe only"),
        ({"type": "cmaes", "n_startup_trials": 3}, "sampler.n_startup_trials applies to tpe and gp only"),
        ({"type": "tpe", "n_startup_trials": -1}, "n_startup_trials"),
    ],
)
def test_a_setting_the_sampler_does_not_take_is_refused(spec_dict, sampler, message):
    spec_dict["search"]["sampler"] = sampler
    with pytest.raises(SpecError, match=message):
        parse_spec(spec_dict)


def test_a_dumped_spec_loads_again(spec_dict):
    """spec.yaml and every trial's config state the defaults of every sampler key: they load for any type."""
    spec_dict["search"]["sampler"] = {"type": "random", "seed": 1}
    dumped = parse_spec(spec_dict).model_dump(mode="json")
    assert dumped["search"]["sampler"] == {
        "type": "random",
        "seed": 1,
        "multivariate": False,
        "constant_liar": False,
        "n_startup_trials": 10,
    }
    assert parse_spec(dumped).search.sampler.type == "random"


def test_every_sampler_type_the_spec_names_has_a_builder_and_no_other() -> None:
    """``make_sampler`` finds a sampler by its name (``SAMPLERS``): the spec's ``type`` choices and the builders are
    the same names, and each name builds Optuna's sampler of that name."""
    from typing import get_args

    from study.search.space import SAMPLERS
    from trainables.schema.space import SamplerSpec

    names = get_args(SamplerSpec.model_fields["type"].annotation)
    assert set(names) == set(SAMPLERS)
    optuna_class = {"tpe": "TPESampler", "random": "RandomSampler", "cmaes": "CmaEsSampler", "gp": "GPSampler",
                    "qmc": "QMCSampler", "grid": "ConditionalGridSampler"}  # fmt: skip
    space = {"x": {"type": "categorical", "choices": [1, 2]}}
    for name in names:
        spec = SamplerSpec(type=name)
        sampler = make_sampler(spec, {"x": _param(space["x"])})
        assert type(sampler).__name__ == optuna_class[name]


def _param(param: dict) -> object:
    """A search-space entry as the spec parses it."""
    from pydantic import TypeAdapter

    from trainables.schema.space import ParamSpec

    return TypeAdapter(ParamSpec).validate_python(param)
