from __future__ import annotations

import copy
from pathlib import Path

import pytest

from study.intake.spec_reader import apply_overrides, load_spec, parse_spec
from study.intake.validation import family_params, trial_params
from study.intake.validation import resolve_trial as resolve_trial_spec
from trainables.schema.errors import SpecError
from trainables.schema.trial import param_path


def _mutate(spec: dict, path: str, value) -> dict:
    spec = copy.deepcopy(spec)
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return spec


MALFORMED = [
    # (dotted path, value, expected fragment of the one-line message)
    ("train.epoch", 3, "unknown key 'train.epoch'"),
    ("dataset.noize", {"kind": "uniform"}, "unknown key 'dataset.noize'"),
    ("train.epochs", "many", "train.epochs"),
    ("train.epochs", 0, "train.epochs"),
    ("family", "nope", "unknown family 'nope'"),
    ("dataset.name", "imagenet22k", "unknown dataset 'imagenet22k'"),
    ("search.sampler.type", "annealing", "search.sampler.type"),
    ("search.space.ms_alpha", {"type": "float", "low": 3.0, "high": 1.0}, "low <= high must hold"),
    ("search.space.ms_alpha", {"type": "float", "low": 0.0, "high": 1.0, "log": True}, "log: true needs low > 0"),
    (
        "search.space.ms_alpha",
        {"type": "float", "low": 0.1, "high": 1.0, "log": True, "step": 0.1},
        "cannot be combined",
    ),
    ("search.space.ms_alpha", {"type": "gaussian", "low": 0.1, "high": 1.0}, "must be one of float, int, categorical"),
    ("search.space.ms_alpha", {"type": "categorical", "choices": []}, "search.space.ms_alpha.choices"),
    ("search.space.no_such_param", {"type": "float", "low": 0.1, "high": 1.0}, "params.no_such_param"),
    ("search.space.train.optimiser.lr", {"type": "float", "low": 0.1, "high": 1.0}, "unknown key 'train.optimiser'"),
    ("params.ms_gamma", 1.0, "unknown parameter params.ms_gamma"),
    ("params.ms_alpha", "big", "params.ms_alpha"),
    ("search.metric", "recall@1", "search.metric 'recall@1' is not reported"),
    ("dataset.noise.ratio", 1.5, "dataset.noise.ratio"),
    ("name", "has space", "name"),
    ("resources.cpu", 0, "resources.cpu"),
]


@pytest.mark.parametrize(("path", "value", "fragment"), MALFORMED, ids=[f"{p}={v}" for p, v, _ in MALFORMED])
def test_malformed_spec_gives_one_line_naming_the_key(spec_dict, path, value, fragment):
    if path.startswith("search.space."):
        spec = copy.deepcopy(spec_dict)
        spec["search"]["space"][path.removeprefix("search.space.")] = value
    else:
        spec = _mutate(spec_dict, path, value)
    with pytest.raises(SpecError) as info:
        parse_spec(spec, "s.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("s.yaml: ")
    assert fragment in message


def test_missing_family_and_not_a_mapping(spec_dict):
    spec = copy.deepcopy(spec_dict)
    del spec["family"]
    with pytest.raises(SpecError, match="missing required key 'family'"):
        parse_spec(spec)
    with pytest.raises(SpecError, match="must be a YAML mapping"):
        parse_spec(["a", "b"])


def test_invalid_yaml_and_missing_file(write_spec, tmp_path):
    with pytest.raises(SpecError, match=r"invalid YAML at line \d"):
        load_spec(write_spec("name: x\nfamily: [ms\n"))
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "absent.yaml")


_MERGED = """
name: t_study
family: ms
dataset: {name: digits}
train: {epochs: 2, classes_per_batch: 5, samples_per_class: 4}
validation: {kind: none}
final: {seeds: 0}
search:
  num_trials: 2
  space:
    ms_alpha: &range {type: float, low: 1.0, high: 3.0}
    ms_beta: &beta {<<: *range, low: 20.0, high: 80.0, log: true}
    ms_base: {<<: [*beta, *range], high: 90.0}
"""


