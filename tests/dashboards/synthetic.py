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


@dataclass
class Synthetic:
    uri: str
    study_dir: Path
    parent_run_id: str
    #: run name → final metrics, and the params / tags it was logged with.
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    params: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)


def ms_recall(p: float, alpha: float, seed: int, subset: str = "all") -> float:
    """Known final Recall@1 of an ``ms`` run: noise hurts, alpha=2 helps, seeds differ a little."""
    clean = 0.05 * p if subset == "clean_only" else 0.0
    return round(0.9 - 0.5 * p + clean + (0.02 if alpha == 2.0 else 0.0) + 0.01 * seed, 6)


def _run(client: MlflowClient, exp: str, parent: str, name: str, tags: dict, params: dict, final: dict,
         status: str = "FINISHED") -> str:
    run = client.create_run(exp, run_name=name, tags={"mlflow.parentRunId": parent, "dmlstudy.role": "trial",
                                                     "trial_id": name, "dataset": "digits", **tags})
    run_id = run.info.run_id
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
    now = int(time.time() * 1000)
    metrics = []
    for key, value in final.items():
        for epoch in range(1, EPOCHS + 1):
            # Curves approach the final value; the last epoch logs it exactly.
            metrics.append(Metric(key, value * (0.7 + 0.15 * (epoch - 1)) if epoch < EPOCHS else value, now, epoch))
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    client.set_terminated(run_id, status=status)
    return run_id


def _tags(family: str, p: float, seed: int, subset: str = "all", kind: str = "uniform") -> dict[str, str]:
    return {"family": family, "noise_kind": kind if p > 0 else "none", "noise_ratio": str(p), "subset": subset,
            "seed": str(seed)}


def _params(family: str, p: float, seed: int, subset: str = "all", **extra: object) -> dict[str, str]:
    return {"family": family, "seed": seed, "dataset.name": "digits", "dataset.noise.ratio": p,
            "dataset.noise.seed": 0, "dataset.subset": subset, "train.epochs": EPOCHS, **extra}


