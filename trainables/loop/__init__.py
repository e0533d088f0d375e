"""The one training loop every loss family runs in.

- :mod:`~trainables.loop.trainable`: ``train_fn``, the Ray Tune function trainable (report + checkpoint).
- :mod:`~trainables.loop.run`: :class:`TrialRun`, what one trial trains and reports (one member, or one per fold);
  tests and benchmarks drive it exactly as ``train_fn`` does.
- :mod:`~trainables.loop.member`: one model, its family, optimiser and loaders (internal to this package).
- :mod:`~trainables.loop.device`, :mod:`~trainables.loop.rng`, :mod:`~trainables.loop.optim`,
  :mod:`~trainables.loop.dataset_cache`: device/AMP/layout, random streams, optimiser and lr schedule, and the
  per-process dataset cache.

``train_fn`` is imported on first use (PEP 562): it is the one module here that needs Ray's ``tune``, and what
measures or drives a trial without Ray (:mod:`study.search.calibration`, ``benchmarks.gpu`` on a GPU machine that has
no Ray installed) imports :class:`TrialRun` alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainables.loop.member import NonFiniteLossError
from trainables.loop.run import TrialRun

if TYPE_CHECKING:
    from trainables.loop.trainable import train_fn

__all__ = ["train_fn", "NonFiniteLossError", "TrialRun"]


def __getattr__(name: str) -> Any:
    if name == "train_fn":
        from trainables.loop.trainable import train_fn

        return train_fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
