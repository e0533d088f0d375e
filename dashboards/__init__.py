"""Comparison dashboards built from a study's MLflow runs (``python -m dashboards.build``)."""

from __future__ import annotations

from dashboards.build import build_dashboard

__all__ = ["build_dashboard"]
