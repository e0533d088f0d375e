"""The metric registry is what the metric functions compute: every declared name has its function, every metric
function of :mod:`trainables.metrics.retrieval` and :mod:`~trainables.metrics.contrastive` is registered, each returns
exactly its names, and a trial's evaluation reports exactly the names the spec layer accepts (``study.intake.validation``
reads the registry, never the functions)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.metrics import contrastive, registry, retrieval
from trainables.metrics.registry import EVALUATION_METRICS, RECALL_AT_K, evaluated_names, registered
from trainables.schema.metric_names import recall_at

#: The modules whose public functions compute metrics, and the one that computes none of its own: the composite the
#: loop calls (checked against the registry below).
_COMPUTING = (retrieval, contrastive)
_HELPERS = {"retrieval_metrics"}


def _clusters(n: int = 60, d: int = 8, classes: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), n // classes)
    x = rng.normal(size=(classes, d))[labels] + 0.3 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def test_every_declared_metric_has_a_function_and_every_metric_function_is_registered():
    functions = registered()
    assert set(functions) == set(EVALUATION_METRICS)
    public = {name for m in _COMPUTING for name in m.__all__ if inspect.isfunction(getattr(m, name))}
    assert {f.__name__ for f in functions.values()} == public - _HELPERS
    with pytest.raises(KeyError, match="not declared"):
        registry.computes("recall_at_one")


def test_each_function_returns_exactly_the_names_it_is_registered_under():
    x, labels = _clusters()
    t = torch.as_tensor(x)
    calls = {
        "recall_at_k": lambda: retrieval.recall_at_k(x, labels, (1, 2)),
        "map_at_r_and_r_precision": lambda: retrieval.map_at_r_and_r_precision(x, labels),
        "nmi": lambda: retrieval.nmi(x, labels),
        "spectral_decay": lambda: retrieval.spectral_decay(x),
        "paired_metrics": lambda: contrastive.paired_metrics(t, t.flip(0)),
        "linear_probe_accuracy": lambda: contrastive.linear_probe_accuracy(t, labels, t, labels, max_iter=5),
    }
    by_function: dict[str, set[str]] = {}
    for name, fn in registered().items():
        by_function.setdefault(fn.__name__, set()).add(name)
    assert set(calls) == set(by_function)
    for fn_name, names in by_function.items():
        out = calls[fn_name]()
        if isinstance(out, float):  # one number: the function is registered under one name
            assert len(names) == 1, fn_name
        elif names == {RECALL_AT_K}:
            assert set(out) == {recall_at(1), recall_at(2)}
        else:
            assert set(out) == names, fn_name


def test_retrieval_metrics_reports_the_names_every_evaluation_has():
    x, labels = _clusters()
    out = retrieval.retrieval_metrics(x, labels, (1, 4))
    assert set(out) == evaluated_names((1, 4), paired_test=False, linear_probe=False)


def test_a_trials_evaluation_reports_exactly_the_registered_names():
    spec = parse_spec(
        {
            "name": "registry",
            "family": "ms",
            "validation": {"kind": "none"},
            "dataset": {"name": "digits"},
            "train": {"epochs": 1, "classes_per_batch": 4, "samples_per_class": 4, "recall_at": [1, 2]},
        }
    )
    assert set(TrialRun.single(spec).member.evaluate()) == evaluated_names(
        (1, 2), paired_test=False, linear_probe=False
    )


def test_a_paired_trial_also_reports_the_paired_metrics(tmp_path, monkeypatch):
    """flows2d (:data:`trainables.datasets.PAIRED_DATASETS`): the Table 1 metrics the thesis spec may optimise."""
    from tests.trainables.test_flows2d import TINY
    from trainables.data import flows2d

    monkeypatch.setattr(flows2d, "DEFAULT_FLOWS", TINY)
    spec = parse_spec(
        {
            "name": "registry",
            "family": "kl_contrastive",
            "validation": {"kind": "none"},
            "dataset": {"name": "flows2d", "root": str(tmp_path)},
            "model": {"backbone": "paired_mlp", "embedding_dim": 2},
            "train": {"epochs": 1, "classes_per_batch": 8, "samples_per_class": 4, "recall_at": [1]},
        }
    )
    assert set(TrialRun.single(spec).member.evaluate()) == evaluated_names((1,), paired_test=True, linear_probe=False)
