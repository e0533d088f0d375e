"""The one training loop every loss family runs in.

- :mod:`~trainables.loop.trainable`: ``train_fn``, the Ray Tune function trainable (report + checkpoint).
- :mod:`~trainables.loop.run`: :class:`TrialRun`, what one trial trains and reports (one member, or one per fold);
  tests and benchmarks drive it exactly as ``train_fn`` does.
- :mod:`~trainables.loop.member`: one model, its family, optimiser and loaders (internal to this package).
- :mod:`~trainables.loop.device`, :mod:`~trainables.loop.rng`, :mod:`~trainables.loop.optim`,
  :mod:`~trainables.loop.dataset_cache`: device/AMP/layout, random streams, optimiser and lr schedule, and the
  per-process dataset cache.
"""

from __future__ import annotations

from trainables.loop.member import NonFiniteLossError
from trainables.loop.run import TrialRun
from trainables.loop.trainable import train_fn

__all__ = ["train_fn", "NonFiniteLossError", "TrialRun"]
