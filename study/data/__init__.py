"""Real benchmark data in one command: ``python -m study.data fetch DATASET --root DIR`` (see ``__main__``).

The driver-side counterpart of ``trainables.data``: the loaders only read a tree; this package downloads the
published archives, verifies them and lays them out as the loaders read them.
"""

from __future__ import annotations

from study.data._download import FetchError
from study.data._fetch import MARKER, FetchResult, fetch
from study.data._weights import ensure_pretrained, fetch_weights, weights_target

__all__ = [
    "MARKER",
    "FetchError",
    "FetchResult",
    "ensure_pretrained",
    "fetch",
    "fetch_weights",
    "weights_target",
]
