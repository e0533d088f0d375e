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

# Self-paced sample-weight traces (families bspml, spms; BSPML Eq. 14 and our noise-detection scores).
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
