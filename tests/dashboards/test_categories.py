"""The dashboard's per-category section and the parent run's per-category table, from final runs' category metrics."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from mlflow import MlflowClient
from scipy import stats as sps

from dashboards.build import build_dashboard
from study.final.stage import FinalGroup, category_csv, summary_csv
from tests.dashboards.page import read_page
from tests.dashboards.synthetic import _params, _run, _tags

#: final seed → (test/recall_at_1 overall, per category: shoes R@1, shoes MAP@R, bags R@1, bags MAP@R)
FINALS = {0: (0.70, 0.80, 0.61, 0.65, 0.52), 1: (0.74, 0.82, 0.66, 0.70, 0.50), 2: (0.66, 0.77, 0.58, 0.60, 0.47)}
NAMES = ("category/shoes/recall_at_1", "category/shoes/map_at_r", "category/bags/recall_at_1", "category/bags/map_at_r")


def _t(values):
    x = np.asarray(values)
    half = sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return x.mean(), x.std(ddof=1), x.mean() - half, x.mean() + half


def test_the_page_has_a_per_category_section_with_t_intervals(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("cats", artifact_location=(tmp_path / "artifacts").as_uri())
    parent = client.create_run(exp, run_name="cats", tags={"dmlstudy.role": "study"}).info.run_id
    for seed, (overall, *per_category) in FINALS.items():
        tags = _tags("ms", 0.0, seed, kind="none", stage="final", group="all")
        metrics = {"test/recall_at_1": overall} | {f"test/{n}": v for n, v in zip(NAMES, per_category)}
        _run(client, exp, parent, f"final_{seed}", tags, _params("ms", 0.0, seed), metrics)
    client.set_terminated(parent, "FINISHED")
    page = read_page(build_dashboard(["cats"], f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out"))
    rows = page.tables["categories_table"]
    assert [(r["category"], r["metric"]) for r in rows] == [
        ("bags", "map_at_r"),
        ("bags", "recall_at_1"),
        ("shoes", "map_at_r"),
        ("shoes", "recall_at_1"),
    ]
    for row in rows:
        column = NAMES.index(f"category/{row['category']}/{row['metric']}") + 1
        mean, std, low, high = _t([v[column] for v in FINALS.values()])
        assert (row["mean"], row["std"], row["seeds"]) == (f"{mean:.4f}", f"{std:.4f}", "3")
        assert row["95 % CI"] == f"[{low:.4f}, {high:.4f}]"


def test_the_parent_table_has_a_row_per_group_category_and_metric_and_the_summary_leaves_them_out():
    group = FinalGroup(
        "all", "abc", values={f"test/{n}": [v[i + 1] for v in FINALS.values()] for i, n in enumerate(NAMES)}
    )
    group.values["test/recall_at_1"] = [v[0] for v in FINALS.values()]
    table = list(csv.DictReader(io.StringIO(category_csv([group]) or "")))
    assert [(r["category"], r["metric"]) for r in table] == [
        ("bags", "map_at_r"),
        ("bags", "recall_at_1"),
        ("shoes", "map_at_r"),
        ("shoes", "recall_at_1"),
    ]
    shoes = table[3]
    mean, std, low, high = _t([v[1] for v in FINALS.values()])
    assert shoes["group"] == "all" and shoes["seeds"] == "3"
    assert [float(shoes[c]) for c in ("mean", "std", "ci95_low", "ci95_high")] == pytest.approx([mean, std, low, high])
    # The overall summary is what it was: the categories have their own table.
    assert "category" not in summary_csv([group]) and "test/recall_at_1_mean" in summary_csv([group])
    assert category_csv([FinalGroup("all", "abc", values={"test/recall_at_1": [0.7, 0.8]})]) is None
