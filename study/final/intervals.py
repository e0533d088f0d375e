"""The one 95 % confidence interval of a mean over seeds: Student's t (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n).

With 3–10 seeds a bootstrap interval is too narrow (it cannot extrapolate beyond the observed spread); the
t-interval is the textbook choice. The final stage's summary (:data:`trainables.schema.record.FINAL_SUMMARY_FILE`, the parent
run's metrics), the dashboards' tables and the comparison's paired differences all use this function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["t_interval", "CONFIDENCE"]

#: The coverage of every interval the study reports.
CONFIDENCE = 0.95


def t_interval(values: Sequence[float]) -> tuple[float, float, float, float]:
    """``(mean, std, ci95_low, ci95_high)`` of ``values`` (sample std; the interval is NaN for one value, and the
    point itself when all values are equal)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    return mean, std, mean - half, mean + half
