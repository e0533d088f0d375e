"""Per category: Recall@1 and MAP@R of the final stage over the test queries of each category (a CSV dataset's
``category`` column, :mod:`trainables.metrics.categories`), mean ± std and Student's t 95 % interval over the final
seeds, per study and final group; the overall numbers are in the leaderboard and robustness panels. The study writes
the same summary to its parent run (``final_per_category.csv``)."""

from __future__ import annotations

import polars as pl

from dashboards.load import METRIC, DashboardData
from dashboards.panels import Panel
from dashboards.select import decimals, final_runs
from study.final.intervals import t_interval
from trainables.schema import record as R
from trainables.schema.metric_names import bounds_of, split_per_category

__all__ = ["build", "category_table"]


def category_table(data: DashboardData) -> pl.DataFrame:
    """One row per study, final group, category and metric: ``seeds``, ``mean``, ``std``, ``ci95`` as text."""
    runs = final_runs(data)
    names = {c: split for c in runs.columns if (split := split_per_category(c.removeprefix(METRIC))) is not None}
    rows = []
    for (experiment, group), part in runs.sort("experiment", R.GROUP).group_by(
        "experiment", R.GROUP, maintain_order=True
    ):
        for column, (category, metric) in sorted(names.items(), key=lambda kv: kv[1]):
            values = [v for v in part[column].to_list() if v is not None]
            if not values:
                continue
            mean, std, low, high = t_interval(values, bounds_of(metric))
            rows.append(
                {
                    "study": experiment,
                    "final group": group,
                    "category": category,
                    "metric": metric,
                    "seeds": str(len(values)),
                    "mean": decimals(mean),
                    "std": decimals(std),
                    "95 % CI": f"[{decimals(low)}, {decimals(high)}]" if len(values) > 1 else "—",
                }
            )
    return pl.DataFrame(rows)


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "categories",
        "Per category",
        "Recall@1 and MAP@R of the final stage over the test queries of each <code>category</code> of a CSV "
        "dataset (each query searched among all test images, as for the overall numbers), mean ± sample std and "
        "Student's t 95 % interval over the final seeds.",
    )
    table = category_table(data)
    if table.is_empty():
        panel.skipped = "no final-stage run reported per-category metrics (a CSV dataset with a category column)"
        return panel
    panel.table("table", "Final stage per category", table)
    return panel
