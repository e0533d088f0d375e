"""Names of the metrics the trainables report, the tuner optimises and the dashboards read.

MLflow accepts alphanumerics, ``_ - . /`` and spaces in metric names, so there is no ``@`` anywhere.
"""

from __future__ import annotations

import re

__all__ = [
    "EPOCH",
    "NMI",
    "SPECTRAL_DECAY",
    "OBJECTIVE",
    "TRAIN_LOSS",
    "TRAIN_LOSS_PREFIX",
    "EPOCH_TIME",
    "EVAL_TIME",
    "COST_MODEL_EPOCHS",
    "COST_WALL",
    "COST_GPU",
    "COST_METRICS",
    "LR",
    "MAP_AT_R",
    "R_PRECISION",
    "ACC1",
    "ACC5",
    "recall_at",
    "Q_POS",
    "Q_NEG",
    "Q_POS_OBS",
    "Q_NEG_OBS",
    "MINER_CORRUPT_NEG_SHARE",
    "ETA_HAT",
    "P_BOUND_TRIPLET",
    "NOISE_DIAGNOSTICS",
    "PAIRED_MAE",
    "PAIRED_COSINE",
    "NOISE_DETECTOR_PREFIX",
    "NOISE_DETECTORS",
    "noise_detector_auroc",
    "noise_detector_ap",
    "KNN_REJECTED_SHARE",
    "PRISM_ESTIMATED_RATE",
    "CATEGORY_PREFIX",
    "CATEGORY_METRICS",
    "category_key",
    "per_category",
    "split_per_category",
    "final_metric",
    "mean_last",
    "bounds_of",
]

EPOCH = "epoch"
NMI = "nmi"
SPECTRAL_DECAY = "spectral_decay"  # KL(normalised singular-value spectrum || uniform); lower = less compressed
TRAIN_LOSS = "train/loss"
TRAIN_LOSS_PREFIX = "train/loss/"
EPOCH_TIME = "epoch_time_s"
EVAL_TIME = "eval_time_s"
# What a trial has cost so far, reported every epoch (cumulative over its restarts, from its checkpoint): models ×
# epochs trained (k folds train k models per epoch), wall seconds in the trial, and GPU-seconds (wall × the GPUs it
# holds) on a GPU only. A table's ``--status`` and report sum them per cell (study/cell_status.py).
COST_MODEL_EPOCHS = "cost/model_epochs"
COST_WALL = "cost/wall_s"
COST_GPU = "cost/gpu_s"
COST_METRICS = (COST_MODEL_EPOCHS, COST_WALL, COST_GPU)
ACC1 = "acc1"  # linear-probe top-1 accuracy on the test set (train.linear_probe)
ACC5 = "acc5"  # linear-probe top-5 accuracy
LR = "lr"  # the learning rate the epoch trained with (train.lr_schedule)
MAP_AT_R = "map_at_r"  # MAP@R (Musgrave et al. 2020, "A Metric Learning Reality Check")
R_PRECISION = "r_precision"  # R-precision (same paper): same-class share of the R nearest neighbours
# Paired (two-modality) test data, the debiased-contrastive thesis §4.1 Table 1: between the model outputs x_i, y_i
# of the two views of each test sample, mean ||x_i − y_i||₂ ("MAE" as its formula writes it) and mean cosine.
PAIRED_MAE = "paired_mae"
PAIRED_COSINE = "paired_cosine"

# Label-noise diagnostics (trainables/loop/diagnostics.py), reported when the training labels are noisy.
Q_POS = "q_pos"  # noise paper Eq. 8: a true positive pair observed as negative
Q_NEG = "q_neg"  # noise paper Eq. 7: a true negative pair observed as positive
Q_POS_OBS = "q_pos_obs"
Q_NEG_OBS = "q_neg_obs"
MINER_CORRUPT_NEG_SHARE = "miner_corrupt_neg_share"
ETA_HAT = "eta_hat"
P_BOUND_TRIPLET = "p_bound_triplet"
#: The label-noise diagnostics, each expected rate beside what the batches held (the noise-theory panel's order).
NOISE_DIAGNOSTICS = (Q_POS, Q_POS_OBS, Q_NEG, Q_NEG_OBS, MINER_CORRUPT_NEG_SHARE, ETA_HAT, P_BOUND_TRIPLET)


def recall_at(k: int) -> str:
    """Name of Recall@k: a test sample scores 1 if one of its k nearest neighbours shares its class."""
    return f"recall_at_{k}"


OBJECTIVE = recall_at(1)


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
# The BSPML w-step (Eq. 6 subproblem): its objective before/after, projected-gradient residual, sweeps used, and
# the λ it used in ξ units (= lambda unless lambda_scale is relative).
W_OBJECTIVE_BEFORE = "bspml/w_objective_before"
W_OBJECTIVE_AFTER = "bspml/w_objective_after"
W_RESIDUAL = "bspml/w_residual"
W_SWEEPS = "bspml/w_sweeps"
LAMBDA_ABSOLUTE = "bspml/lambda_absolute"

# PRISM's selection trace (family prism): the mean threshold its sliding window applied, and the share of batch
# samples it kept (its ``PRISM_threshold`` and ``PRISM_remove_ratio`` logs).
PRISM_THRESHOLD = "prism_threshold"
PRISM_KEPT_SHARE = "prism_kept_share"

