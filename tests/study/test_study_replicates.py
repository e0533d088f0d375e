"""A study gets what a table has (issue 50 item 6; a study is a table of one arm): ``search.replicates`` (each replicate
its own Optuna study at seed + r, each winner retrained on the same final seeds, the final stage pooled over replicates
and seeds), a bill measured before it starts when it sets ``search.max_hours`` (a refusal over it, nothing written),
and the bill against the actual cost after it. The run is real (Ray Tune, Optuna, MLflow); its numbers are checked
against MLflow and Optuna read back."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import polars as pl
import pytest

from dashboards.load import load
from harness.driver import final_runs_finished, honest_spec, mlflow_children, optuna_trials
from harness.kill_resume import kill_then_resume
from study.final.intervals import replicated_mean
from study.intake.plan import VIEW_CELLS, StudyPlan
from study.intake.spec_reader import parse_spec
from trainables.schema import record as R
from trainables.schema.errors import SpecError


def _replicated(name: str, tmp_path, **search: object) -> dict:
    spec = honest_spec(name)
    spec["search"] = {**spec["search"], "num_trials": 2, "max_concurrent": 2, "replicates": 2, **search}
    spec["train"] = {**spec["train"], "epochs": 2}
    spec["final"] = {"seeds": 2}
    spec["storage"] = str(tmp_path / "runs")
    return spec


def test_replicates_are_cells_at_seed_plus_r_and_refuse_final_group_by():
    spec = parse_spec({**honest_spec("t_plan"), "search": {**honest_spec()["search"], "replicates": 3}})
    plan = StudyPlan.of_study(spec)
    assert [c.label for c in plan.cells] == ["t_plan", "t_plan.r1", "t_plan.r2"]
    seed = spec.search.sampler.seed
    assert [c.spec.search.sampler.seed for c in plan.cells] == [seed, seed + 1, seed + 2]
    assert all(c.spec.search.replicates == 1 and c.spec.search.num_trials == spec.search.num_trials for c in plan.cells)
    assert plan.groups_are_cells and plan.view == VIEW_CELLS and plan.base is spec
    assert plan.search_trials == 3 * spec.search.num_trials
    assert spec.model_dump(mode="json")["search"]["replicates"] == 3
    # At their defaults the keys are not dumped: a study started before them resumes (its spec.yaml, Ray's param space).
    assert not {"replicates", "max_hours", "epoch_seconds"} & set(parse_spec(honest_spec()).model_dump()["search"])
    single = StudyPlan.of_study(parse_spec(honest_spec("t_one")))
    assert [c.label for c in single.cells] == ["t_one"] and not single.groups_are_cells  # as before replicates
    grouped = honest_spec("t_group")
    grouped["search"] = {**grouped["search"], "replicates": 2}
    grouped["final"] = {"seeds": 2, "group_by": ["ms_alpha"]}
    with pytest.raises(SpecError, match="search.replicates retrains each replicate's winner"):
        parse_spec(grouped)


def test_the_pooled_interval_is_the_seeds_alone_for_identical_replicates_and_wider_when_they_disagree():
    seeds = {0: 0.60, 1: 0.64, 2: 0.58, 3: 0.66}
    one = replicated_mean([seeds])
    assert one is not None and one[0] == pytest.approx(np.mean(list(seeds.values()))) and one[3] == 4
    same = replicated_mean([seeds, dict(seeds), dict(seeds)])
    assert same == pytest.approx(one)  # replicates that agree add no width
    apart = replicated_mean([seeds, {s: v + 0.10 for s, v in seeds.items()}])
    assert apart is not None and apart[0] == pytest.approx(one[0] + 0.05)
    assert apart[2] - apart[1] > (one[2] - one[1]) + 0.05  # the search's own spread widens it
    assert replicated_mean([{0: 0.5}, {0: 0.6}]) is None  # one common seed: nothing to resample


@pytest.mark.usefixtures("on_warm_head")
@pytest.mark.e2e
def test_a_replicated_study_runs_each_replicate_and_reports_the_pooled_final_stage_and_its_bill(
    tmp_path, write_spec, run_cli
):
    spec = write_spec(_replicated("t_rep", tmp_path, max_hours=5))
    proc = run_cli(str(spec), "--no-dashboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    size = out.splitlines()[0]
    assert size.startswith("Study t_rep: 2 replicates × 2 trials × 2 epochs") and "measured on cpu: ms " in size
    study_dir = tmp_path / "runs" / "t_rep"
    r0, r1 = optuna_trials(study_dir, "t_rep"), optuna_trials(study_dir, "t_rep.r1")
    assert [t.state.name for t in r0] == [t.state.name for t in r1] == ["COMPLETE", "COMPLETE"]
    assert r0[0].params != r1[0].params  # replicate 1 samples from its own seed
    _, parents, children = mlflow_children(study_dir, "t_rep")
    finals = [c for c in children if c.data.tags.get(R.STAGE) == R.STAGE_FINAL and c.info.status == "FINISHED"]
    assert sorted(c.data.tags[R.GROUP] for c in finals) == ["t_rep", "t_rep", "t_rep.r1", "t_rep.r1"]
    # One best per replicate, the one its final stage retrained: printed, and replicate 0's on the parent (issue 59).
    retrained = {c.data.tags[R.GROUP]: c.data.tags[R.SOURCE_TRIAL] for c in finals}
    printed = dict(re.findall(r"^Best trial \(replicate (\d+)\) (\S+): ", out, re.MULTILINE))
    assert printed == {"0": retrained["t_rep"], "1": retrained["t_rep.r1"]}, out[-3000:]
    assert parents[0].data.tags[R.BEST_TRIAL_ID] == retrained["t_rep"]
    pooled = np.mean([c.data.metrics["test/recall_at_1"] for c in finals])
    line = next(x for x in out.splitlines() if x.strip().startswith("test/recall_at_1 = ") and "replicates ×" in x)
    assert math.isclose(float(line.split("=")[1].split()[0]), pooled, abs_tol=5e-5), line
    assert "over 2 replicates × 2 seeds" in line
    assert "whole-run slot use:" in out and "Bill against actual (measured bill on 2 slots)" in out
    assert "h wall (this driver's)" in out
    walls = [json.loads(x) for x in (study_dir / R.DRIVER_WALLS_FILE).read_text().splitlines()]
    assert [(w["resumed"], w["exit_code"]) for w in walls] == [(False, 0)]
    status = run_cli(str(spec), "--status")
    assert status.returncode == 0 and "4 done (4 complete, 0 pruned), 0 running, 0 failed, of 4" in status.stdout
    # The dashboard's panels read replicate 0's final runs (its parent's search.replicates param), and say so.
    (tmp_path / "scratch").mkdir()
    data = load(R.sqlite_uri(study_dir / R.MLFLOW_DB), ["t_rep"], tmp_path / "scratch", details=False)
    shown = data.first_replicate()
    assert data.studies[0].replicates == 2 and len(shown.replicate_notes()) == 1
    assert shown.runs.filter(pl.col(R.STAGE) == R.STAGE_FINAL)[R.GROUP].to_list() == ["t_rep", "t_rep"]


def test_a_study_over_max_hours_is_refused_before_anything_is_written(tmp_path, write_spec, monkeypatch, capsys):
    from study.commands.run import main

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    spec = write_spec(_replicated("t_over", tmp_path, replicates=1, max_hours=1e-6))
    assert main([str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: search.max_hours: the study needs ≈ "), err
    assert "measured on cpu" in err[0] and "FIFO ≈" in err[0] and "with halving (search.scheduler:" in err[0]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ray").exists()


@pytest.mark.e2e
def test_a_replicated_study_killed_while_one_replicate_retrains_resumes_every_trial_and_seed_once(tmp_path):
    """SIGKILL of the driver and its Ray once a final run of one replicate has finished (that replicate in its final
    stage, the other still searching or about to retrain), then ``--resume``: each replicate has exactly its budget of
    COMPLETE trials and each (replicate, seed) exactly one FINISHED final run, read back from Optuna and MLflow."""
    spec = _replicated("t_rep_kill", tmp_path)
    del spec["storage"]  # the harness's default (runs/ in tmp_path)
    spec["train"] = {**spec["train"], "epochs": 3}
    out = kill_then_resume(tmp_path, spec, lambda d: final_runs_finished(d) >= 1)
    assert not out["finished_before_kill"], out["first_output"][-2000:]  # 3 more final runs were still due
    resumed = out["resumed"]
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    study_dir = out["study_dir"]
    for name in ("t_rep_kill", "t_rep_kill.r1"):
        states = [t.state.name for t in optuna_trials(study_dir, name)]
        assert states.count("COMPLETE") == 2, (name, states, resumed.stdout[-3000:])
    _, _, children = mlflow_children(study_dir, "t_rep_kill")
    every_final = [
        (c.data.tags[R.GROUP], c.data.params.get("seed"), c.info.status, c.data.tags.get(R.RAY_EXPERIMENT))
        for c in children
        if c.data.tags.get(R.STAGE) == R.STAGE_FINAL
    ]
    finished = [
        (c.data.tags[R.GROUP], c.data.params.get("seed"))
        for c in children
        if c.data.tags.get(R.STAGE) == R.STAGE_FINAL and c.info.status == "FINISHED"
    ]
    assert sorted(finished) == [
        ("t_rep_kill", "0"),
        ("t_rep_kill", "1"),
        ("t_rep_kill.r1", "0"),
        ("t_rep_kill.r1", "1"),
    ], (every_final, resumed.stdout[-3000:])
    assert "Over the 2 replicates" in resumed.stdout
    # The SIGKILLed driver left no wall record: the whole-run line says its wall is this driver's only (issue 60).
    assert "(wall: this driver's only: an earlier driver left no record)" in resumed.stdout
