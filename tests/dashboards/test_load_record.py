"""The loader reads the study through ``trainables.schema.record``: the search space from ``spec.yaml`` (as the tuner writes it)
agrees with the one the parent run's flattened params give, and a store without its directory falls back to them;
the weight tables are read by the record's file names and columns."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import yaml

from dashboards.artifacts import class_weight_table, sample_weight_table
from dashboards.study_info import _params_space, _spec_space
from study.intake.spec_reader import load_spec
from study.tracking.credentials import redacted_spec
from trainables.schema import record as R
from trainables.schema.trial import flatten

REPO = Path(__file__).resolve().parents[2]


def test_spec_yaml_space_matches_the_parent_params_and_falls_back(tmp_path):
    spec = load_spec(str(REPO / "search_spaces" / "bspml_digits.yaml"), [], family_rules=False)
    (tmp_path / R.SPEC_FILE).write_text(yaml.safe_dump(redacted_spec(spec), sort_keys=False))
    # What study.search.driver logs on the parent run: the spec flattened, values as MLflow's strings.
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
    table = class_weight_table(history)
    assert table is not None and table.columns == ["epoch", "class", "avg_weight"]
    assert table["avg_weight"].to_list() == [1.0, 2.0]
    samples = pl.DataFrame(
        {R.SAMPLE_INDEX: [0, 1], R.SAMPLE_LABEL: [3, 3], R.SAMPLE_NOISY: [True, False], R.SAMPLE_WEIGHT: [0.1, 0.9]}
    )
    assert sample_weight_table(samples).rows() == [(0.1, True), (0.9, False)]
    # A per-sample table is not a class history, nor the other way round.
    assert class_weight_table(samples) is None and sample_weight_table(history) is None


def test_final_groups_show_the_parent_runs_stored_summary_else_compute_it(tmp_path):
    """A store whose parent run holds ``final_summary.csv`` (written with ``study.final.stage.summary_csv``): the
    leaderboard's final groups carry the stored numbers; the same store without the file is summarised from its
    final runs with the t-interval. The stored mean is set apart from the runs' mean so the source is visible."""
    from mlflow import MlflowClient

    from dashboards.load import load
    from dashboards.select import final_groups
    from study.final.intervals import t_interval
    from study.final.stage import FinalGroup, summary_csv
    from tests.dashboards.compare.test_compare import make_study

    finals = {("ms", 0.2, "all"): {0: 0.60, 1: 0.58, 2: 0.53}}
    study_dir = make_study(tmp_path, "stored", finals)
    uri = f"sqlite:///{study_dir / 'mlflow.db'}"
    metric = "test/recall_at_1"

    computed = final_groups(load(uri, ["stored"], tmp_path / "a"), (metric,))
    mean, std, low, high = t_interval([0.60, 0.58, 0.53])
    assert computed["stored"].to_list() == [False]
    assert computed[f"mean_{metric}"].to_list() == [mean] and computed[f"hi_{metric}"].to_list() == [high]

    group = FinalGroup("ms 0.2 all", "ms_search", {metric: [0.70, 0.71, 0.72]})  # not the runs' values
    client = MlflowClient(uri)
    parent = client.search_runs(
        [client.get_experiment_by_name("stored").experiment_id], "tags.`dmlstudy.role` = 'study'"
    )
    client.log_text(parent[0].info.run_id, summary_csv([group]), R.FINAL_SUMMARY_FILE)
    data = load(uri, ["stored"], tmp_path / "b")
    assert data.final_summary["group"].to_list() == ["ms 0.2 all"]
    shown = final_groups(data, (metric,))
    s_mean, s_std, s_low, s_high = t_interval([0.70, 0.71, 0.72])
    assert shown["stored"].to_list() == [True]
    for prefix, value in (("mean_", s_mean), ("std_", s_std), ("lo_", s_low), ("hi_", s_high)):
        assert shown[prefix + metric].to_list() == [value]  # the CSV holds the exact values
    assert (
        shown[f"n_{metric}"].to_list() == [3] and shown["source_trial"].to_list() == computed["source_trial"].to_list()
    )
