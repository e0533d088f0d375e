"""The evaluation metrics a trial reports, by name, and the function that computes each (in
:mod:`~trainables.metrics.retrieval` or :mod:`~trainables.metrics.contrastive`): a registry the spec layer reads
without importing torch or faiss.

As pytorch-metric-learning's ``AccuracyCalculator`` derives its metric list from its ``calculate_*`` methods, the
names here are the ones the metric functions are registered under (:func:`computes`), so the list that
validation accepts (``search.metric``) cannot drift from what is computed:
``tests/trainables/metrics/test_metric_registry.py``
checks that every declared name has a function, that every metric function is registered, and that each returns
exactly its names. What a name needs (a paired test split, ``train.linear_probe``) is declared beside it, as Roth
et al.'s metrics declare ``requires``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

from trainables.schema.metric_names import (
    ACC1,
    ACC5,
    MAP_AT_R,
    NMI,
    PAIRED_COSINE,
    PAIRED_MAE,
    R_PRECISION,
    SPECTRAL_DECAY,
    recall_at,
)

__all__ = ["RECALL_AT_K", "EVALUATION_METRICS", "Reported", "computes", "registered", "evaluated_names"]

F = TypeVar("F", bound=Callable[..., object])

#: Recall@k's registry key: one reported name per ``train.recall_at`` k, ``recall_at(k)``.
RECALL_AT_K = "recall_at_k"


@dataclass(frozen=True)
class Reported:
    """When a trial reports a metric: ``always`` (every evaluation), ``paired_test`` (the test split pairs two views
    of each sample: :data:`trainables.datasets.PAIRED_DATASETS`) or ``linear_probe`` (``train.linear_probe``)."""

    requires: Literal["always", "paired_test", "linear_probe"] = "always"


#: Every evaluation metric, unprefixed (a trial reports each under ``val/`` or ``test/``).
EVALUATION_METRICS: dict[str, Reported] = {
    RECALL_AT_K: Reported(),
    MAP_AT_R: Reported(),
    R_PRECISION: Reported(),
    NMI: Reported(),
    SPECTRAL_DECAY: Reported(),
    PAIRED_MAE: Reported("paired_test"),
    PAIRED_COSINE: Reported("paired_test"),
    ACC1: Reported("linear_probe"),
    ACC5: Reported("linear_probe"),
}

_FUNCTIONS: dict[str, Callable[..., object]] = {}


def computes(*names: str) -> Callable[[F], F]:
    """Register the decorated metric function as the one computing ``names``."""
    unknown = [n for n in names if n not in EVALUATION_METRICS]
    if unknown:
        raise KeyError(f"metric {unknown[0]!r} is not declared in EVALUATION_METRICS")

    def register(fn: F) -> F:
        for name in names:
            known = _FUNCTIONS.get(name)
            if known is not None and (known.__module__, known.__qualname__) != (fn.__module__, fn.__qualname__):
                raise KeyError(f"metric {name!r} is computed by {_FUNCTIONS[name].__name__} already")
            _FUNCTIONS[name] = fn
        return fn

    return register


def registered() -> dict[str, Callable[..., object]]:
    """Name → function, for what the computing modules registered (import :mod:`~trainables.metrics.retrieval` and
    :mod:`~trainables.metrics.contrastive` first)."""
    return dict(_FUNCTIONS)


def evaluated_names(recall_ks: Iterable[int], *, paired_test: bool, linear_probe: bool) -> set[str]:
    """The unprefixed evaluation metrics a trial reports with these Recall@k and requirements."""
    met = {"always": True, "paired_test": paired_test, "linear_probe": linear_probe}
    out = {name for name, r in EVALUATION_METRICS.items() if met[r.requires] and name != RECALL_AT_K}
    return out | {recall_at(k) for k in recall_ks}
