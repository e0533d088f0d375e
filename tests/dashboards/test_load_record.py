"""The loader reads the study through ``schema.record``: the search space from ``spec.yaml`` (as the tuner writes it)
agrees with the one the parent run's flattened params give, and a store without its directory falls back to them;
the weight tables are read by the record's file names and columns."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import yaml

from dashboards.load import _class_weight_table, _params_space, _sample_weight_table, _spec_space
from schema import record as R
from schema.trial import flatten
from study.credentials import redacted_spec
from study.loading import load_spec

REPO = Path(__file__).resolve().parents[2]


def test_spec_yaml_space_matches_the_parent_params_and_falls_back(tmp_path):
    spec = load_spec(str(REPO / "search_spaces" / "bspml_digits.yaml"), [], family_rules=False)
    (tmp_path / R.SPEC_FILE).write_text(yaml.safe_dump(redacted_spec(spec), sort_keys=False))
    # What study.tuner logs on the parent run: the spec flattened, values as MLflow's strings.
    params = {k: str(v) for k, v in flatten(spec.model_dump(mode="json", include={"search"})).items()}
    from_spec = _spec_space(str(tmp_path))
    assert from_spec == _params_space(params)
    assert from_spec == {name: bool(getattr(dim, "log", False)) for name, dim in spec.search.space.items()}
    assert any(from_spec.values()) and not all(from_spec.values())  # the log flag is read, not defaulted
    assert _spec_space(str(tmp_path / "gone")) is None and _spec_space(None) is None
    (tmp_path / R.SPEC_FILE).write_text("search: [unclosed")
    assert _spec_space(str(tmp_path)) is None


def test_weight_tables_by_the_record_columns():
    history = pl.DataFrame({c: [1, 2] for c in R.CLASS_WEIGHTS_COLUMNS})
    table = _class_weight_table(history)
    assert table is not None and table.columns == ["epoch", "class", "avg_weight"]
    assert table["avg_weight"].to_list() == [1.0, 2.0]
    samples = pl.DataFrame(
        {R.SAMPLE_INDEX: [0, 1], R.SAMPLE_LABEL: [3, 3], R.SAMPLE_NOISY: [True, False], R.SAMPLE_WEIGHT: [0.1, 0.9]}
    )
    assert _sample_weight_table(samples).rows() == [(0.1, True), (0.9, False)]
    # A per-sample table is not a class history, nor the other way round.
    assert _class_weight_table(samples) is None and _sample_weight_table(history) is None
