"""ImageNet weights into the torch hub cache, on the driver only: ``python -m study.data weights BACKBONE`` and
the study's pre-flight for ``model.pretrained: true`` (trials only ever read the file, ``trainables.models``).

The download is torchvision's own (``Weights.get_state_dict(check_hash=True)``): torch.hub saves it under
``<torch hub dir>/checkpoints/`` only after the SHA-256 of the bytes matches the hash prefix in the file name
(``resnet18-f37072fd.pth``), so a cut or altered file never lands in the cache.
"""

from __future__ import annotations

import os
import sys
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING

from study.data._download import FetchError, os_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainables.schema.spec import ModelSpec

__all__ = ["ensure_pretrained", "fetch_weights", "weights_target"]


def _weights(backbone: str):  # noqa: ANN202 (a torchvision WeightsEnum member)
    import torchvision.models as tvm

    from trainables.models import PRETRAINABLE, TORCHVISION_WEIGHTS

    if backbone not in PRETRAINABLE:
        raise FetchError(f"backbone {backbone!r} has no ImageNet weights; one of {', '.join(PRETRAINABLE)}")
    return getattr(tvm, TORCHVISION_WEIGHTS[backbone]).IMAGENET1K_V1


def weights_target(backbone: str) -> tuple[str, Path]:
    """``(url, path in the torch hub cache)`` of ``backbone``'s IMAGENET1K_V1 weights."""
    import torch

    url = _weights(backbone).url
    return url, Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def fetch_weights(backbone: str) -> tuple[Path, bool]:
    """Download ``backbone``'s ImageNet weights into the hub cache unless there; ``(path, downloaded now)``."""
    url, path = weights_target(backbone)
    if path.is_file():
        return path, False
    try:
        _weights(backbone).get_state_dict(progress=sys.stderr.isatty(), check_hash=True)
    except urllib.error.URLError as e:
        raise FetchError(
            f"cannot download {path.name} from {url} ({getattr(e, 'reason', e)}); "
            f"download it elsewhere and put it in {path.parent}"
        ) from None
    except RuntimeError as e:  # torch.hub: 'invalid hash value (expected ..., got ...)'
        raise FetchError(f"{path.name} from {url}: {e}; nothing was saved to {path.parent}") from None
    except OSError as e:
        raise os_error(e, path.parent) from None
    return path, True


def ensure_pretrained(spec: ModelSpec, before_download: Callable[[], None] | None = None) -> Path | None:
    """Driver pre-flight: the weights file a ``model.pretrained`` study reads, downloaded if missing and
    ``model.download`` allows; ``None`` when nothing is needed (no pretrained, or ``model.weights`` given).

    ``before_download`` runs just before a download (the study checks its dataset root there, so a wrong root is
    reported before a 100 MB download rather than after)."""
    if not spec.pretrained or spec.weights is not None:
        return None
    url, path = weights_target(spec.backbone)
    if path.is_file():
        return path
    if not spec.download:
        raise FetchError(
            f"model.pretrained: {path.name} is not in {path.parent} and model.download is false; put it there "
            f"(from {url}) or run python -m study.data weights {spec.backbone}"
        )
    if before_download is not None:
        before_download()
    return fetch_weights(spec.backbone)[0]
