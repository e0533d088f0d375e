"""A verdict per comparison (:mod:`dashboards.compare.verdicts`): the rule against a brute force of Holm's step-down,
both of its documented forms (adjusted p-values, and the Holm intervals at the comparisons' ranks), the margin, the
metric's direction, the minimum detectable effect's power by simulation, the names the parent run stores, and the
table's headline read from a runs frame (one search per cell, and over replicates)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from scipy import stats as sps

from dashboards import stats
from dashboards.compare.cells import Cell
from dashboards.compare.verdicts import (
    BETTER,
    OPEN,
    WORSE,
    Evidence,
    comparison_name,
    headline,
    judge,
    record,
    row_evidence,
    status_lines,
)
from dashboards.load import METRIC
from trainables.schema import record as R

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
REF = Cell("ms", "per_class", 0.2, "all")


def _evidence(delta: float, parts: list[tuple[float, float]], family: str = "bspml") -> Evidence:
    cell = Cell(family, "per_class", 0.2, "all")
    return Evidence(cell, REF, delta, tuple(stats.Part(np.asarray(v), df) for v, df in parts), None, 5)


def test_the_verdicts_are_holms_step_down_in_both_of_its_forms():
    """150 random tables of 1–6 comparisons (one to three variance parts each): a comparison is better/worse exactly
    where Holm's step-down, done by hand on the parts' p-values, rejects; and exactly where its Holm interval and
    those of every comparison ranked before it exclude 0."""
    rng = np.random.default_rng(7)
    decided = opened = 0
    for _ in range(150):
        m = int(rng.integers(1, 7))
        table = [
            _evidence(
                float(rng.normal(0.0, 0.02)),
                [(float(rng.uniform(1e-5, 1e-4)), float(rng.integers(1, 8))) for _ in range(int(rng.integers(1, 4)))],
                family=f"f{i}",
            )
            for i in range(m)
        ]
        verdicts = judge(table, "test/recall_at_1")
        p = [stats.p_value(e.delta, e.parts) for e in table]
        order = sorted(range(m), key=lambda i: p[i])
        rejected, still = set(), True
        for k, i in enumerate(order):  # Holm by hand: stop at the first p_(k) ≥ α / (m − k)
            still = still and p[i] < 0.05 / (m - k)
            if still:
                rejected.add(i)
        excludes = [not (v.holm_low <= 0.0 <= v.holm_high) for v in verdicts]
        for k, i in enumerate(order):
            v = verdicts[i]
            assert v.decided == (i in rejected) == all(excludes[j] for j in order[: k + 1])
            if v.decided:
                assert v.label == (BETTER if table[i].delta > 0 else WORSE)
            else:
                assert v.label == OPEN
        decided, opened = decided + len(rejected), opened + m - len(rejected)
    assert decided > 10 and opened > 10  # both outcomes were drawn (29 decided here)


def test_the_margin_and_the_metrics_direction():
    tight = _evidence(0.001, [(1e-8, 6.0)])  # ± ≈ 0.0003 (Holm's first step, t 3.3): excludes 0, inside ±0.01
    wide = _evidence(0.001, [(1e-4, 6.0)])  # ± ≈ 0.024: open, not inside ±0.01
    small = _evidence(0.0005, [(1e-6, 6.0)])  # ± ≈ 0.0024: open, inside ±0.01
    v = judge([tight, wide, small], "test/recall_at_1", margin=0.01)
    assert [x.label for x in v] == [BETTER, OPEN, "equivalent within ±0.01"]
    assert v[0].text() == "better, within ±0.01" and v[2].sign == 0 and v[0].sign == 1
    assert judge([tight], "loss", higher_is_better=False)[0].label == WORSE
    assert judge([small], "test/recall_at_1")[0].label == OPEN  # no margin: open


def test_the_minimum_detectable_effect_is_detected_with_about_80_percent_power():
    """A paired design of 7 seeds whose true effect is the MDE of its true SE: the t-test at α 0.05 finds it in about
    80 % of 4,000 simulated tables (the textbook formula is approximate at 6 df); half the MDE, far less often."""
    rng = np.random.default_rng(3)
    n, sd = 7, 0.01
    mde = stats.min_detectable_effect((stats.Part(np.asarray(sd**2 / n), float(n - 1)),))
    for effect, low, high in ((mde, 0.72, 0.88), (mde / 2, 0.15, 0.40)):
        d = rng.normal(effect, sd, (4000, n))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
        power = float(np.mean(2 * sps.t.sf(np.abs(t), n - 1) < 0.05))
        assert low < power < high, (effect, power)


def test_a_tables_verdicts_from_its_rows_and_what_the_parent_run_stores():
    """One search per cell: the paired comparison (its p-value the paired t-test's) and the unpaired one (Welch's,
    no P(A > B)); the parent run's tag holds the line, the metrics its numbers; ``--status`` reads the tags back."""
    ms = {0: 0.60, 1: 0.58, 2: 0.53, 3: 0.55}
    values = {
        REF: ms,
        Cell("bspml", "per_class", 0.2, "all"): {0: 0.64, 1: 0.61, 2: 0.56, 3: 0.58},
        Cell("ms", "per_class", 0.2, "clean_only"): {5: 0.65, 6: 0.66, 7: 0.62},
    }
    top, bspml = row_evidence(values, "ms")  # the reference's own rows first, as the tables sort
    assert bspml.paired and bspml.improvement is not None and bspml.improvement.value == 1.0
    assert not top.paired and top.improvement is None
    verdicts = judge([top, bspml], "test/recall_at_1")
    paired_p = sps.ttest_rel([0.64, 0.61, 0.56, 0.58], list(ms.values())).pvalue
    welch_p = sps.ttest_ind([0.65, 0.66, 0.62], list(ms.values()), equal_var=False).pvalue
    assert [v.p_value for v in verdicts] == pytest.approx([welch_p, paired_p], rel=1e-9)
    tags, metrics = record(verdicts)
    assert comparison_name(bspml.cell) == "bspml.per_class_p0.2"
    assert comparison_name(top.cell) == "ms.clean_only.per_class_p0.2"
    assert comparison_name(Cell("bspml", "none", 0.0, "all")) == "bspml.p0"
    assert tags[R.verdict_tag("bspml.per_class_p0.2")] == verdicts[1].line()
    assert metrics[R.verdict_metric("bspml.per_class_p0.2", "delta")] == pytest.approx(0.0325)
    assert R.verdict_metric("ms.clean_only.per_class_p0.2", "poi") not in metrics  # unpaired: no P(A > B)
    other = {R.verdict_metric("bspml.per_class_p0.2", "delta"): "0.03", "stage": "final", R.REFERENCE: "ms"}
    assert status_lines({**tags, **other}) == [f"verdict: {verdicts[1].line()}", f"verdict: {verdicts[0].line()}"]
    lines = headline(verdicts, replicates=1)
    assert lines[:2] == [f"- {v.line()}" for v in verdicts] and "ignore the search's own variance" in lines[-1]
    assert headline(verdicts, replicates=3) == lines[:2]