def make_synthetic(tmp_path: Path) -> Synthetic:
    study_dir = tmp_path / NAME
    study_dir.mkdir()
    uri = f"sqlite:///{study_dir / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(NAME, artifact_location=(study_dir / "artifacts").as_uri())
    parent = client.create_run(exp, run_name=NAME, tags={"dmlstudy.role": "study", "study_dir": str(study_dir)})
    pid = parent.info.run_id
    client.log_batch(pid, params=[Param(k, v) for k, v in {
        "search.metric": "recall_at_1", "search.mode": "max", "search.num_trials": "40",
        "search.space.ms_alpha.type": "float", "search.space.ms_alpha.log": "False",
        "search.space.train.optimizer.lr.type": "float", "search.space.train.optimizer.lr.log": "True",
    }.items()])
    syn = Synthetic(uri, study_dir, pid)

    def add(name: str, tags: dict, params: dict, final: dict, status: str = "FINISHED") -> None:
        _run(client, exp, pid, name, tags, params, final, status)
        syn.final[name], syn.params[name], syn.tags[name] = final, params, tags

    # ms: 3 noise ratios × 2 configurations × 2 seeds, plus a topline arm at p = 0.2, 0.4.
    for p in (0.0, 0.2, 0.4):
        for alpha, lr in ((1.0, 1e-3), (2.0, 3e-3)):
            for seed in (0, 1):
                r1 = ms_recall(p, alpha, seed)
                final = {"recall_at_1": r1, "nmi": round(r1 - 0.1, 6), "train/loss": 1.0 + p}
                add(f"ms_p{p}_a{alpha}_s{seed}", _tags("ms", p, seed),
                    _params("ms", p, seed, **{"params.ms_alpha": alpha, "train.optimizer.lr": lr}), final)
    for p in (0.2, 0.4):
        for seed in (0, 1):
            r1 = ms_recall(p, 2.0, seed, "clean_only")
            add(f"ms_top_p{p}_s{seed}", _tags("ms", p, seed, "clean_only"),
                _params("ms", p, seed, "clean_only", **{"params.ms_alpha": 2.0, "train.optimizer.lr": 3e-3}),
                {"recall_at_1": r1, "nmi": round(r1 - 0.1, 6), "train/loss": 1.0})
    # A failed run with a (bogus) high value must not reach the leaderboard.
    add("ms_failed", _tags("ms", 0.2, 5), _params("ms", 0.2, 5, **{"params.ms_alpha": 3.0, "train.optimizer.lr": 1e38}),
        {"recall_at_1": 0.99}, status="FAILED")

    # bspml: a λ_max × μ grid at p = 0.2 with weight statistics; spms (μ = 0 by definition) beside it.
    for lam in (1.0, 3.0):
        for mu in (0.0, 1.0, 5.0):
            final = {"recall_at_1": 0.8 + 0.01 * lam, "nmi": 0.6, "lambda": lam, "maw": 0.5 + 0.1 * lam,
                     "sdaw": round(0.2 / (1 + mu), 6), "w_q10": 0.1, "w_q50": 0.6, "w_q90": 0.95,
                     "excluded_share": 0.15, "noise_auroc": 0.8, "noise_precision": 0.7, "noise_recall": 0.6}
            add(f"bspml_l{lam}_m{mu}", _tags("bspml", 0.2, 0, kind="per_class"),
                _params("bspml", 0.2, 0, **{"params.lambda_max": lam, "params.mu": mu}), final)
    add("spms_l3", _tags("spms", 0.2, 0, kind="per_class"), _params("spms", 0.2, 0, **{"params.lambda_max": 3.0}),
        {"recall_at_1": 0.79, "lambda": 3.0, "maw": 0.8, "sdaw": 0.3, "w_q50": 0.5})
    best_bspml = client.search_runs([exp], "attributes.run_name = 'bspml_l3.0_m0.0'")[0].info.run_id
    # The BSPML family's artifact layout: per-class history and the last per-sample weights.
    epochs, classes = range(1, EPOCHS + 1), range(5)
    table = pl.DataFrame({"epoch": [e for e in epochs for _ in classes], "round": [e for e in epochs for _ in classes],
                          "class": [c for _ in epochs for c in classes], "n": [30] * (EPOCHS * 5),
                          "mean_weight": [0.5 + 0.1 * c - 0.05 * e for e in epochs for c in classes]})
    folder = tmp_path / "weights"
    folder.mkdir()
    table.write_parquet(folder / "class_weights.parquet")
    noisy = np.arange(150) % 5 == 0
    pl.DataFrame({"index": np.arange(150), "label": np.arange(150) % 5, "noisy": noisy,
                  "weight": np.where(noisy, 0.1, 0.9)}).write_parquet(folder / "sample_weights.parquet")
    client.log_artifacts(best_bspml, str(folder), artifact_path="weights")

    # triplet: two mining rules × two noise ratios with the noise-theory quantities.
    for mining, eta in (("random_semihard", 1.5), ("fixed_semihard", 4.0)):
        for p in (0.1, 0.3):
            q_pos, q_neg = round(p * (2 - p), 6), round(p / 4, 6)
            final = {"recall_at_1": 0.7 - p, "q_pos": q_pos, "q_neg": q_neg, "q_pos_obs": round(q_pos + 0.01, 6),
                     "q_neg_obs": round(q_neg - 0.01, 6), "miner_corrupt_neg_share": round(q_neg * eta, 6),
                     "eta_hat": eta, "p_bound_triplet": round(1 - np.sqrt(1 - 1 / eta), 6)}
            add(f"triplet_{mining}_p{p}", _tags("triplet", p, 0),
                _params("triplet", p, 0, **{"params.mining": mining}), final)
    client.set_terminated(pid, "FINISHED")

    # Optuna RDB storage next to it: the objective depends on ms_alpha only.
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    study = optuna.create_study(study_name=NAME, storage=storage, direction="maximize")
    dists = {"ms_alpha": optuna.distributions.FloatDistribution(0.5, 4.0),
             "train.optimizer.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    rng = np.random.default_rng(0)
    for _ in range(12):
        params = {"ms_alpha": float(rng.uniform(0.5, 4.0)), "train.optimizer.lr": float(10 ** rng.uniform(-4, -2))}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=params["ms_alpha"] / 4))
    return syn


def make_running_store(tmp_path: Path) -> tuple[str, str]:
    """A study still running: parent RUNNING, one finished and one running trial."""
    uri = f"sqlite:///{tmp_path / 'live.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("live", artifact_location=(tmp_path / "live_art").as_uri())
    parent = client.create_run(exp, run_name="live", tags={"dmlstudy.role": "study"})
    pid = parent.info.run_id
    client.log_batch(pid, params=[Param("search.num_trials", "8")])
    _run(client, exp, pid, "t1", _tags("ms", 0.0, 0), _params("ms", 0.0, 0), {"recall_at_1": 0.5, "nmi": 0.4})
    _run(client, exp, pid, "t2", _tags("ms", 0.0, 1), _params("ms", 0.0, 1), {"recall_at_1": 0.6}, status="RUNNING")
    return uri, pid
