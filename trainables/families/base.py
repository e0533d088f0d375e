"""The extension point every loss family implements.

A family is one module under ``trainables/`` holding one :class:`BaseLossFamily` subclass with a frozen
``Params`` dataclass (the paper's defaults, each documented). The shared loop in :mod:`trainables.loop` calls
the hooks below and never checks which family it runs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from trainables.families.rules import FamilyRules

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "BaseLossFamily",
    "FamilyContext",
    "PmlLossFamily",
    "Batch",
    "ParamsT",
]

#: The family's frozen ``Params`` dataclass: a family class names it (``PmlLossFamily[MSParams]``), so
#: ``self.params.<field>`` is typed.
ParamsT = TypeVar("ParamsT")


@dataclass(frozen=True)
class FamilyContext:
    """What a family may know about the trial when it is built.

    Args:
        num_train: number of training samples (the length of a per-sample weight vector).
        num_classes: number of distinct (observed, possibly noisy) training labels.
        train_labels: observed training labels, shape ``(num_train,)``, on ``device``. The true labels are
            not here: a family cannot use what it is not given. The loop scores :meth:`BaseLossFamily.sample_scores`
            against them.
        embedding_dim: size of the L2-normalised embedding the model outputs.
        device: the trial's device.
        seed: the trial's seed.
        noise_rate: the label-noise rate the spec states (``dataset.noise.ratio``), which PRISM's protocol assumes
            known (its ``NOISE.NOISE_RATE``); not which samples are noisy.
    """

    num_train: int
    num_classes: int
    train_labels: torch.Tensor
    embedding_dim: int
    device: torch.device
    seed: int
    noise_rate: float = 0.0


@dataclass(frozen=True)
class Batch:
    """One P×K batch: inputs, observed labels and the samples' indices in the training set."""

    inputs: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor


class BaseLossFamily(FamilyRules, nn.Module, abc.ABC, Generic[ParamsT]):
    """A loss family: the criterion of one trainable, plus any state it carries between epochs.

    Lifecycle (all calls come from the loop, :mod:`trainables.loop`):

    1. ``__init__(params, ctx)`` once per trial, before the optimiser is built. Learnable tensors (proxies,
       a learnable margin) must be ``nn.Parameter`` attributes: the loop optimises ``family.parameters()``
       and checkpoints ``family.state_dict()``. Non-learnable state that must survive a restart (sample
       weights, an age parameter) goes in buffers, or, when it is not a tensor (a generator's state, a window of
       past values), in torch's own ``get_extra_state``/``set_extra_state`` hooks, which ``state_dict()`` carries.
    2. ``compute_loss(embeddings, batch)`` once per batch, in training mode.
    3. ``on_epoch_end(epoch, embed_train)`` once per epoch after the θ-step, before evaluation.

    The spec-side half (``name``, ``Params``, ``metric_names``, ``check_spec``/``check_model``, parsing) is the
    family's torch-free rules class (:class:`trainables.families.rules.FamilyRules`), which the family subclasses first.
    """

    #: Views of each image the loader must produce (2 for the contrastive families).
    num_views: ClassVar[int] = 1
    #: True: the model's output is *not* L2-normalised; :meth:`compute_loss` gets it raw (a family with a term
    #: on the unnormalised output, e.g. ``kl_contrastive``'s KL to N(0, I)) and :meth:`test_embedding` decides
    #: what the retrieval metrics see.
    raw_embeddings: ClassVar[bool] = False

    def __init__(self, params: ParamsT, ctx: FamilyContext) -> None:
        super().__init__()
        self.params: ParamsT = params
        self.ctx = ctx

    @abc.abstractmethod
    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Return the named loss terms of one batch; the loop sums them, logs each and checks for NaN.

        ``embeddings`` are L2-normalised (the raw model output with ``raw_embeddings``), shape ``(B, D)``
        (``(B * num_views, D)`` for multi-view families, views stacked view-major). A term that has nothing to act
        on (empty mining) must be a zero still attached to the graph (``embeddings.sum() * 0``).
        """

    def bind_model(self, model: nn.Module) -> None:
        """Called once, after the family is built and before the optimiser, with the trial's embedding network.

        For families that need the network itself (DiVA keeps a momentum copy of it as its key encoder).
        Anything registered as a submodule here is checkpointed with the family; keep it out of
        :meth:`param_groups` unless it should be trained. The default does nothing.
        """
        del model

    def test_embedding(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The embedding a split is evaluated (and, for BSPML, weighted) with, from the model's L2-normalised
        output; DiVA re-normalises each task head before concatenating. The default is the output itself."""
        return embeddings

    def on_epoch_end(
        self, epoch: int, embed_train: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    ) -> dict[str, float]:
        """Called after each epoch's θ-step; returns extra metrics to report for that epoch.

        ``embed_train()`` embeds the whole training set with the current model (no gradients) and returns
        ``(embeddings, indices)``. The default does nothing.
        """
        del epoch, embed_train
        return {}

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups of the family's learnable tensors (called once, when the loop builds
        the optimiser; ``lr`` is the spec's learning rate). Override to give some tensors their own rate
        (margin's β, proxies); the default puts every parameter in one group at the shared rate."""
        del lr
        return [{"params": list(self.parameters())}]

    def sample_scores(self) -> torch.Tensor | None:
        """Per training sample (in ``ctx`` order), how clean the family believes its label is, in [0, 1]
        (BSPML: its weight w); ``None`` (the default) when the family keeps no such score.

        Called by the loop after :meth:`on_epoch_end`; the loop reports ``noise_auroc`` and the precision/recall
        of ``score < 0.5`` against the recorded noise, and writes the per-class and per-sample weight files.
        Mining needs no such hook: the loop observes every pytorch-metric-learning miner the family holds.
        """
        return None


class PmlLossFamily(BaseLossFamily[ParamsT]):
    """A family served by a pytorch-metric-learning loss and optional miner.

    Subclasses write only :meth:`build_criterion` and, when they mine, :meth:`build_miner`; the loss term is
    named after the family.
    """

    def __init__(self, params: Any, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        self.criterion = self.build_criterion(params)
        self.miner = self.build_miner(params)

    @abc.abstractmethod
    def build_criterion(self, params: Any) -> nn.Module:
        """Return the PML loss module (its learnable parameters, if any, are trained and checkpointed)."""

    def build_miner(self, params: Any) -> nn.Module | None:
        """Return the PML miner, or ``None`` to use every pair in the batch."""
        del params
        return None

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        pairs = self.miner(embeddings, batch.labels) if self.miner is not None else None
        loss = self.criterion(embeddings, batch.labels, pairs)
        # PML already returns an attached zero when mining finds nothing.
        return {self.name: loss}