def _plan(replicates: int, **search: object):
    from study.intake.cells import parse_table

    raw = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())
    return parse_table({**raw, "search": {**raw["search"], "replicates": replicates, **search}})


def _finals(values: dict[str, list[float]]) -> pl.DataFrame:
    """Final runs of a table whose groups are its cells' labels (``ms.p0.3``, ``ms.p0.3.r1``, …)."""
    rows = [
        {
            R.STAGE: R.STAGE_FINAL,
            "status": "FINISHED",
            METRIC + "test/recall_at_1": value,
            R.FAMILY: group.split(".")[0],
            R.NOISE_KIND: "per_class",
            R.NOISE_RATIO: "0.3",
            R.SUBSET: "",
            R.SEED: str(seed),
            R.GROUP: group,
            "experiment": "table_glyphs_quick",
            "config": "{}",
        }
        for group, per_seed in values.items()
        for seed, value in enumerate(per_seed)
    ]
    return pl.DataFrame(rows)


def test_the_table_decides_over_every_replicate_and_its_tables_mark_none():
    """With ``search.replicates: 2`` the verdict is the crossed interval's over both replicates (the two searches of
    bspml disagree: open), though replicate 0 alone would call bspml better; the comparison tables (replicate 0's)
    carry no mark. With one replicate the same runs of replicate 0 decide it, and the table's rows are marked."""
    from dashboards.compare.render import render_markdown
    from dashboards.table_report import table_verdicts

    runs = _finals(
        {
            "ms.p0.3": [0.60, 0.58, 0.53, 0.55],
            "ms.p0.3.r1": [0.61, 0.58, 0.54, 0.55],
            "bspml.p0.3": [0.64, 0.61, 0.56, 0.58],
            "bspml.p0.3.r1": [0.58, 0.56, 0.52, 0.53],
        }
    )
    two, rows = table_verdicts(_plan(2), runs, "test/recall_at_1")
    (verdict,) = two.verdicts
    assert verdict.label == OPEN and verdict.evidence.replicates == (2, 2) and len(rows) == 1
    tables = render_markdown(two).split("Legend")[0]
    assert not any(r.significant for r in two.rows) and "]*" not in tables and ")*" not in tables
    first = runs.filter(~pl.col(R.GROUP).str.ends_with(".r1"))
    one, _ = table_verdicts(_plan(1), first, "test/recall_at_1")
    assert one.verdicts[0].label == BETTER and any(r.significant for r in one.rows)
    margin = dataclasses.replace(_plan(2), written={**_plan(2).written, "verdict": {"margin": 0.5}})
    (wide,) = table_verdicts(margin, runs, "test/recall_at_1")[0].verdicts
    assert wide.label == "equivalent within ±0.5"


def test_a_table_without_replicates_says_what_three_would_cost():
    """The cost of ``search.replicates: 3``: three times the table's model-epochs and its bill's hours, from
    :mod:`study.bill` (the quick table at an assumed 3 s a model-epoch)."""
    from dashboards.table_report import replicates_cost
    from study.bill import estimated_hours, model_epochs

    plan = _plan(1, epoch_seconds=3)
    line = replicates_cost(plan, None)
    three = _plan(3, epoch_seconds=3)
    assert f"= {model_epochs(three):.0f}" in line and f"{model_epochs(plan):.0f} model-epochs" in line
    hours = estimated_hours(three)
    assert hours is not None and f"≈ {hours:.1f} h on 2 slots" in line
