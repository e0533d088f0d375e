"""The contrastive protocol's metrics, on the model's torch outputs: the paired metrics between two views of each test
sample (reported when the test split is paired) and the linear probe's Acc@1/Acc@5 (with ``train.linear_probe``).
"""

from __future__ import annotations

import numpy as np
import torch

from trainables.metrics.registry import computes
from trainables.schema.metric_names import ACC1, ACC5, PAIRED_COSINE, PAIRED_MAE

__all__ = ["paired_metrics", "linear_probe_accuracy"]


@computes(PAIRED_MAE, PAIRED_COSINE)
def paired_metrics(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The debiased-contrastive thesis' §4.1 metrics between paired embeddings ``x_i``, ``y_i`` (the model outputs of
    the two modalities of test sample i): ``paired_mae = (1/n) Σ ||x_i − y_i||₂`` (its "MAE": the Euclidean norm of
    the difference, as the formula writes it) and ``paired_cosine = (1/n) Σ <x_i, y_i> / (||x_i|| ||y_i||)``."""
    x, y = x.double(), y.double()
    return {
        PAIRED_MAE: float((x - y).norm(dim=1).mean()),
        PAIRED_COSINE: float(torch.nn.functional.cosine_similarity(x, y, dim=1).mean()),
    }


@computes(ACC1, ACC5)
def linear_probe_accuracy(
    train: torch.Tensor,
    train_labels: np.ndarray,
    test: torch.Tensor,
    test_labels: np.ndarray,
    weight_decay: float = 1e-4,
    max_iter: int = 100,
) -> dict[str, float]:
    """Top-1 / top-5 test accuracy of a linear softmax classifier fitted on frozen training embeddings.

    The contrastive-learning protocol (SimCLR's linear evaluation; the debiased-contrastive thesis' CIFAR-10
    Acc@1/Acc@5): full-batch L-BFGS on the cross-entropy plus ``weight_decay·‖W‖²``, from zero weights, on the
    embeddings' device, so it is deterministic. A test label the probe never saw counts as a miss. ``train_labels``
    are the observed (possibly noisy) labels: the probe sees what the trial trained on.
    """
    classes, y = np.unique(np.asarray(train_labels), return_inverse=True)
    device = train.device
    x = train.detach().float().clone()  # embeddings made under inference_mode cannot enter autograd
    targets = torch.as_tensor(y, device=device)
    linear = torch.nn.Linear(x.shape[1], len(classes)).to(device)
    torch.nn.init.zeros_(linear.weight)
    torch.nn.init.zeros_(linear.bias)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(linear(x), targets) + weight_decay * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        ranked = linear(test.detach().float()).argsort(dim=1, descending=True).cpu().numpy()
    predicted = classes[ranked]
    hits = predicted == np.asarray(test_labels)[:, None]
    return {name: float(hits[:, :k].any(axis=1).mean()) for name, k in ((ACC1, 1), (ACC5, 5))}