# Label-free noise detectors (trainables/families/noise_detectors.py), scored by the loop against the recorded noise every
# ``diagnostics.every`` epochs: ``noise/<detector>_auroc`` and ``noise/<detector>_ap`` (average precision).
NOISE_DETECTOR_PREFIX = "noise/"
NOISE_DETECTORS = ("xi", "centroid", "knn")


def noise_detector_auroc(detector: str) -> str:
    """``xi`` → ``noise/xi_auroc``."""
    return f"{NOISE_DETECTOR_PREFIX}{detector}_auroc"


def noise_detector_ap(detector: str) -> str:
    """``xi`` → ``noise/xi_ap``."""
    return f"{NOISE_DETECTOR_PREFIX}{detector}_ap"


# Per-category retrieval (a CSV dataset's ``category`` column, as open-metric-learning reports it): Recall@1 and
# MAP@R over the test queries of each category, searched in the whole gallery, at a trial's last epoch:
# ``category/<category>/recall_at_1``. The overall metrics stay over all queries.
CATEGORY_PREFIX = "category/"
CATEGORY_METRICS = (recall_at(1), MAP_AT_R)


def category_key(category: str) -> str:
    """A category as it appears in a metric name: what MLflow refuses (anything but alphanumerics, ``_ - .`` and
    spaces; a ``/`` would split the name) becomes ``_``; an empty category is ``none``."""
    return re.sub(r"[^A-Za-z0-9_.\- ]", "_", category.strip()) or "none"


def per_category(category: str, metric: str) -> str:
    """``("shoes", "map_at_r")`` → ``category/shoes/map_at_r``."""
    return f"{CATEGORY_PREFIX}{category_key(category)}/{metric}"


def split_per_category(name: str) -> tuple[str, str] | None:
    """``[test/]category/shoes/map_at_r`` → ``("shoes", "map_at_r")``; ``None`` for any other name."""
    _, found, rest = name.partition(CATEGORY_PREFIX)
    category, _, metric = rest.rpartition("/")
    return (category, metric) if found and category and metric in CATEGORY_METRICS else None


# knn_rejection's trace: the share of training samples its last kNN vote rejected.
KNN_REJECTED_SHARE = "knn_rejected_share"
# PRISM with ``rate: estimated``: the noise rate its kNN estimate gives (used for the next epoch).
PRISM_ESTIMATED_RATE = "prism_estimated_rate"


# Split prefixes (the model-selection protocol, "A Metric Learning Reality Check"): the searcher and the scheduler
# see ``val/`` metrics only, computed on classes carved from the training classes; ``test/`` metrics come from the
# unseen test classes. Retrieval metrics (Recall@k, NMI, MAP@R, ...) are reported under exactly one of them.
VAL_PREFIX = "val/"
TEST_PREFIX = "test/"
SPLIT_PREFIXES = (VAL_PREFIX, TEST_PREFIX)


def on_val(name: str) -> str:
    """``recall_at_1`` → ``val/recall_at_1``."""
    return VAL_PREFIX + name


def on_test(name: str) -> str:
    """``recall_at_1`` → ``test/recall_at_1``."""
    return TEST_PREFIX + name


def final_metric(metric: str) -> str:
    """The test metric the final stage reports for a search metric: ``val/recall_at_1`` → ``test/recall_at_1``; a
    metric without the validation prefix (selection on the test classes) is its own."""
    return TEST_PREFIX + metric.removeprefix(VAL_PREFIX) if metric.startswith(VAL_PREFIX) else metric


def mean_last(k: int, metric: str) -> str:
    """What ranks a trial under ``search.select_on: {mean_last: k}``, the mean of its last k epochs' values of
    ``metric``: ``val/recall_at_1`` → ``val/mean_last_3/recall_at_1`` (its split's prefix first, so the rule that the
    searcher sees validation metrics only reads it as it reads the metric; its base name last, so its bounds are the
    metric's)."""
    split, sep, name = metric.partition("/")
    return f"{split}/mean_last_{k}/{name}" if sep else f"mean_last_{k}/{metric}"


def on_fold(fold: int, name: str) -> str:
    """A validation metric of one fold model: ``val/fold0/recall_at_1``."""
    return f"{VAL_PREFIX}fold{fold}/{name}"


# Final-stage summaries on the parent run: ``test/recall_at_1_mean``, ``..._std``, ``..._ci95_low``, ``..._ci95_high``
# over the final seeds; the k-fold ensemble's test metrics as ``fold_ensemble/test/recall_at_1``.
SUMMARY_SUFFIXES = ("_mean", "_std", "_ci95_low", "_ci95_high")
FOLD_ENSEMBLE_PREFIX = "fold_ensemble/"


#: Metrics that are shares of queries, pairs or samples, so bounded in [0, 1] (any Recall@k besides these): a
#: mean's interval over a few seeds near 1 or 0 is cut to the bounds (``study.final.intervals.t_interval``).
UNIT_METRICS = frozenset({NMI, MAP_AT_R, R_PRECISION, ACC1, ACC5})


def bounds_of(name: str) -> tuple[float, float] | None:
    """``(0, 1)`` for a metric bounded in [0, 1] (``test/recall_at_1``, ``category/shoes/map_at_r``,
    ``fold_ensemble/test/nmi``: the name after its last ``/``), else ``None``."""
    base = name.rsplit("/", 1)[-1]
    return (0.0, 1.0) if base in UNIT_METRICS or re.fullmatch(r"recall_at_\d+", base) else None