def test_yaml_merge_keys_are_read_as_yaml_defines_them(write_spec):
    """``<<`` merges (issue 60): a key written beside a merge overrides it, an earlier mapping of a merge list overrides
    a later one, and a mapping merged again keeps its own overrides (PyYAML 6.0.4 alone gives ``ms_base.low`` 1.0)."""
    space = load_spec(write_spec(_MERGED)).search.space
    expected = {
        "ms_alpha": {"type": "float", "low": 1.0, "high": 3.0},
        "ms_beta": {"type": "float", "low": 20.0, "high": 80.0, "log": True},
        "ms_base": {"type": "float", "low": 20.0, "high": 90.0, "log": True},
    }
    for name, want in expected.items():
        got = space[name].model_dump()
        assert {k: got[k] for k in want} == want, name


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (_MERGED.replace("high: 90.0}", "high: 90.0, high: 91.0}"), r"line 13: duplicate key 'high'"),
        (_MERGED.replace("log: true}", "log: true, low: 2.0}"), r"line 12: duplicate key 'low'"),
        (_MERGED.replace("[*beta, *range]", "3"), r"line 13: << takes a mapping, not scalar"),
    ],
)
def test_yaml_merge_keys_still_refuse_duplicates_and_non_mappings(write_spec, text, fragment):
    with pytest.raises(SpecError, match=fragment):
        load_spec(write_spec(text))


def test_condition_must_refer_to_earlier_categorical_value(spec_dict):
    spec = copy.deepcopy(spec_dict)
    spec["search"]["space"] = {
        "train.optimizer.name": {"type": "categorical", "choices": ["sgd", "adam"]},
        "train.optimizer.momentum": {
            "type": "float",
            "low": 0.0,
            "high": 0.9,
            "when": {"train.optimizer.name": "rmsprop"},
        },
    }
    with pytest.raises(SpecError, match="never takes"):
        parse_spec(spec)
    spec["search"]["space"]["train.optimizer.momentum"]["when"] = {"later": 1}
    with pytest.raises(SpecError, match="not an earlier parameter"):
        parse_spec(spec)


def test_defaults_and_family_params(spec_dict):
    spec = parse_spec(spec_dict)
    assert spec.search.sampler.type == "tpe"
    params = family_params(spec.family, spec.params)
    assert (params.ms_alpha, params.ms_beta, params.ms_base, params.ms_epsilon) == (2.0, 50.0, 1.0, 0.1)
    flat = trial_params(spec)
    assert flat["params.ms_beta"] == 50.0 and flat["train.optimizer.lr"] == 1e-3 and flat["family"] == "ms"


def test_overrides_are_typed_by_the_schema(spec_dict, write_spec):
    path = write_spec(spec_dict)
    spec = load_spec(
        path, ["train.epochs=7", "dataset.noise.kind=uniform", "dataset.noise.ratio=0.2", "params.ms_beta=40"]
    )
    assert spec.train.epochs == 7 and isinstance(spec.train.epochs, int)
    assert spec.dataset.noise.ratio == pytest.approx(0.2)
    assert family_params(spec.family, spec.params).ms_beta == 40.0
    with pytest.raises(SpecError, match="unknown key 'train.epoch'"):
        load_spec(path, ["train.epoch=7"])
    with pytest.raises(SpecError, match="expected dotted.key=value"):
        apply_overrides({}, ["train.epochs"])


def test_resolve_trial_spec_writes_sampled_values_at_their_paths(spec_dict):
    spec = parse_spec(spec_dict)
    trial = resolve_trial_spec(spec, {"ms_alpha": 2.5, "train.optimizer.lr": 0.01, "seed": 3})
    assert family_params(trial.family, trial.params).ms_alpha == 2.5
    assert trial.train.optimizer.lr == 0.01
    assert trial.seed == 3
    assert param_path("mu") == ("params", "mu") and param_path("model.embedding_dim") == ("model", "embedding_dim")
    with pytest.raises(SpecError):
        resolve_trial_spec(spec, {"train.epochs": -1})


SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
SHIPPED = sorted(SPACES.rglob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(SPACES).with_suffix("")))
def test_every_shipped_spec_validates(path):
    """Paper specs name datasets that are absent here; validation never touches the data. A study in a folder of
    studies read together (``noise_grid_glyphs/ms.yaml``) is named ``<folder>_<file>``."""
    from study.intake.load import load_plan

    plan = load_plan(path)  # a table: every cell's spec
    assert plan.name == (path.stem if path.parent == SPACES else f"{path.parent.name}_{path.stem}")
