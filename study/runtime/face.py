"""A wing's face, after Optuna's ``storages/__init__.py``: the wing's ``__init__`` names its public names, so a caller
imports ``from study.search import run_study`` and the next move inside the wing does not ripple through its callers.

Unlike Optuna's, the names resolve when first asked for (PEP 562's module ``__getattr__``), not when the wing is
imported: ``study.search`` holds Ray's searchers, and a light command (a bad spec's one line, ``--status``) imports
a light module of the wing without Ray. ``harness/layering.py`` reads each wing's ``FACE`` table, so an import through
a face is checked as the import of the module that holds the name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["face_of"]


def face_of(package: str, face: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``'s face: each name in ``face`` (name → the module that holds
    it) is imported from its module when first asked for; any other name is an :class:`AttributeError`."""

    def __getattr__(name: str) -> Any:
        if name not in face:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(face[name]), name)

    def __dir__() -> list[str]:
        return sorted(face)

    return __getattr__, __dir__
