"""The dataset a worker process loaded last, for the next trial Ray runs in that process."""

from __future__ import annotations

from trainables.data import DatasetSplits, load_dataset
from trainables.schema.spec import DatasetSpec

__all__ = ["cached_dataset"]

#: Ray reuses a trial's worker process for the next trial (``reuse_actors``), which then finds its data here instead
#: of reloading it. Keyed on the dataset spec alone: the splits and the label noise depend on nothing else (the
#: noise has its own ``dataset.noise.seed``; the trial's seed does not reach the data). Splits are frozen and never
#: written, so trials may share them.
_DATASET_CACHE: dict[str, DatasetSplits] = {}


def cached_dataset(spec: DatasetSpec) -> DatasetSplits:
    """:func:`~trainables.data.load_dataset`, remembering the last result of this process."""
    key = spec.model_dump_json()
    if key not in _DATASET_CACHE:
        _DATASET_CACHE.clear()  # one dataset at a time: a worker trains one trial at a time
        _DATASET_CACHE[key] = load_dataset(spec, seed=0)  # the seed is not used (see above)
    return _DATASET_CACHE[key]
