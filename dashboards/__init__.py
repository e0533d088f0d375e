"""Comparison dashboards built from a study's MLflow runs (``python -m dashboards.build``)."""

from __future__ import annotations

from typing import Any

__all__ = ["build_dashboard"]


def __getattr__(name: str) -> Any:
    # Lazy, so that ``python -m dashboards.build`` does not find its own module imported twice.
    if name == "build_dashboard":
        from dashboards.build import build_dashboard

        return build_dashboard
    raise AttributeError(f"module 'dashboards' has no attribute {name!r}")
