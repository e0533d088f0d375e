"""Table specs (issue 36): the shipped tables validate, cells are built per arm × condition with shared settings,
anything that would give arms different budgets, folds or data is one line and exit 2 before anything starts, and
the dispatching searcher gives every cell exactly its budget (real Optuna, in-memory storage)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import yaml

from study.bill import estimated_hours, model_epochs, size_line
from study.cell_status import edge_flag
from study.intake.cells import parse_table
from study.intake.load import load_plan
from trainables.schema.errors import SpecError
from trainables.schema.space import FloatParam
from trainables.schema.trial import CELL_KEY

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"

QUICK = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())


def _table(**changes):
    raw = copy.deepcopy(QUICK)
    raw.update(changes)
    return raw


def test_the_shipped_tables_validate_with_their_sizes():
    quick = load_plan(SPACES / "table_glyphs_quick.yaml")
    assert [c.label for c in quick.cells] == ["ms.p0", "ms.p0.3", "bspml.p0", "bspml.p0.3"]
    assert quick.search_trials == 16 and quick.final_runs == 8
    assert size_line(quick).startswith(
        "Table table_glyphs_quick: 2 arms × 2 cells × 4 trials × 4 epochs = 16 search trials (4 folds), "
        "then 4 × 2 final seeds = 8 final runs"
    )
    glyphs = load_plan(SPACES / "table_glyphs.yaml")
    assert {c.arm for c in glyphs.cells} == {"ms", "bspml", "spl", "prism", "knn_rejection"}
    assert sorted({c.condition["dataset.noise.ratio"] for c in glyphs.cells}) == [0.0, 0.2, 0.4]
    assert glyphs.trials_per_cell == 8 and glyphs.written["final"]["seeds"] == 7
    assert next(c for c in glyphs.cells if c.arm == "prism").spec.params["rate"] == "estimated"
    fixed = load_plan(SPACES / "table_glyphs_fixed.yaml")  # the same table at the fixed grid's settings
    assert [c.label for c in fixed.cells] == [c.label for c in glyphs.cells] and fixed.search_trials == 15
    assert all(not c.spec.search.space for c in fixed.cells) and fixed.written["final"] == glyphs.written["final"]
    for arm in ("ms", "bspml", "spl", "knn_rejection"):  # docs/notebook/noise_grid.md's configurations
        grid = yaml.safe_load((SPACES / "noise_grid_glyphs" / f"{arm}.yaml").read_text())["params"]
        assert fixed.written["arms"][arm]["params"] == grid
    kept = ("name", "arms", "search")
    assert {k: v for k, v in fixed.written.items() if k not in kept} == {
        k: v for k, v in glyphs.written.items() if k not in kept
    }
    cub = load_plan(SPACES / "table_cub.yaml")
    assert [c.label for c in cub.cells] == ["ms.p0.1", "ms.p0.2", "ms.p0.3", "bspml.p0.1", "bspml.p0.2", "bspml.p0.3"]
    # ≈ 40 h: (96 trials × 3 fold-models + 30 final runs) × 60 epochs × 30 s / 4 at a time
    assert estimated_hours(cub) == pytest.approx((96 * 3 + 30) * 60 * 30 / 4 / 3600)


@pytest.mark.parametrize("name", ["table_glyphs_quick", "table_glyphs", "table_glyphs_fixed", "table_cub"])
def test_every_cell_shares_data_model_training_folds_and_seeds(name):
    table = load_plan(SPACES / f"{name}.yaml")
    shared = {"model", "train", "validation", "final", "resources", "seed"}
    first = table.cells[0].spec.model_dump(include=shared)
    for cell in table.cells:
        assert cell.spec.model_dump(include=shared) == first
        assert cell.spec.search.num_trials == table.trials_per_cell
        assert cell.spec.dataset.name == table.base.dataset.name
        assert cell.spec.dataset.noise.ratio == cell.condition["dataset.noise.ratio"]
        # a trial asked before cells were stamped is found by its fixed values; a stamped one by its stamp
        assert table.cell_of({**cell.fixed, "sampled": 1.0}).label == cell.label
        assert table.cell_of({CELL_KEY: cell.label}).label == cell.label
    assert table.base.search.num_trials == len(table.cells) * table.trials_per_cell


@pytest.mark.parametrize("name", ["table_glyphs_quick", "table_glyphs", "table_cub"])
def test_bspml_can_choose_to_exclude_nothing(name):
    """Relative ages ≥ 2 make all-ones weights stationary (docs/notebook/bspml.md): the space reaches them for λ0 and λ∞."""
    bspml = next(c for c in load_plan(SPACES / f"{name}.yaml").cells if c.arm == "bspml").spec
    assert bspml.params["lambda_scale"] == "relative"
    assert bspml.search.space["lambda0"].high >= 2.0 and bspml.search.space["lambda_max"].high >= 2.0


def test_knn_rejection_can_choose_its_mildest_rule():
    """With k = 10 the agreement share moves in steps of 0.1: the mildest rule (one agreeing neighbour) is 0.1 itself,
    which a float range never draws (the measured glyphs table picked 0.144, i.e. two neighbours)."""
    knn = next(c for c in load_plan(SPACES / "table_glyphs.yaml").cells if c.arm == "knn_rejection").spec
    assert knn.params["k"] == 10
    assert knn.search.space["agreement"].choices == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_an_extra_cell_for_one_arm_and_condition_labels():
    raw = _table(extra_cells=[{"arms": ["ms"], "set": {"dataset.subset": "clean_only", "dataset.noise.ratio": 0.3}}])
    table = parse_table(raw)
    assert [c.label for c in table.cells][-1] == "ms.clean_only_p0.3"
    assert table.cells[0].condition == {"dataset.noise.ratio": 0.0, "dataset.subset": "all"}
    assert "+ 1 extra" in size_line(table) and table.final_runs == 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arms": {"ms": {"family": "ms", "search": {"num_trials": 8}}}}, "arms.ms: 'search' cannot be set per arm"),
        ({"arms": {"ms": {"family": "ms", "validation": {"folds": 2}}}}, "'validation' cannot be set per arm"),
        ({"arms": {"ms": {"family": "ms", "num_trials": 8}}}, "'num_trials' cannot be set per arm"),
        ({"cells": {"train.epochs": [2, 4]}}, "cells: 'train.epochs' would make cells differ"),
        ({"reference": "spl"}, "reference 'spl' is not an arm"),
        ({"arms": {"ms": {"family": "ms"}, "ms2": {"family": "ms"}}}, "family 'ms' is in two arms"),
        # Early stopping per cell decides on validation scores only, and must be able to stop something.
        (
            {"search": {"scheduler": {"type": "asha"}}, "validation": {"kind": "none"}},
            "would decide on the test classes",
        ),
        ({"search": {"scheduler": {"type": "asha", "grace_period": 4}}}, "grace_period 4 must be below train.epochs"),
        ({"arms": {"ms": {"family": "ms", "params": {"ms_alpha": 2}, "space": {"ms_alpha": {}}}}}, None),
        ({"arms": {"ms": {"family": "ms", "params": {"ms_gamma": 2}}}}, "arms.ms in cell p0"),
        # An arm's space and params name its family's parameters and the allowed training knobs only: nothing that
        # changes a cell's budget, data, noise, validation (an oracle), folds, final stage or seeds.
        *[
            ({"arms": {"ms": {"family": "ms", where: {key: value}}}}, f"arms.ms: {where}: {key!r} is not an arm's to")
            for where, value in (("space", {"type": "int", "low": 1, "high": 4}), ("params", 2))
            for key in (
                "train.epochs",
                "train.batches_per_epoch",
                "train.classes_per_batch",
                "train.samples_per_class",
                "dataset.noise.ratio",
                "dataset.subset",
                "validation.folds",
                "final.seeds",
                "search.num_trials",
                "resources.cpu",
                "model.embedding_dim",
                "seed",
                "family",
            )
        ],
        (
            {
                "arms": {
                    "ms": {
                        "family": "ms",
                        "space": {"validation.labels": {"type": "categorical", "choices": ["clean"]}},
                    }
                }
            },
            "arms.ms: space: 'validation.labels' is not an arm's to search",
        ),
    ],
)
def test_a_table_that_would_treat_arms_differently_is_one_line(change, message):
    with pytest.raises(SpecError) as e:
        parse_table(_table(**change), "t.yaml")
    line = str(e.value)
    assert "\n" not in line and line.startswith("t.yaml")
    if message:
        assert message in line, line


def test_an_arm_may_tune_its_own_training_knobs():
    """The allowed knobs: searched per arm, or fixed per arm (written at their path in the cell's spec)."""
    lr = {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}
    arms = copy.deepcopy(QUICK["arms"])
    arms["ms"]["space"]["train.optimizer.lr"] = lr
    arms["bspml"]["params"]["train.optimizer.weight_decay"] = 1e-4
    arms["bspml"]["params"]["train.optimizer.momentum"] = 0.5
    table = parse_table(_table(arms=arms), "t.yaml")
    ms, bspml = table.cells[0], table.cells[2]
    assert "train.optimizer.lr" in ms.spec.search.space and ms.spec.train.optimizer.weight_decay == 0.0
    assert bspml.spec.train.optimizer.weight_decay == 1e-4 and bspml.spec.train.optimizer.momentum == 0.5
    assert "train.optimizer.weight_decay" not in bspml.spec.params  # a training knob, not a family parameter
    assert bspml.fixed["train.optimizer.weight_decay"] == 1e-4  # what a trial of the cell is given


def test_a_searched_arm_key_the_table_fixes_is_refused_by_the_command_before_anything_is_written(
    tmp_path, write_spec, run_cli
):
    arms = copy.deepcopy(QUICK["arms"])
    arms["ms"]["space"]["train.epochs"] = {"type": "int", "low": 1, "high": 8}
    proc = run_cli(str(write_spec(_table(arms=arms), "bad.yaml")), "--set", f"storage={tmp_path / 'runs'}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: {tmp_path / 'bad.yaml'}: arms.ms: space: 'train.epochs' is not an arm's to search: it is the table's, "
        "the same for every arm (an arm names its family's parameters and train.optimizer.lr, "
        "train.optimizer.weight_decay, train.optimizer.momentum only)"
    ]
    assert proc.stdout == "" and not (tmp_path / "runs").exists()


def test_a_budget_over_max_hours_is_refused_before_anything_starts(tmp_path, write_spec, run_cli):
    raw = _table(search={**QUICK["search"], "epoch_seconds": 60, "max_hours": 1})
    proc = run_cli(str(write_spec(raw)), "--set", f"storage={tmp_path / 'runs'}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "search.max_hours: the table needs ≈ 1.9 h on 2 slots (at 60 s per model-epoch (assumed" in proc.stderr
    assert "FIFO ≈ 1.9 h; with halving (search.scheduler: {type: halving, first_rung: 1" in proc.stderr
    assert not (tmp_path / "runs").exists()
    proc = run_cli(str(write_spec(_table(arms={"ms": {"family": "ms", "validation": {"folds": 2}}}))))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_edge_flags():
    p = FloatParam(type="float", low=1.0, high=2.5)
    assert edge_flag(p, 2.49) == "high end" and edge_flag(p, 1.02) == "low end" and edge_flag(p, 1.8) == ""
    log = FloatParam(type="float", low=10.0, high=1000.0, log=True)
    assert edge_flag(log, 12.0) == "low end" and edge_flag(log, 100.0) == "" and edge_flag(log, 900.0) == "high end"


def test_the_table_searcher_gives_every_cell_its_budget_and_survives_a_pickle():
    from study.search.cell_search import CellSearch

    search, table = _quick_searcher(2, None)
    cells = search.cells
    configs = [search.suggest(f"t{i}") for i in range(8)]
    assert search.suggest("t8") is None  # every cell is full, but a running trial may yet be lost and replaced
    labels = [cfg[CELL_KEY] for cfg in configs]  # each trial stamped with its cell
    assert labels == ["ms.p0", "ms.p0.3", "bspml.p0", "bspml.p0.3"] * 2  # cells advance together
    assert set(configs[0]) == {
        "family",
        "dataset.noise.ratio",
        "ms_base",
        "ms_epsilon",
        "ms_alpha",
        "ms_beta",
        CELL_KEY,
    }
    for i in range(len(configs)):
        search.on_trial_complete(f"t{i}", {"val/recall_at_1": 0.1 * i, "epoch": 4, "training_iteration": 4})
    assert search.suggest("t9") == CellSearch.FINISHED
    studies = [c[2]._ot_study for c in cells]
    assert [len(s.trials) for s in studies] == [2, 2, 2, 2]
    assert [t.state.name for s in studies for t in s.trials] == ["COMPLETE"] * 8
    restored = pickle.loads(pickle.dumps(search.__dict__))
    assert restored["asked"] == [2, 2, 2, 2] and restored["trial_cell"]["t5"] == 1


def _quick_searcher(budget: int, trials_dir: Path | None):
    """The quick table's dispatcher over in-memory Optuna studies (no Ray), and the table."""
    from study.search.cell_search import CellSearch
    from study.search.space import make_sampler, to_optuna
    from study.search.study_search import StudySearch

    table = load_plan(SPACES / "table_glyphs_quick.yaml")
    cells = []
    for c in table.cells:
        s = c.spec.search
        searcher = StudySearch(
            space=to_optuna(s.space), metric=s.metric, mode=s.mode, sampler=make_sampler(s.sampler), max_t=4
        )
        cells.append((c.label, c.fixed, searcher))
    trials_dir = None if trials_dir is None else str(trials_dir)
    return CellSearch(cells, budget=budget, metric="val/recall_at_1", mode="max", trials_dir=trials_dir), table


def test_a_lost_trial_is_replaced_and_a_nan_one_counts_as_evaluated(tmp_path):
    """Ray reports both as errored; the NaN marker the loop leaves in the trial's folder tells them apart. Read back
    from Optuna: every cell ends with its budget of COMPLETE trials, except the NaN trial's cell (evaluated: FAIL,
    marked, not replaced)."""
    from study.search.cell_search import CellSearch
    from trainables.schema import record as R

    search, table = _quick_searcher(2, tmp_path)
    done = {"val/recall_at_1": 0.5, "epoch": 4, "training_iteration": 4}
    ids = [f"t{i}" for i in range(8)]
    configs = {t: search.suggest(t) for t in ids}
    label = {t: c[CELL_KEY] for t, c in configs.items()}
    assert [label[t] for t in ids[:2]] == ["ms.p0", "ms.p0.3"]
    (tmp_path / R.trial_dir("t1")).mkdir()
    (tmp_path / R.trial_dir("t1") / R.NONFINITE_MARKER).write_text("epoch 1, batch 3: loss is not finite")
    search.on_trial_complete("t0", error=True)  # lost: no marker
    search.on_trial_complete("t1", error=True)  # its loss was not finite
    for t in ids[2:]:
        search.on_trial_complete(t, done)
    replacement = search.suggest("t8")
    assert replacement[CELL_KEY] == "ms.p0"  # the lost trial's cell asks again, no other
    assert search.suggest("t9") is None  # every cell has its budget; t8 is still running
    search.on_trial_complete("t8", done)
    assert search.suggest("t10") == CellSearch.FINISHED
    assert search.settle_lost(set()) == ["t0"]  # the search ended whole: the lost trial is told (ReconcileTrials)
    states = {
        c[0]: [(t.state.name, t.user_attrs.get(R.OPTUNA_FAILURE)) for t in c[2]._ot_study.trials] for c in search.cells
    }
    assert states["ms.p0"] == [("FAIL", None), ("COMPLETE", None), ("COMPLETE", None)]
    assert states["ms.p0.3"] == [("FAIL", R.FAILURE_NONFINITE), ("COMPLETE", None)]
    assert states["bspml.p0"] == states["bspml.p0.3"] == [("COMPLETE", None)] * 2


def test_replacements_are_bounded_per_cell():
    """A cell whose every trial is lost takes at most its budget in replacements, then ends short: no endless loop."""
    from study.search.cell_search import CellSearch

    search, table = _quick_searcher(2, None)
    asked: dict[str, list[str]] = {}
    for i in range(100):
        config = search.suggest(f"t{i}")
        if config == CellSearch.FINISHED:
            break
        assert config is not None
        cell = config[CELL_KEY]
        asked.setdefault(cell, []).append(f"t{i}")
        lost = cell == "ms.p0"
        search.on_trial_complete(f"t{i}", None if lost else {"val/recall_at_1": 0.5, "epoch": 4}, error=lost)
    else:
        raise AssertionError("the table never finished")
    assert {c: len(t) for c, t in asked.items()} == {"ms.p0": 4, "ms.p0.3": 2, "bspml.p0": 2, "bspml.p0.3": 2}
    assert search.max_trials >= sum(len(t) for t in asked.values())  # within Ray's num_samples


def test_a_sampled_value_never_overrides_a_cells_fixed_value():
    """Defence behind the spec's allow-list: where the trial's config is built, a clash raises."""
    from study.search.cell_search import CellSearch

    class Sampling:
        def __init__(self, sampled: dict) -> None:
            self.sampled = sampled

        def suggest(self, trial_id: str) -> dict:
            return dict(self.sampled)

    fixed = {"family": "ms", "dataset.noise.ratio": 0.3, "ms_base": 1.0}
    for sampled in ({"dataset.noise.ratio": 0.0}, {"dataset.noise": {"ratio": 0.0}}, {"ms_base": 2.0}):
        search = CellSearch([("ms.p0.3", fixed, Sampling(sampled))], 1, "val/recall_at_1", "max")  # type: ignore[list-item]
        with pytest.raises(RuntimeError, match="would override the cell's fixed values"):
            search.suggest("t0")
    search = CellSearch([("ms.p0.3", fixed, Sampling({"ms_alpha": 2.0}))], 1, "val/recall_at_1", "max")  # type: ignore[list-item]
    assert search.suggest("t0") == {**fixed, "ms_alpha": 2.0, CELL_KEY: "ms.p0.3"}


def test_the_live_table_counts_per_cell_and_estimates_the_time_left(monkeypatch):
    """The per-cell rows and the ETA's arithmetic: this driver's rate per model-epoch applied to what is left."""
    import io
    from types import SimpleNamespace

    from study import progress as live_view
    from study.progress import CellProgress

    table = load_plan(SPACES / "table_glyphs_quick.yaml")  # 16 trials × 4 epochs, 4 folds (cost 3), 8 final runs
    clock = iter([100.0, 100.0, 160.0, 160.0])
    monkeypatch.setattr(live_view.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    progress = CellProgress(table, interval_s=0.0, stream=out)
    cells = table.cells
    trials = [
        SimpleNamespace(
            trial_id="a", status="TERMINATED", config=cells[0].fixed, last_result={"epoch": 4, "val/recall_at_1": 0.5}
        ),
        SimpleNamespace(
            trial_id="b", status="RUNNING", config=cells[2].fixed, last_result={"epoch": 2, "val/recall_at_1": 0.4}
        ),
    ]
    progress.on_trial_start(0, trials, trials[0])  # t = 100
    for _ in range(6):  # six epochs reported by this driver
        progress._epochs_here += 1
    progress.on_trial_complete(0, trials, trials[0])  # t = 160: 60 s for 6 epochs × 3 fold-models = 3.33 s each
    text = out.getvalue()
    left = ((16 * 4 - 6) * 3 + 8 * 4) * 60 / (6 * 3)  # 686.7 s
    assert f"search trials 1/16 finished; ETA ≈ {left / 60:.0f} min (then 8 final runs)" in text, text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[3:]}
    # finished, stopped early, running, failed, best
    assert rows["ms.p0"][1:6] == ["1/4", "0", "0", "0", "0.5"] and rows["bspml.p0"][1:5] == ["0/4", "0", "1", "0"]


def test_each_arm_draws_its_own_start_up_and_the_size_line_names_a_random_search():
    """Cells of an arm share the arm's sampler seed (the same start-up configurations at every noise ratio); arms
    differ (one seed made the one-parameter arms draw the same quantiles, docs/notebook/tables.md); a repeated load gives the
    same seeds (CRC-32, not Python's salted hash)."""
    import zlib

    table = load_plan(SPACES / "table_glyphs.yaml")
    seeds = {(c.arm, c.spec.search.sampler.seed) for c in table.cells}
    assert len(seeds) == len(table.arms) == len({s for _, s in seeds})
    assert dict(seeds)["ms"] == zlib.crc32(b"ms") and dict(seeds)["prism"] == zlib.crc32(b"prism")
    assert all(c.spec.search.sampler.n_startup_trials == 4 for c in table.cells)
    assert "random search" not in size_line(table)
    unseeded = parse_table(_table(search={**QUICK["search"], "sampler": {"type": "tpe", "seed": None}}))
    assert {c.spec.search.sampler.seed for c in unseeded.cells} == {None}  # no seed stays no seed
    random_only = parse_table(_table(search={**QUICK["search"], "sampler": {"type": "tpe", "seed": 0}}))
    assert size_line(random_only).endswith(
        "every trial of a cell is the tpe sampler's random start-up (search.sampler.n_startup_trials 10 ≥ 4): "
        "a random search"
    )


def test_a_resumed_table_may_change_its_outage_budget_only(tmp_path):
    """As a study's resume (study/search/resume.py): ``tracking.outage_budget_s`` says how to run it, not what it is."""
    from study.intake.layout import StudyLayout
    from study.runtime.storage import write_bytes
    from study.search.resume import check_resume, written_text
    from study.tracking.credentials import redacted_spec
    from trainables.schema.errors import StudyExistsError

    started = load_plan(SPACES / "table_glyphs_quick.yaml", [f"storage={tmp_path}"])
    layout = StudyLayout.for_spec(started.base)
    layout.mkdir()
    write_bytes(layout.spec_file, yaml.safe_dump(redacted_spec(started.base), sort_keys=False).encode())
    write_bytes(layout.table_file, written_text(started))
    budget = load_plan(SPACES / "table_glyphs_quick.yaml", [f"storage={tmp_path}", "tracking.outage_budget_s=900"])
    check_resume(budget, layout, resume=True)
    epochs = load_plan(SPACES / "table_glyphs_quick.yaml", [f"storage={tmp_path}", "train.epochs=2"])
    with pytest.raises(
        StudyExistsError,
        match="the table differs from the one table 'table_glyphs_quick' was started with at train.epochs",
    ):
        check_resume(epochs, layout, resume=True)
    # A table started before tables took a scheduler or replicates (its table.yaml has neither) resumes as FIFO with
    # one search per cell, and only so.
    old = yaml.safe_load(written_text(started))
    del old["search"]["scheduler"], old["search"]["replicates"]
    write_bytes(layout.table_file, yaml.safe_dump(old).encode())
    check_resume(started, layout, resume=True)
    asha = load_plan(SPACES / "table_glyphs_quick.yaml", [f"storage={tmp_path}", "search.scheduler.type=asha"])
    with pytest.raises(StudyExistsError, match="at search.scheduler.type"):
        check_resume(asha, layout, resume=True)
    replicated = load_plan(SPACES / "table_glyphs_quick.yaml", [f"storage={tmp_path}", "search.replicates=2"])
    with pytest.raises(StudyExistsError, match="at search.replicates"):
        check_resume(replicated, layout, resume=True)


def test_a_report_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """The table's runs are stored; the report's failure (here: the store refuses the write) is one line, not a
    traceback, and names --resume, which writes it again."""
    from types import SimpleNamespace

    import dashboards.report
    import study.search.driver
    from study.commands.run import main
    from study.intake.layout import StudyLayout
    from study.runtime.storage import write_bytes
    from study.tracking.credentials import redacted_spec

    outcome = SimpleNamespace(
        num_trials=16,
        num_failed=0,
        wall_time_s=1.0,
        failures=[],
        interrupted=False,
        final=[object()],
        parent_run_id="p",
        stage_lines=[],
    )

    def run_study(plan, **options):  # as the driver leaves the study directory: its spec file, the stores
        layout = StudyLayout.for_spec(plan.base)
        layout.mkdir()
        write_bytes(layout.spec_file, yaml.safe_dump(redacted_spec(plan.base), sort_keys=False).encode())
        return outcome

    monkeypatch.setattr(study.search.driver, "run_study", run_study)

    def refuse(*args, **kwargs):
        raise OSError("When uploading part for key 'runs/t/table.md': AWS Error ACCESS_DENIED\nsecond line")

    monkeypatch.setattr(dashboards.report, "write_table_report", refuse)
    code = main([str(SPACES / "table_glyphs_quick.yaml"), "--set", f"storage={tmp_path}", "--no-dashboard"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines() == [err.strip()] and err.startswith("error: the table's report could not be written to ")
    assert "ACCESS_DENIED second line" in err and "--resume writes it again" in err, err


def test_the_size_line_prices_the_table_with_and_without_early_stopping():
    """ASHA per cell's expected share, against hand computations: many trials (7 epochs, rungs 1 and 3, η 3): 2/3 stop
    at 1, 2/9 at 3, 1/9 run 7 → 19/63 of the epochs; two trials, one rung (3 epochs): the first always goes on, the
    second stops at 1 with probability 1/2 → (3 + 2) / 6."""
    from study.intake.asha_cost import asymptotic_share, expected_share, milestones

    assert milestones(7, 1, 3.0) == [1, 3] and milestones(60, 5, 3.0) == [5, 15, 45]
    assert asymptotic_share(7, 1, 3.0) == pytest.approx(19 / 63)
    assert expected_share(3, 1, 3.0, 2) == pytest.approx(5 / 6, abs=0.03)
    assert asymptotic_share(7, 1, 3.0) < expected_share(7, 1, 3.0, 8) < 1.0  # a small cell promotes more than 1/η
    fifo = load_plan(SPACES / "table_cub.yaml")
    asha = load_plan(SPACES / "table_cub.yaml", ["search.scheduler.type=asha"])
    share = asha.search_share
    assert fifo.search_share == 1.0 and share == expected_share(60, 5, 3.0, 16)
    assert model_epochs(asha) == pytest.approx((96 * 3 * share + 30) * 60)
    assert model_epochs(asha, False) == model_epochs(fifo) == (96 * 3 + 30) * 60
    line = size_line(asha)
    assert (
        "every trial to the end (FIFO): 19080 model-epochs, ≈ 39.8 h" in line and "with asha per cell (grace 5" in line
    )
    assert f"{model_epochs(asha):.0f} model-epochs in all, ≈ {estimated_hours(asha):.1f} h" in line
    assert "with asha" not in size_line(fifo)


def test_a_shared_value_the_study_schema_refuses_is_one_line():
    # The table's schema lets any storage through; the study schema, which builds each cell, names the key.
    with pytest.raises(SpecError) as e:
        parse_table(_table(storage="ftp://x/y"), "t.yaml")
    assert "storage: scheme 'ftp' is not a filesystem" in str(e.value) and "\n" not in str(e.value)


def test_a_trial_stopped_without_a_result_keeps_the_cost_of_its_last_one():
    """A scheduler may stop a trial that waits, paused, at a rung (study.search.halving): Ray completes it with no
    result, and its Optuna trial still gets the cost its last result reported."""
    from trainables.schema.metric_names import COST_MODEL_EPOCHS, COST_WALL

    search, _ = _quick_searcher(2, None)
    search.suggest("t0")
    result = {"val/recall_at_1": 0.4, "epoch": 1, "training_iteration": 1, COST_MODEL_EPOCHS: 3.0, COST_WALL: 12.5}
    search.on_trial_result("t0", result)
    search.on_trial_complete("t0", None)
    trial = search.cells[0][2]._ot_study.trials[0]
    assert trial.state.name == "PRUNED"
    assert trial.user_attrs[COST_MODEL_EPOCHS] == 3.0 and trial.user_attrs[COST_WALL] == 12.5
    assert search.last_cost == {}  # forgotten once the trial ended


def test_replicates_are_cells_of_their_own_and_replicate_zero_is_the_table_as_it_was():
    """``search.replicates: 2``: each arm × condition is searched twice, each with the full budget; replicate 0 keeps
    today's label, Optuna study and seed exactly, replicate 1 is ``.r1`` with the seed moved by the documented step;
    the base spec's budget (the driver's check that the search finished) counts both."""
    import zlib

    from study.intake.plan import REPLICATE_SEED_STEP

    one = load_plan(SPACES / "table_glyphs_quick.yaml")
    two = load_plan(SPACES / "table_glyphs_quick.yaml", ["search.replicates=2"])
    assert one.replicates == 1 and two.replicates == 2
    labels = ["ms.p0", "ms.p0.r1", "ms.p0.3", "ms.p0.3.r1", "bspml.p0", "bspml.p0.r1", "bspml.p0.3", "bspml.p0.3.r1"]
    assert [c.label for c in two.cells] == labels
    assert [c.study_name for c in two.cells] == [f"table_glyphs_quick.{label}" for label in labels]
    assert [c.key for c in two.cells] == [c.label for c in one.cells for _ in range(2)]
    assert [c.replicate for c in two.cells] == [0, 1] * 4
    assert [(c.label, c.spec) for c in two.cells if c.replicate == 0] == [(c.label, c.spec) for c in one.cells]
    for cell in two.cells:
        arm_seed = (QUICK["search"]["sampler"]["seed"] + zlib.crc32(cell.arm.encode())) % 2**32
        assert cell.spec.search.sampler.seed == (arm_seed + cell.replicate * REPLICATE_SEED_STEP) % 2**32
    # Replicate 1 of the table is the table at sampler seed + 1, cell for cell (its spec but the replicate's name).
    seed = QUICK["search"]["sampler"]["seed"]
    moved = load_plan(SPACES / "table_glyphs_quick.yaml", [f"search.sampler.seed={seed + 1}"])
    for cell, plain in zip([c for c in two.cells if c.replicate == 1], moved.cells, strict=True):
        assert cell.spec.search.sampler == plain.spec.search.sampler and cell.fixed == plain.fixed, cell.label
    assert two.written["search"]["num_trials"] == 4 and two.base.search.num_trials == 32 == two.search_trials
    assert two.final_runs == 16 and two.trials_per_cell == 4
    assert [c.label for c in two.cells] == labels
    assert one.base == load_plan(SPACES / "table_glyphs_quick.yaml", ["search.replicates=1"]).base


@pytest.mark.parametrize("value", [0, -1, 1.5, "two"])
def test_a_bad_replicate_count_is_one_line_naming_search_replicates(value):
    with pytest.raises(SpecError) as e:
        parse_table(_table(search={**QUICK["search"], "replicates": value}), "t.yaml")
    assert "search.replicates" in str(e.value) and "\n" not in str(e.value)
