"""Synthetic MLflow stores with known numbers for every dashboard panel (no training, no Ray)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
import polars as pl
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

EPOCHS = 3
NAME = "synth"
#: Final-stage seeds of each ms group, and how far each seed's test Recall@1 lands from the group's base value.
FINAL_OFFSETS = (0.0, 0.013, -0.006)
#: Tags of a search trial of a k-fold study (study/search/driver.py ``describe_trial``).
#: Last-epoch values of the noise detectors on the bspml runs (the triplet runs log these minus their noise ratio).
DETECTORS = {
    "noise/xi_auroc": 0.9,
    "noise/xi_ap": 0.6,
    "noise/centroid_auroc": 0.85,
    "noise/centroid_ap": 0.55,
    "noise/knn_auroc": 0.8,
    "noise/knn_ap": 0.5,
}
SEARCH_TAGS = {"stage": "search", "validation": "kfold", "val_labels": "noisy", "selection": "validation"}


@dataclass
class Synthetic:
    uri: str
    study_dir: Path
    parent_run_id: str
    #: run name → final metrics, and the params / tags it was logged with.
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    params: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)


def ms_recall(p: float, alpha: float, seed: int, subset: str = "all") -> float:
    """Known final validation Recall@1 of an ``ms`` search run: noise hurts, alpha=2 helps, seeds differ a little."""
    clean = 0.05 * p if subset == "clean_only" else 0.0
    return round(0.9 - 0.5 * p + clean + (0.02 if alpha == 2.0 else 0.0) + 0.01 * seed, 6)


def ms_test(p: float, alpha: float, seed: int, subset: str = "all") -> float:
    """Its test Recall@1 (the fold ensemble): lower than validation and not in quite the same order."""
    return round(ms_recall(p, alpha, seed, subset) - 0.08 + (0.012 if (seed + int(alpha)) % 2 else 0.0), 6)


def final_recall(p: float, seed: int, subset: str = "all") -> float:
    """Test Recall@1 of a final-stage run of the ms group at ``p``: the winning configuration, retrained."""
    return round(ms_test(p, 2.0, 1, subset) + 0.01 + FINAL_OFFSETS[seed], 6)


def final_group(p: float, subset: str = "all") -> str:
    return f"family=ms, dataset.noise.ratio={p}, dataset.subset={subset}"


def _run(
    client: MlflowClient,
    exp: str,
    parent: str,
    name: str,
    tags: dict,
    params: dict,
    final: dict,
    status: str = "FINISHED",
) -> str:
    run = client.create_run(
        exp,
        run_name=name,
        tags={"mlflow.parentRunId": parent, "dmlstudy.role": "trial", "trial_id": name, "dataset": "digits", **tags},
    )
    run_id = run.info.run_id
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
    now = int(time.time() * 1000)
    # A search trial of a k-fold study reports its test metrics (the fold ensemble) at the last epoch only.
    last_only = tags.get("stage") == "search" and tags.get("validation") in ("kfold", "holdout")
    metrics = []
    for key, value in final.items():
        for epoch in range(1, EPOCHS + 1):
            if last_only and key.startswith("test/") and epoch < EPOCHS:
                continue
            # Curves approach the final value; the last epoch logs it exactly.
            metrics.append(Metric(key, value * (0.7 + 0.15 * (epoch - 1)) if epoch < EPOCHS else value, now, epoch))
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    client.set_terminated(run_id, status=status)
    return run_id


def _tags(family: str, p: float, seed: int, subset: str = "all", kind: str = "uniform", **extra: str) -> dict[str, str]:
    return {
        "family": family,
        "noise_kind": kind if p > 0 else "none",
        "noise_ratio": str(p),
        "subset": subset,
        "seed": str(seed),
        **SEARCH_TAGS,
        **extra,
    }


def _params(family: str, p: float, seed: int, subset: str = "all", **extra: object) -> dict[str, str]:
    return {
        "family": family,
        "seed": seed,
        "dataset.name": "digits",
        "dataset.noise.ratio": p,
        "dataset.noise.seed": 0,
        "dataset.subset": subset,
        "train.epochs": EPOCHS,
        "validation.kind": "kfold",
        **extra,
    }


def make_synthetic(tmp_path: Path) -> Synthetic:
    """A finished k-fold study: search runs with ``val/`` metrics every epoch and the fold ensemble's ``test/`` at the
    last, and a final stage (3 seeds, plus a failed one) for each ms group."""
    study_dir = tmp_path / NAME
    study_dir.mkdir()
    uri = f"sqlite:///{study_dir / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(NAME, artifact_location=(study_dir / "artifacts").as_uri())
    parent = client.create_run(
        exp,
        run_name=NAME,
        tags={
            "dmlstudy.role": "study",
            "study_dir": str(study_dir),
            "selection": "validation",
            "validation": "kfold",
            "val_labels": "noisy",
            "stage": "done",
        },
    )
    pid = parent.info.run_id
    client.log_batch(
        pid,
        params=[
            Param(k, v)
            for k, v in {
                "search.metric": "val/recall_at_1",
                "search.mode": "max",
                "search.num_trials": "40",
                "search.space.ms_alpha.type": "float",
                "search.space.ms_alpha.log": "False",
                "search.space.train.optimizer.lr.type": "float",
                "search.space.train.optimizer.lr.log": "True",
                "validation.kind": "kfold",
                "validation.folds": "4",
                "final.seeds": "3",
            }.items()
        ],
    )
    syn = Synthetic(uri, study_dir, pid)

    def add(name: str, tags: dict, params: dict, final: dict, status: str = "FINISHED") -> None:
        _run(client, exp, pid, name, tags, params, final, status)
        syn.final[name], syn.params[name], syn.tags[name], syn.status[name] = final, params, tags, status

    def ms_metrics(p: float, alpha: float, seed: int, subset: str = "all") -> dict[str, float]:
        r1, t1 = ms_recall(p, alpha, seed, subset), ms_test(p, alpha, seed, subset)
        return {
            "val/recall_at_1": r1,
            "val/nmi": round(r1 - 0.1, 6),
            "val/spectral_decay": 0.3 + p,
            "test/recall_at_1": t1,
            "test/nmi": round(t1 - 0.1, 6),
            "train/loss": 1.0 + p,
        }

    # ms: 3 noise ratios × 2 configurations × 2 seeds, plus a topline arm at p = 0.2, 0.4.
    for p in (0.0, 0.2, 0.4):
        for alpha, lr in ((1.0, 1e-3), (2.0, 3e-3)):
            for seed in (0, 1):
                add(
                    f"ms_p{p}_a{alpha}_s{seed}",
                    _tags("ms", p, seed),
                    _params("ms", p, seed, **{"params.ms_alpha": alpha, "train.optimizer.lr": lr}),
                    ms_metrics(p, alpha, seed),
                )
    for p in (0.2, 0.4):
        for seed in (0, 1):
            add(
                f"ms_top_p{p}_s{seed}",
                _tags("ms", p, seed, "clean_only"),
                _params("ms", p, seed, "clean_only", **{"params.ms_alpha": 2.0, "train.optimizer.lr": 3e-3}),
                ms_metrics(p, 2.0, seed, "clean_only"),
            )
    # A failed run with a (bogus) high value must not reach the leaderboard.
    add(
        "ms_failed",
        _tags("ms", 0.2, 5),
        _params("ms", 0.2, 5, **{"params.ms_alpha": 3.0, "train.optimizer.lr": 1e38}),
        {"val/recall_at_1": 0.99, "test/recall_at_1": 0.99},
        status="FAILED",
    )

    # The final stage (final.group_by: family, dataset.noise.ratio, dataset.subset): each ms group's best search
    # trial (alpha = 2, seed 1) retrained with seeds 0, 1, 2; test metrics every epoch, no val/ metric.
    for p, subset in ((0.0, "all"), (0.2, "all"), (0.4, "all"), (0.2, "clean_only"), (0.4, "clean_only")):
        source = f"ms_p{p}_a2.0_s1" if subset == "all" else f"ms_top_p{p}_s1"
        for seed in range(len(FINAL_OFFSETS)):
            r1 = final_recall(p, seed, subset)
            add(
                f"final_{source}_s{seed}",
                _tags(
                    "ms",
                    p,
                    seed,
                    subset,
                    stage="final",
                    validation="none",
                    group=final_group(p, subset),
                    source_trial=source,
                ),
                _params("ms", p, seed, subset, **{"params.ms_alpha": 2.0, "train.optimizer.lr": 3e-3}),
                {
                    "test/recall_at_1": r1,
                    "test/nmi": round(r1 - 0.1, 6),
                    "test/map_at_r": round(r1 - 0.3, 6),
                    "test/spectral_decay": 0.3 + p,
                    "train/loss": 0.9 + p,
                },
            )
    # A failed final run: its (bogus) value must not enter the interval.
    add(
        "final_ms_p0.2_failed",
        _tags("ms", 0.2, 7, stage="final", validation="none", group=final_group(0.2), source_trial="ms_p0.2_a2.0_s1"),
        _params("ms", 0.2, 7, **{"params.ms_alpha": 2.0, "train.optimizer.lr": 3e-3}),
        {"test/recall_at_1": 0.01},
        status="FAILED",
    )

    # bspml: a λ_max × μ grid at p = 0.2 with weight statistics; spms (μ = 0 by definition) beside it.
    for lam in (1.0, 3.0):
        for mu in (0.0, 1.0, 5.0):
            final = {
                "val/recall_at_1": 0.8 + 0.01 * lam,
                "val/nmi": 0.6,
                "test/recall_at_1": 0.7 + 0.02 * lam,
                "test/nmi": 0.5 + 0.01 * mu,
                "lambda": lam,
                "maw": 0.5 + 0.1 * lam,
                "sdaw": round(0.2 / (1 + mu), 6),
                "w_q10": 0.1,
                "w_q50": 0.6,
                "w_q90": 0.95,
                "excluded_share": 0.15,
                "noise_auroc": 0.8,
                "noise_precision": 0.7,
                "noise_recall": 0.6,
                **DETECTORS,
            }
            add(
                f"bspml_l{lam}_m{mu}",
                _tags("bspml", 0.2, 0, kind="per_class"),
                _params("bspml", 0.2, 0, **{"params.lambda_max": lam, "params.mu": mu}),
                final,
            )
    add(
        "spms_l3",
        _tags("spms", 0.2, 0, kind="per_class"),
        _params("spms", 0.2, 0, **{"params.lambda_max": 3.0}),
        {"val/recall_at_1": 0.79, "test/recall_at_1": 0.69, "lambda": 3.0, "maw": 0.8, "sdaw": 0.3, "w_q50": 0.5},
    )
    best_bspml = client.search_runs([exp], "attributes.run_name = 'bspml_l3.0_m0.0'")[0].info.run_id
    # The BSPML family's artifact layout: per-class history and the last per-sample weights.
    epochs, classes = range(1, EPOCHS + 1), range(5)
    table = pl.DataFrame(
        {
            "epoch": [e for e in epochs for _ in classes],
            "round": [e for e in epochs for _ in classes],
            "class": [c for _ in epochs for c in classes],
            "n": [30] * (EPOCHS * 5),
            "mean_weight": [0.5 + 0.1 * c - 0.05 * e for e in epochs for c in classes],
        }
    )
    folder = tmp_path / "weights"
    folder.mkdir()
    table.write_parquet(folder / "class_weights.parquet")
    noisy = np.arange(150) % 5 == 0
    pl.DataFrame(
        {"index": np.arange(150), "label": np.arange(150) % 5, "noisy": noisy, "weight": np.where(noisy, 0.1, 0.9)}
    ).write_parquet(folder / "sample_weights.parquet")
    client.log_artifacts(best_bspml, str(folder), artifact_path="weights")

    # triplet: two mining rules × two noise ratios with the noise-theory quantities.
    for mining, eta in (("random_semihard", 1.5), ("fixed_semihard", 4.0)):
        for p in (0.1, 0.3):
            q_pos, q_neg = round(p * (2 - p), 6), round(p / 4, 6)
            final = {
                "val/recall_at_1": round(0.7 - p + (0.01 if eta > 2 else 0.0), 6),
                "test/recall_at_1": round(0.66 - p + (0.05 if eta > 2 else 0.0), 6),
                "q_pos": q_pos,
                "q_neg": q_neg,
                "q_pos_obs": round(q_pos + 0.01, 6),
                "q_neg_obs": round(q_neg - 0.01, 6),
                "miner_corrupt_neg_share": round(q_neg * eta, 6),
                "eta_hat": eta,
                "p_bound_triplet": round(1 - np.sqrt(1 - 1 / eta), 6),
                **{k: round(v - p, 6) for k, v in DETECTORS.items()},
            }
            add(
                f"triplet_{mining}_p{p}",
                _tags("triplet", p, 0),
                _params("triplet", p, 0, **{"params.mining": mining}),
                final,
            )
    client.set_terminated(pid, "FINISHED")

    # Optuna RDB storage next to it: the objective depends on ms_alpha only.
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    study = optuna.create_study(study_name=NAME, storage=storage, direction="maximize")
    dists = {
        "ms_alpha": optuna.distributions.FloatDistribution(0.5, 4.0),
        "train.optimizer.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
    }
    rng = np.random.default_rng(0)
    for _ in range(12):
        params = {"ms_alpha": float(rng.uniform(0.5, 4.0)), "train.optimizer.lr": float(10 ** rng.uniform(-4, -2))}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=params["ms_alpha"] / 4))
    return syn


def make_running_store(tmp_path: Path) -> tuple[str, str]:
    """A study still running that selects on the test classes (``validation.kind: none``): parent RUNNING, one
    finished and one running trial, both with ``test/`` metrics every epoch."""
    uri = f"sqlite:///{tmp_path / 'live.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("live", artifact_location=(tmp_path / "live_art").as_uri())
    parent = client.create_run(
        exp,
        run_name="live",
        tags={"dmlstudy.role": "study", "selection": "test", "validation": "none", "stage": "search"},
    )
    pid = parent.info.run_id
    client.log_batch(pid, params=[Param("search.num_trials", "8"), Param("search.metric", "test/recall_at_1")])
    none = {"validation": "none", "selection": "test"}
    _run(
        client,
        exp,
        pid,
        "t1",
        _tags("ms", 0.0, 0, **none),
        _params("ms", 0.0, 0),
        {"test/recall_at_1": 0.5, "test/nmi": 0.4},
    )
    _run(
        client,
        exp,
        pid,
        "t2",
        _tags("ms", 0.0, 1, **none),
        _params("ms", 0.0, 1),
        {"test/recall_at_1": 0.6},
        status="RUNNING",
    )
    return uri, pid
