"""An item's image read from its file: what the loaders' splits and the decoded cache both open (one definition, so
the cache stores exactly the pixels a trial would decode)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["ImageFile", "BoxedImageFile"]


class ImageFile:
    """Opens ``root/<relative path>`` as an RGB PIL image (picklable, so DataLoader workers can use it).

    JPEGs are decoded at reduced scale (PIL ``draft``) when that still leaves the shorter side at least
    ``min_side`` pixels: the transform resizes to ``min_side`` anyway, and decoding is the data loader's
    main cost on large photos (CARS, In-Shop high-res).
    """

    def __init__(self, root: Path | str, min_side: int | None) -> None:
        self.root = str(root)
        self.min_side = min_side

    def __call__(self, relpath: object) -> Image.Image:
        from PIL import Image, UnidentifiedImageError

        path = os.path.join(self.root, str(relpath))
        try:
            with Image.open(path) as img:
                if self.min_side:
                    img.draft("RGB", (self.min_side, self.min_side))
                return img.convert("RGB")
        except (OSError, UnidentifiedImageError) as e:
            raise DataError(f"cannot read image {path}: {e}") from None


class BoxedImageFile(ImageFile):
    """An :class:`ImageFile` cropped to its item's box (open-metric-learning's ``x_1, y_1, x_2, y_2``), decoded at
    full scale: a box can be a small part of the photo, so the reduced-scale decode would lose it."""

    def __init__(self, root: Path | str, boxes: dict[str, tuple[float, float, float, float]]) -> None:
        super().__init__(root, None)
        self.boxes = boxes

    def __call__(self, relpath: object) -> Image.Image:
        img = super().__call__(relpath)
        box = self.boxes.get(str(relpath))
        if box is None:
            return img
        x1, y1, x2, y2 = (round(v) for v in box)
        return img.crop((x1, y1, x2, y2))
