"""A table with early stopping per cell (issue 42), its driver SIGKILLed mid-search and resumed: the rungs come back from
the study directory (Ray restores a scheduler from the pickle taken at the experiment's start, with empty rungs; the study keeps them as
versioned JSON, ``scheduler_state.json``), so
every value recorded before the kill is still there, every rung value after the resume matches what the trial
reported at that epoch (none lost, none recorded twice), each cell ends with exactly its budget of finished trials
(a stopped trial counts, PRUNED in Optuna), and ``--status`` mid-run shows each cell's cost. Without the state file
the resumed scheduler would promote the trials in flight again from empty rungs (tests/study/search/test_table_scheduler.py
fails the same restart on the unit level)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from harness.driver import tiny_table
from harness.kill_resume import kill_then_resume, snapshot_has_checkpointed_trial_in_flight
from tests.study.runtime.test_shells import pickled_modules
from trainables.schema import record as R
from trainables.schema.metric_names import COST_MODEL_EPOCHS

pytestmark = pytest.mark.e2e

#: The modules of the study's Ray Tune callbacks (and of the plan and spec the live view holds) and of its scheduler.
SHELLED_MODULES = {
    "study.search.cell_asha",
    "study.progress",
    "study.tracking.callback",
    "study.runtime.stop_callback",
    "study.runtime.watchdog",
    "study.runtime.driver_run",
    "study.search.reconcile",
    "study.search.trial_record",
    "study.intake.plan",
}
NAME = "t_table_asha_kill"
TRIALS, EPOCHS = 4, 3  # per cell; rungs at epochs 1 and 2 (grace 1, η 2), every trial stops at 3
CELLS = ["ms.p0.2", "spl.p0.2"]


def _table() -> dict:
    """Two arms × one condition, 4 trials per cell one at a time, 2 class-disjoint folds (a scheduler decides on
    validation scores), epochs of 100 batches (a second or two), 1 final seed."""
    table = tiny_table(NAME, EPOCHS, 100, TRIALS, 1)
    table["train"]["classes_per_batch"] = 2
    table["validation"] = {"kind": "kfold", "folds": 2}
    table["search"]["scheduler"] = {"type": "asha", "grace_period": 1, "reduction_factor": 2}
    return table


def _rungs(study_dir: Path) -> dict[str, dict[float, dict[str, float]]] | None:
    """Every cell's rungs as the scheduler's state file holds them (written whole: temp file and rename)."""
    try:
        state = json.loads((study_dir / R.SCHEDULER_STATE_FILE).read_text())
    except OSError:
        return None
    assert (state["schema"], state["version"], state["kind"]) == (R.SCHEDULER_STATE_SCHEMA, 1, "cell_asha")
    assert not (study_dir / R.ASHA_STATE_FILE).exists()  # no pickle beside it
    return {label: {float(m): r for m, r in cell["rungs"]} for label, cell in state["cells"].items()}


def test_a_killed_table_keeps_every_cells_rungs(tmp_path):
    at_kill: dict[str, dict[float, dict[str, float]]] = {}

    def mid_search(study_dir: Path) -> bool:
        """Three rung values recorded, and a checkpointed trial in flight in Ray's snapshot."""
        rungs = _rungs(study_dir)
        if rungs is None or sum(len(r) for cell in rungs.values() for r in cell.values()) < 3:
            return False
        if snapshot_has_checkpointed_trial_in_flight(study_dir / ""):
            at_kill.update(rungs)
            return True
        return False

    out = kill_then_resume(tmp_path, _table(), mid_search, timeout=300)
    resumed, study_dir = out["resumed"], out["study_dir"]
    print(out["status"].stdout)  # the closing note shows --status of a table mid-run
    assert not out["finished_before_kill"], "the table ended before the kill point"
    assert resumed.returncode == 0, out["first_output"][-2000:] + resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "stopped early" in out["status"].stdout and "model-epochs" in out["status"].stdout

    final = _rungs(study_dir)
    assert final is not None
    # Ray's tuner.pkl, which the resume unpickled, names no callback's or scheduler's module: they pickle as shells
    # (the restored driver brings its own callbacks and rebuilds the scheduler), so moving one cannot break a resume
    # (study/runtime/shells.py).
    pickled = pickled_modules((study_dir / R.SEARCH_EXPERIMENT / "tuner.pkl").read_bytes())
    assert "study.runtime.shells" in pickled and not pickled & SHELLED_MODULES, pickled
    for label, rungs in at_kill.items():  # nothing recorded before the kill is lost or rewritten
        for milestone, recorded in rungs.items():
            assert recorded.items() <= final[label][milestone].items(), (label, milestone)

    storage = R.sqlite_uri(study_dir / R.OPTUNA_DB)
    pruned = 0
    for cell in CELLS:
        trials = optuna.load_study(study_name=f"{NAME}.{cell}", storage=storage).get_trials()
        states = sorted(t.state.name for t in trials)
        assert len(trials) == TRIALS and set(states) <= {"COMPLETE", "PRUNED"}, states
        recorded_ids = {tid for r in final[cell].values() for tid in r}
        for t in trials:
            ray_id = t.user_attrs[R.OPTUNA_RAY_TRIAL_ID]
            assert ray_id in recorded_ids
            last = max(t.intermediate_values)
            assert (t.state.name == "PRUNED") == (last < EPOCHS)
            # Each rung the trial reached holds exactly the value it reported there (max mode: sign +1).
            for milestone, recorded in final[cell].items():
                if milestone < EPOCHS and milestone <= last:
                    assert recorded[ray_id] == pytest.approx(t.intermediate_values[int(milestone)])
            assert t.user_attrs[COST_MODEL_EPOCHS] == 2 * last  # 2 folds × the epochs it trained
        pruned += states.count("PRUNED")
    assert pruned, "ASHA stopped no trial: the test needs one (a stopped trial must count as finished)"
