"""Names of the metrics the trainables report, the tuner optimises and the dashboards read.

MLflow accepts alphanumerics, ``_ - . /`` and spaces in metric names, so there is no ``@`` anywhere.
"""

from __future__ import annotations

__all__ = [
    "EPOCH",
    "NMI",
    "OBJECTIVE",
    "TRAIN_LOSS",
    "TRAIN_LOSS_PREFIX",
    "EPOCH_TIME",
    "EVAL_TIME",
    "recall_at",
    "metric_names_for",
    "ARTIFACTS_DIR",
    "LAMBDA", "MAW", "SDAW", "W_Q10", "W_Q50", "W_Q90", "EXCLUDED_SHARE",
    "NOISE_AUROC", "NOISE_PRECISION", "NOISE_RECALL",
    "Q_POS", "Q_NEG", "Q_POS_OBS", "Q_NEG_OBS", "MINER_CORRUPT_NEG_SHARE", "ETA_HAT", "P_BOUND_TRIPLET",
]

#: Folder inside a trial checkpoint whose files become MLflow artifacts of the trial's run.
ARTIFACTS_DIR = "artifacts"

EPOCH = "epoch"
NMI = "nmi"
TRAIN_LOSS = "train/loss"
TRAIN_LOSS_PREFIX = "train/loss/"
EPOCH_TIME = "epoch_time_s"
EVAL_TIME = "eval_time_s"


def recall_at(k: int) -> str:
    """Name of Recall@k: a test sample scores 1 if one of its k nearest neighbours shares its class."""
    return f"recall_at_{k}"


OBJECTIVE = recall_at(1)


def metric_names_for(recall_ks: tuple[int, ...], family_metrics: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every per-epoch metric a trial reports, given its Recall@k list and its family's own metrics."""
    return (*(recall_at(k) for k in recall_ks), NMI, TRAIN_LOSS, EPOCH_TIME, EVAL_TIME, *family_metrics)


# Self-paced sample weights (BSPML; MAW/SDAW are Eq. 14 over classes of the training labels).
LAMBDA = "lambda"
MAW = "maw"
SDAW = "sdaw"
W_Q10 = "w_q10"
W_Q50 = "w_q50"
W_Q90 = "w_q90"
EXCLUDED_SHARE = "excluded_share"
NOISE_AUROC = "noise_auroc"
NOISE_PRECISION = "noise_precision"
NOISE_RECALL = "noise_recall"

# Pair-noise theory (noise paper Eq. 7-8, 27): expected vs observed rates, the miner's share, the bound.
Q_POS = "q_pos"
Q_NEG = "q_neg"
Q_POS_OBS = "q_pos_obs"
Q_NEG_OBS = "q_neg_obs"
MINER_CORRUPT_NEG_SHARE = "miner_corrupt_neg_share"
ETA_HAT = "eta_hat"
P_BOUND_TRIPLET = "p_bound_triplet"
