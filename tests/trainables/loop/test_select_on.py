"""``search.select_on`` (issue 59 part 2): what ranks a trial. ``{mean_last: k}`` reports, every epoch, the mean of
the trial's last k values of the search metric as ``search.objective``, carried through its checkpoint, and the
per-class record the reliability bootstrap reads is that mean class by class; the spec refuses a bad value in one line;
every ranker (searcher, schedulers, live view) is handed the objective, not the metric."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.driver import honest_spec
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.search.tuners import _live_view, cell_scheduler
from trainables.loop import TrialRun
from trainables.metrics.per_class import from_record
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.metric_names import mean_last
from trainables.schema.space import SearchSpec


def _spec(select_on, **search):
    raw = honest_spec()  # 2 class-disjoint folds of digits, val/recall_at_1
    return parse_spec({**raw, "search": {**raw["search"], "select_on": select_on, **search}})


def test_the_objective_is_the_metric_under_last_and_a_named_mean_under_mean_last():
    assert _spec("last").search.objective == "val/recall_at_1"
    # (honest_spec trains 2 epochs: a mean over more is refused, tests/trainables/schema/test_select_on_epochs.py)
    assert _spec({"mean_last": 2}).search.objective == "val/mean_last_2/recall_at_1" == mean_last(2, "val/recall_at_1")
    # A spec that leaves it at "last" dumps as before (a resumed study compares its spec.yaml key by key).
    assert "select_on" not in SearchSpec().model_dump(mode="json")
    assert SearchSpec(select_on={"mean_last": 2}).model_dump(mode="json")["select_on"] == {"mean_last": 2}


@pytest.mark.parametrize("bad", ["mean", {"mean_last": 1}, {"mean_last": "3"}, {"mean_last": True}, {"k": 3}, 3])
def test_a_bad_select_on_is_one_line_naming_the_key(bad):
    with pytest.raises(SpecError) as e:
        _spec(bad)
    assert "search.select_on" in str(e.value) and "\n" not in str(e.value)


def test_mean_last_reports_the_mean_of_the_last_k_epochs_through_a_checkpoint(tmp_path):
    spec = _spec({"mean_last": 2})
    metric, objective = spec.search.metric, spec.search.objective
    run = TrialRun.build(spec)
    values, records = [], []
    for _ in range(2):
        m = run.run_epoch()
        values.append(m[metric])
        assert m[objective] == pytest.approx(np.mean(values[-2:]))  # epoch 1: the mean of the one so far
        records.append(json.loads(run.class_record()[R.VAL_PER_CLASS]))
    run.save(tmp_path)
    resumed = TrialRun.build(spec)
    resumed.restore(tmp_path)
    m = resumed.run_epoch()
    values.append(m[metric])
    assert m[objective] == pytest.approx((values[1] + values[2]) / 2)  # epoch 2's value came from the checkpoint
    # The record is each class's mean over the last 2 epochs: per fold its value is the mean of the fold's values,
    # and the mean over folds is the objective (what the bootstrap resamples is what ranked the trial).
    record = json.loads(resumed.class_record()[R.VAL_PER_CLASS])
    folds = [from_record(f).value for f in record["folds"]]
    assert np.mean(folds) == pytest.approx(m[objective], abs=1e-5)
    assert record["folds"][0]["classes"] == records[0]["folds"][0]["classes"]


def test_last_reports_no_objective_of_its_own_and_the_final_stage_ranks_nothing():
    m = TrialRun.build(_spec("last")).run_epoch()
    assert not any("mean_last" in k for k in m)
    final = TrialRun.build(_spec({"mean_last": 2}), final=True)
    assert final.select_k == 1 and not any("mean_last" in k for k in final.run_epoch())


@pytest.mark.parametrize("scheduler", [{"type": "halving", "first_rung": 1}, {"type": "asha"}])
def test_every_ranker_is_handed_the_objective(tmp_path, scheduler):
    spec = _spec({"mean_last": 2}, scheduler=scheduler)
    plan = StudyPlan.of_study(spec)
    from study.intake.layout import StudyLayout

    sch = cell_scheduler(plan, StudyLayout.for_spec(spec.model_copy(update={"storage": str(tmp_path)})))
    assert sch._metric == spec.search.objective  # halving's rule and ASHA's rungs alike
    assert _live_view(plan).metric == spec.search.objective


def test_the_printed_best_is_the_objective_of_the_trial_it_names():
    # Under mean_last the best trial by its mean need not be the best by its last epoch, and the value the console
    # and the parent run's best_<objective> show is its mean, not its last value.
    from ray.tune import Result

    from study.search.outcome import summarize

    spec = _spec({"mean_last": 2})
    metric, objective, epochs = spec.search.metric, spec.search.objective, spec.train.epochs

    def result(trial: str, last: float, mean: float) -> Result:
        metrics = {metric: last, objective: mean, "epoch": epochs}
        return Result(metrics=metrics, checkpoint=None, error=None, path=f"/x/trial_{trial}")

    results = [result("a", last=0.9, mean=0.5), result("b", last=0.6, mean=0.7)]
    outcome = summarize(spec, results, {"a": 0, "b": 1}, None)
    assert (outcome.best_trial_id, outcome.best_value) == ("b", 0.7)
    assert outcome.cell_bests == {spec.name: ("b", 0.7)}
