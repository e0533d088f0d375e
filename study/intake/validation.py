"""A parsed spec checked against what ``trainables`` provides: family, dataset and backbone names, each family's
own parameter rules, the metrics a study can optimise, and every search-space name (resolved at the ends of its
range). The schema (:mod:`trainables.schema.spec`) knows none of these; this module is where the two layers meet.

Names are checked against :mod:`trainables.datasets`, :mod:`~trainables.backbones`, :mod:`~trainables.families.registry`; a family's own rules come
from :func:`trainables.families.registry.get_rules` (each family folder's ``params.py``): none of them imports torch, so no spec error,
and no valid spec's validation, costs a torch import.

Errors are :class:`~trainables.schema.errors.SpecError` built from the offending key and a message; the loader adds where
the spec came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from trainables.backbones import BACKBONE_NAMES, PRETRAINABLE
from trainables.datasets import DATASET_NAMES, ON_DISK_DATASETS, PAIRED_DATASETS, SAME_CLASS_TEST_DATASETS
from trainables.families.registry import FAMILY_NAMES, family_param_names, get_rules
from trainables.metrics.registry import evaluated_names
from trainables.schema.errors import SpecError
from trainables.schema.grid import grid_points
from trainables.schema.metric_names import EPOCH_TIME, EVAL_TIME, LR, TEST_PREFIX, TRAIN_LOSS, VAL_PREFIX
from trainables.schema.spec import CategoricalParam, SearchSpec, StudySpec, condition_holds, param_extremes
from trainables.schema.trial import SPEC_KEY, flatten, resolve_trial_spec, sampled_values

__all__ = [
    "validate_spec",
    "resolve_trial",
    "spec_from_tune_config",
    "family_params",
    "trial_params",
    "check_family_rules",
]


def _known(key: str, what: str, names: Iterable[str]) -> Callable[[str], None]:
    """A check that a value is one of ``names``: ``unknown <what> 'x'; known: a, b`` at ``key``."""
    names = tuple(names)

    def check(value: str) -> None:
        if value not in names:
            raise SpecError(f"unknown {what} {value!r}; known: {', '.join(names)}", key)

    return check


_check_family = _known("family", "family", FAMILY_NAMES)
_check_dataset = _known("dataset.name", "dataset", DATASET_NAMES)
_check_backbone = _known("model.backbone", "backbone", BACKBONE_NAMES)


def validate_spec(spec: StudySpec, *, family_rules: bool = True) -> None:
    """Every registry-backed rule on a study spec (the schema's own rules have run already).

    The name checks come first; ``family_rules=False`` stops there, before the family's rules are loaded: enough
    for a command that only reads the study's stores (``--status``).
    """
    _check_family(spec.family)
    _check_dataset(spec.dataset.name)
    if spec.dataset.name in ON_DISK_DATASETS and spec.dataset.root is None:
        raise SpecError(f"required for dataset {spec.dataset.name!r} (the directory holding it)", "dataset.root")
    _check_backbone(spec.model.backbone)
    if spec.model.pretrained and spec.model.backbone not in PRETRAINABLE:
        raise SpecError(
            f"backbone {spec.model.backbone!r} has no ImageNet weights; use one of {', '.join(PRETRAINABLE)}",
            "model.pretrained",
        )
    _check_linear_probe(spec)
    if not family_rules:
        return
    if "family" not in spec.search.space:  # a family search checks params per sampled family instead
        _in_params(lambda: check_family_rules(spec.family, spec.params, spec.search.space, spec.model.embedding_dim))
    _check_search_metric(spec)
    _check_search_names(spec)


def _in_params(check: Callable[[], None], prefix: str = "") -> None:
    # A family's own rules raise ValueError with a sentence that names the parameter; report it as one line.
    try:
        check()
    except SpecError:
        raise
    except ValueError as e:
        raise SpecError(f"{prefix}{e}") from None


def _check_linear_probe(spec: StudySpec) -> None:
    if not spec.train.linear_probe:
        return
    if spec.dataset.name not in SAME_CLASS_TEST_DATASETS:
        raise SpecError(
            f"train.linear_probe needs a dataset whose test classes are its training classes "
            f"({', '.join(sorted(SAME_CLASS_TEST_DATASETS))}); {spec.dataset.name!r} tests on unseen classes"
        )
    if spec.validation.enabled:
        raise SpecError(
            "validation.kind: class-disjoint validation cannot score a linear probe (it classifies the "
            "training classes); use validation.kind: none with train.linear_probe"
        )


def _check_search_metric(spec: StudySpec) -> None:
    """The searcher sees validation metrics when validation is on, test metrics only with ``kind: none``. What a
    trial reports: the evaluation metrics of :mod:`trainables.metrics.registry` (per the dataset and the probe), the
    loop's training metrics and the family's ``metric_names``."""
    evaluated = evaluated_names(
        spec.train.recall_at,
        paired_test=spec.dataset.name in PAIRED_DATASETS,
        linear_probe=spec.train.linear_probe,
    )
    split = VAL_PREFIX if spec.validation.enabled else TEST_PREFIX
    known = {split + m for m in evaluated} | {TRAIN_LOSS, EPOCH_TIME, EVAL_TIME, LR}
    known |= set(get_rules(spec.family).metric_names)
    metric = spec.search.metric
    if metric in known or metric.startswith("train/"):
        return
    if spec.validation.enabled and metric.startswith(TEST_PREFIX):
        raise SpecError(
            f"search.metric {metric!r} is a test metric but validation.kind is {spec.validation.kind!r}: "
            f"the searcher may only see validation metrics; use {VAL_PREFIX + metric.removeprefix(TEST_PREFIX)!r}"
        )
    bare = metric.removeprefix(VAL_PREFIX).removeprefix(TEST_PREFIX)
    hint = f"; did you mean {split + bare!r}?" if split + bare in known else ""
    raise SpecError(f"search.metric {metric!r} is not reported{hint} (choose one of {sorted(known)})")


# ------------------------------------------------------------------------------------------ family params


def family_params(family: str, values: dict[str, Any]) -> Any:
    """The family's frozen ``Params`` built from ``values`` (unknown names and bad values: ``ValueError``)."""
    return get_rules(family).parse_params(values)


def check_family_rules(family: str, params: dict[str, Any], space: dict[str, Any], embedding_dim: int) -> None:
    """The family's own rules on a spec: its params (names, types, per-value bounds), then ``check_spec`` on the
    extremes the fixed values and searched ranges can reach, and ``check_model`` on the embedding size."""
    cls = get_rules(family)
    fixed = family_params(family, params)
    extremes = {
        name: param_extremes(space[name]) if name in space else [getattr(fixed, name)] for name in cls.param_names()
    }
    cls.check_spec(fixed, extremes)
    cls.check_model(fixed, embedding_dim)


def trial_params(spec: StudySpec) -> dict[str, Any]:
    """A trial's full flattened config (family defaults filled in), as logged to MLflow."""
    tree = spec.model_dump(mode="json", include={"family", "seed", "dataset", "model", "train", "validation"})
    tree["params"] = dataclasses.asdict(family_params(spec.family, spec.params))
    return flatten(tree)


def resolve_trial(spec: StudySpec | dict[str, Any], sampled: dict[str, Any]) -> StudySpec:
    """A trial's spec, with its family's params validated (the driver-side twin of the trainable's parse)."""
    trial = resolve_trial_spec(spec, sampled, family_param_names)
    _check_family(trial.family)
    _in_params(lambda: family_params(trial.family, trial.params))
    return trial


# ---------------------------------------------------------------------------------------- search space


def _check_search_names(spec: StudySpec) -> None:
    """Every search-space name must point at a real key: resolve a trial at each range's ends."""
    space = spec.search.space
    if spec.search.sampler.type == "grid":
        _check_grid(spec.search)
    if not space:
        return
    family_param = space.get("family")
    families = list(family_param.choices) if isinstance(family_param, CategoricalParam) else [spec.family]
    if "family" in space:
        _check_params_shared(spec.params, families)
        _check_each_family(spec, families)

    def probe(end: int, fixed: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, p in space.items():
            if name in fixed:
                values[name] = fixed[name]
            elif condition_holds(p.when, values):
                values[name] = p.choices[end] if isinstance(p, CategoricalParam) else (p.low if end == 0 else p.high)
        return values

    # Each range's ends; with a family search, once per sampled family (each must accept the params it gets).
    fixings = [{"family": f} for f in families] if "family" in space else [{}]
    for probe_values in (probe(end, fixed) for end in (0, -1) for fixed in fixings):
        try:
            resolve_trial(spec, probe_values)
        except SpecError as e:
            raise SpecError(e.message, f"search.space: {e.key}" if e.key else "search.space") from None


def _check_params_shared(params: dict[str, Any], families: list[Any]) -> None:
    """With ``family`` searched, each fixed param must belong to at least one of the sampled families."""
    unknown = [f for f in families if f not in FAMILY_NAMES]
    if unknown:
        raise SpecError(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILY_NAMES)}", "search.space.family")
    known = {n for f in families for n in get_rules(f).param_names()}
    for name in params:
        if name not in known:
            raise SpecError(f"params.{name} is not a parameter of any family in search.space.family")


def _check_each_family(spec: StudySpec, families: list[Any]) -> None:
    """With ``family`` searched, each sampled family's rules on the fixed params it keeps and the ranges of its
    own searched params."""
    for name in families:
        own = set(get_rules(name).param_names())
        params = {k: v for k, v in spec.params.items() if k in own}
        space = {k: p for k, p in spec.search.space.items() if k in own}
        _in_params(partial(check_family_rules, name, params, space, spec.model.embedding_dim), f"family {name}: ")


def _check_grid(search: SearchSpec) -> None:
    """The grid sampler enumerates categorical choices (``when:`` allowed); other kinds have no grid."""
    if not search.space:
        raise SpecError("sampler 'grid' needs categorical parameters in search.space, and it has none")
    for name, p in search.space.items():
        if not isinstance(p, CategoricalParam):
            raise SpecError("sampler 'grid' needs categorical parameters", f"search.space.{name}")
    size = len(grid_points(search.space))
    if search.num_trials > size:
        raise SpecError(f"search.num_trials={search.num_trials} exceeds the {size} points of the grid")


def spec_from_tune_config(config: dict[str, Any]) -> StudySpec:
    """A trial's spec from its Ray Tune config (search or final stage; see :mod:`trainables.schema.trial`)."""
    return resolve_trial(config[SPEC_KEY], sampled_values(config))
