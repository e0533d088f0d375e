"""What ``search.metric`` may name comes from the metric registry, the dataset and the family (no hand list)."""

from __future__ import annotations

import pytest

from study.intake.spec_reader import load_spec
from tests.conftest import REPO
from trainables.schema.errors import SpecError

THESIS = REPO / "search_spaces" / "thesis_2d.yaml"


@pytest.mark.parametrize("metric", ["test/paired_mae", "test/paired_cosine"])
def test_the_thesis_table_1_metrics_are_searchable_on_paired_data(metric):
    """The drift issue 25 found: trials on flows2d report them, and validation used to refuse them."""
    spec = load_spec(THESIS, [f"search.metric={metric}", "search.mode=min"])
    assert spec.search.metric == metric


def test_paired_metrics_are_refused_where_no_trial_reports_them():
    with pytest.raises(SpecError) as err:
        load_spec(REPO / "search_spaces" / "ms_digits.yaml", ["search.metric=test/paired_mae"])
    assert "search.metric 'test/paired_mae' is not reported" in str(err.value)


def test_an_unknown_metric_is_one_line_listing_the_known_ones():
    with pytest.raises(SpecError) as err:
        load_spec(THESIS, ["search.metric=test/paired_mse"])
    msg = str(err.value)
    assert "\n" not in msg and "search.metric 'test/paired_mse' is not reported" in msg
    for known in ("'test/paired_mae'", "'test/paired_cosine'", "'test/recall_at_1'", "'train/loss'"):
        assert known in msg


def test_a_family_metric_is_searchable_for_its_family_only():
    bspml = load_spec(REPO / "search_spaces" / "bspml_digits.yaml", ["search.metric=maw", "search.mode=max"])
    assert bspml.search.metric == "maw"
    with pytest.raises(SpecError, match="search.metric 'maw' is not reported"):
        load_spec(REPO / "search_spaces" / "ms_digits.yaml", ["search.metric=maw"])
