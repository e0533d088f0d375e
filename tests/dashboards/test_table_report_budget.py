"""table.md's "would more trials change the answer" section (dashboards/table_report.py: budget_lines): each cell's
budget line, then per comparison (an arm against the reference on the same condition) whether the two arms'
expected-best curves cross inside the budget, checked against curves built by hand so that they cross or not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dashboards.expected_best import of_trials
from dashboards.table_report import budget_lines
from study.intake.load import load_plan

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def _trials(values: list[float]) -> list[SimpleNamespace]:
    state = SimpleNamespace(name="COMPLETE")
    return [SimpleNamespace(number=i, value=v, intermediate_values={4: v}, state=state) for i, v in enumerate(values)]


def test_budget_lines_say_each_cell_and_whether_each_comparisons_curves_cross():
    plan = load_plan(SPACES / "table_glyphs_quick.yaml")
    labels = {(c.arm, c.condition.get("dataset.noise.ratio")): c.label for c in plan.cells}
    # At 0 % noise bspml is steady and ms has one lucky trial: bspml leads a 1-trial search, ms a 4-trial one (its
    # lucky trial is likely found): the curves cross. At 30 % bspml is better at every budget.
    values = {
        ("ms", 0.0): [0.30, 0.31, 0.32, 0.90],
        ("bspml", 0.0): [0.50, 0.51, 0.52, 0.53],
        ("ms", 0.3): [0.10, 0.11, 0.12, 0.13],
        ("bspml", 0.3): [0.50, 0.51, 0.52, 0.53],
    }
    curves = {labels[k]: of_trials(labels[k], _trials(v), 4, "max") for k, v in values.items()}
    lines = budget_lines(plan, curves)
    assert [ln.split(":")[0] for ln in lines[:4]] == ["budget"] * 4
    crossing = {ln.split(":")[0]: ln for ln in lines[4:]}
    assert set(crossing) == {
        f"{labels['bspml', 0.0]} vs {labels['ms', 0.0]}",
        f"{labels['bspml', 0.3]} vs {labels['ms', 0.3]}",
    }
    assert "the curves cross at k = " in crossing[f"{labels['bspml', 0.0]} vs {labels['ms', 0.0]}"]
    assert "do not cross" in crossing[f"{labels['bspml', 0.3]} vs {labels['ms', 0.3]}"]
    assert budget_lines(plan, {}) == []  # no curves read back: nothing said
