"""The comparisons over the search's own variance (``search.replicates`` > 1), read from a runs frame as the
dashboards load it: each final run's ``group`` names its replicate's cell, the rows hold the statistics of
:func:`dashboards.stats.replicated_difference` and :func:`dashboards.stats.probability_of_improvement` (tested on
their own in test_stats.py), and the verdicts are decided from them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from dashboards import stats
from dashboards.compare.cells import Cell
from dashboards.compare.replicates import replicate_rows, replicate_values, replicates_legend
from dashboards.compare.verdicts import OPEN, judge, replicate_evidence
from dashboards.load import METRIC, DashboardData
from study.intake.cells import parse_table
from study.intake.layout import StudyLayout
from trainables.schema import record as R

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"

METRIC_NAME = "test/recall_at_1"
# Replicate → seed → value; ms's replicates differ by 0.01, bspml's by 0.03 (replicate 1 flips the sign).
MS = {"ms.p0.2": [0.80, 0.82, 0.81], "ms.p0.2.r1": [0.81, 0.83, 0.82]}
BSPML = {"bspml.p0.2": [0.83, 0.84, 0.85], "bspml.p0.2.r1": [0.80, 0.81, 0.80]}
REPLICATE_OF = {"ms.p0.2": 0, "ms.p0.2.r1": 1, "bspml.p0.2": 0, "bspml.p0.2.r1": 1}


def _runs(groups: dict[str, list[float]] | None = None) -> pl.DataFrame:
    rows = [
        {
            R.STAGE: R.STAGE_FINAL,
            "status": "FINISHED",
            METRIC + METRIC_NAME: value,
            R.FAMILY: group.split(".")[0],
            R.NOISE_KIND: "per_class",
            R.NOISE_RATIO: "0.2",
            R.SUBSET: "",
            R.SEED: str(seed),
            R.GROUP: group,
            "experiment": "t",
        }
        for group, values in (groups or {**MS, **BSPML}).items()
        for seed, value in enumerate(values)
    ]
    return pl.DataFrame(rows)


def test_replicate_rows_pair_each_arm_with_the_reference_over_its_replicates():
    values = replicate_values(_runs(), METRIC_NAME, REPLICATE_OF)
    cell = Cell("bspml", "per_class", 0.2, "all")
    assert values[cell] == [dict(enumerate(BSPML["bspml.p0.2"])), dict(enumerate(BSPML["bspml.p0.2.r1"]))]
    (row,) = replicate_rows(values, "ms")
    assert row.cell == cell and row.reference == Cell("ms", "per_class", 0.2, "all") and row.replicates == (2, 2)
    assert row.difference == stats.replicated_difference(values[cell], values[row.reference])
    assert row.improvement == stats.probability_of_improvement(values[cell], values[row.reference])
    # Per seed, bspml's replicate 0 beats both of ms's replicates and its replicate 1 neither, but for seed 0's tie
    # with ms's replicate 0 (0.80 = 0.80: ½): (2.5 + 2 + 2) / 12.
    assert row.improvement is not None and row.improvement.value == pytest.approx(6.5 / 12)
    (verdict,) = judge(replicate_evidence([row]), METRIC_NAME)
    assert verdict.label == OPEN and verdict.evidence.replicates == (2, 2)  # the two searches disagree
    assert "2×2 replicates × 3 seeds" in verdict.line()


def test_a_replicate_without_final_runs_is_left_out_of_its_comparison_and_said_in_one_line():
    """Three replicates; bspml's replicate 1 has no final runs: the comparison pools bspml's replicates 0 and 2 against
    ms's three (the interval of :func:`study.final.intervals.replicated_delta` over them), and one line below the
    verdicts says which replicate is missing and why."""
    from study.final.intervals import replicated_delta

    ms_r2 = [0.79, 0.80, 0.80]
    bspml_r2 = [0.82, 0.84, 0.83]
    groups = {**MS, "ms.p0.2.r2": ms_r2, "bspml.p0.2": BSPML["bspml.p0.2"], "bspml.p0.2.r2": bspml_r2}
    replicate_of = {**REPLICATE_OF, "ms.p0.2.r2": 2, "bspml.p0.2.r2": 2}
    values = replicate_values(_runs(groups), METRIC_NAME, replicate_of)
    cell, ref = Cell("bspml", "per_class", 0.2, "all"), Cell("ms", "per_class", 0.2, "all")
    assert values[cell][1] == {} and len(values[ref]) == 3
    (row,) = replicate_rows(values, "ms")
    kept_x, kept_y = [values[cell][0], values[cell][2]], values[ref]
    assert row.replicates == (2, 3)
    expected = replicated_delta(kept_x, kept_y)
    assert expected is not None
    assert (row.difference.delta, row.difference.low, row.difference.high) == pytest.approx(expected[:3], abs=1e-12)
    text = "\n".join(replicates_legend([row], "ms", 3))
    line = (
        "bspml (per_class p=0.2): replicate 1 has no final values (none of its final runs finished): pooled over "
        "replicates 0, 2"
    )
    assert line in text and text.count(line) == 1
    (verdict,) = judge(replicate_evidence([row]), METRIC_NAME)
    assert "2×3 replicates × 3 seeds" in verdict.line()


def _saved_table(tmp_path: Path, replicates: int) -> str:
    """A study directory as a table run leaves it (``spec.yaml``, ``table.yaml``) with ``replicates``, no runs."""
    raw = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())
    del raw["search"]["metric"]  # saved as null, as a table that leaves it to its default is (the cells' own)
    table = parse_table({**raw, "storage": str(tmp_path), "search": {**raw["search"], "replicates": replicates}})
    layout = StudyLayout.for_spec(table.base)
    layout.mkdir()
    Path(layout.spec_file).write_text(yaml.safe_dump(table.base.model_dump(mode="json")))
    Path(layout.table_file).write_text(yaml.safe_dump(table.written))
    return layout.root


def test_the_comparison_command_reads_a_replicated_tables_replicate_0(tmp_path, monkeypatch):
    """``python -m dashboards.compare`` on a table with R = 2: the final runs of replicate 0 only (R searched winners
    per cell are not more seeds of one configuration), with a note; on a table of one replicate, every run."""
    from dashboards.compare import cli

    runs = _runs().with_columns(pl.col(R.GROUP).str.replace("p0.2", "p0.3"))  # the quick table's cells
    search = pl.DataFrame({R.STAGE: [R.STAGE_SEARCH], "status": ["FINISHED"], R.GROUP: [None]}, strict=False)
    data = DashboardData("", [], pl.concat([runs, search], how="diagonal_relaxed"), *[pl.DataFrame()] * 3)
    monkeypatch.setattr(cli, "read_study", lambda study: data)
    notes: list[str] = []
    two = cli.read_compared(_saved_table(tmp_path / "two", 2), notes)
    finals = two.runs.filter(pl.col(R.STAGE) == R.STAGE_FINAL)
    assert sorted(set(finals[R.GROUP])) == ["bspml.p0.3", "ms.p0.3"] and len(finals) == 6
    assert len(two.runs.filter(pl.col(R.STAGE) == R.STAGE_SEARCH)) == 1  # the search's runs stay
    assert len(notes) == 1 and "2 search replicates: replicate 0's final runs" in notes[0]
    one = cli.read_compared(_saved_table(tmp_path / "one", 1), notes)
    assert one.runs.equals(data.runs) and len(notes) == 1


def test_the_dashboard_shows_a_replicated_studys_replicate_0_and_says_so():
    """``DashboardData.first_replicate`` (the page's panels): with ``replicates`` R = 2 the final runs of replicate 1
    are left out (R searches' winners are not more seeds of one), the search runs stay, and the page says so; with
    R = 1 nothing changes. Replicates are told apart by their labels (``R.replicate_of``, the writers' own rule)."""
    from dashboards.load import StudyInfo

    assert {group: R.replicate_of(group) for group in REPLICATE_OF} == REPLICATE_OF
    assert R.replicate_of("t_rep.r12") == 12 and R.replicate_of("t.r") == R.replicate_of("p0.r1x") == 0
    assert R.replicate_label("ms.p0.2", 0) == "ms.p0.2" and R.replicate_label("ms.p0.2", 3) == "ms.p0.2.r3"
    search = pl.DataFrame({R.STAGE: [R.STAGE_SEARCH], "status": ["FINISHED"], R.GROUP: [""], "experiment": ["t"]})
    runs = pl.concat([_runs(), search], how="diagonal_relaxed")

    def data(replicates: int) -> DashboardData:
        info = StudyInfo("t", "1", None, None, None, METRIC_NAME, "max", 3, {}, None, replicates=replicates)
        return DashboardData("", [info], runs, *[pl.DataFrame()] * 3)

    shown = data(2).first_replicate()
    finals = shown.runs.filter(pl.col(R.STAGE) == R.STAGE_FINAL)
    assert sorted(set(finals[R.GROUP])) == ["bspml.p0.2", "ms.p0.2"] and len(finals) == 6
    assert len(shown.runs.filter(pl.col(R.STAGE) == R.STAGE_SEARCH)) == 1
    (note,) = shown.replicate_notes()
    assert "searched 2 times (search.replicates)" in note and "replicate 0's winner" in note
    assert data(1).first_replicate().runs.equals(runs) and data(1).replicate_notes() == []


def test_a_tables_replicate_labels_are_the_rule_the_dashboard_reads(tmp_path):
    """Every cell of a table with R = 3 is named by ``R.replicate_label``, so ``R.replicate_of`` gives its replicate."""
    raw = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())
    table = parse_table({**raw, "storage": str(tmp_path), "search": {**raw["search"], "replicates": 3}})
    assert [R.replicate_of(c.label) for c in table.cells] == [c.replicate for c in table.cells]
    assert {c.replicate for c in table.cells} == {0, 1, 2}
