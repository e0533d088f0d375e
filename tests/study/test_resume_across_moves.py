"""A run started by the code before a move resumes with today's code: the old driver is stopped mid-search with
SIGUSR1, and the new one continues it with ``--resume`` from the pickles the old one wrote
(:mod:`study.search.old_names`). Read back from Optuna and MLflow: every cell has exactly its budget, nothing twice.

- Issue 49 moved the engine (a study became a table of one cell; the table's searcher, scheduler and live view moved
  into the search wing): a table started before names ``study.table.search.TableSearch`` and
  ``study.table.progress.TableProgress`` in Ray's ``tuner.pkl``.
- Issue 57 made intake a folder and dissolved ``study.table`` into the one plan: a table and a (replicated) study
  started before name ``study.plan.StudyPlan`` and ``study.plan.PlanCell`` (the live view holds the plan).
- Issue 64 moved the schedulers' rungs from a pickle of Ray's ``ASHAScheduler`` objects (``asha_state.pkl``) to
  versioned JSON (``scheduler_state.json``): an ASHA table started before is resumed from the pickle, every rung
  value recorded before the stop is in the JSON file after it, and each cell ends with its budget (COMPLETE or
  PRUNED).

The old code is the commit before each move, taken from this clone's history (``git archive``); a clone without that
history skips, saying so."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from harness.driver import REPO, driver_env, mlflow_children, optuna_states, tiny_spec, tiny_table
from harness.kill_resume import continue_args, run_and_stop, signal_driver
from study.runtime.compat import asha_rungs
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

#: The last commit before issue 49's moves (harness/moves/issue49_one_path.sh, removed by issue 57: see the git log).
BEFORE_ISSUE_49 = "de50bb59"
#: The last commit before issue 57's intake folder and one plan.
BEFORE_ISSUE_57 = "ee99c4b"
#: The last commit whose schedulers kept their rungs in a pickle of Ray's schedulers (``asha_state.pkl``), not in
#: ``scheduler_state.json``: its ASHA table's scheduler, in Ray's ``tuner.pkl``, names the pickle.
BEFORE_JSON_STATE = "5c22be34"
NAME, TRIALS, CELLS = "t_premove", 2, ("ms.p0.2", "spl.p0.2")
#: Epochs of a few batches: the stop needs two trials ended and more to come, which every trial's start (a second or
#: more each: a Ray actor, the data) makes certain whatever an epoch costs; the old code's start and today's dominate.
EPOCHS, BATCHES = 2, 30


def _old_code(into: Path, commit: str) -> Path:
    """The packages as they were at ``commit``, unpacked under ``into``."""
    if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO).returncode != 0:
        pytest.skip(f"commit {commit} (before a move) is not in this clone's history")
    archive = subprocess.run(
        ["git", "archive", commit, "study", "trainables", "dashboards", "harness"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _old_env(ray_tmp: str, old: Path) -> dict[str, str]:
    """The old driver's environment: only what a user's shell would give it (no variable an earlier test of this
    process left behind), its own Ray temp dir, and the old code first on the path."""
    kept = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "DMLSTUDY_CACHE_DIR")
    env = {k: os.environ[k] for k in kept if k in os.environ}
    return {**env, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(old)}


def _pickled_rungs(study_dir: Path) -> dict[str, dict[float, dict[str, float]]]:
    """The rungs the old code pickled (Ray's ASHAScheduler per cell), read back with today's Ray."""
    state = pickle.loads((study_dir / R.ASHA_STATE_FILE).read_bytes())  # noqa: S301 - the test's own study
    return {label: {float(m): dict(r) for m, r in asha_rungs(s).items()} for label, s in state["per_cell"].items()}


def _states(study_dir: Path, studies: tuple[str, ...]) -> dict[str, list[str]]:
    """Per cell (its Optuna study), its Optuna trials' states, read read-only (:func:`harness.driver.optuna_states`:
    a poll through Optuna could race the driver creating the store's tables)."""
    states = optuna_states(study_dir)
    return {c: states[c] for c in studies if c in states}


def _ended(states: dict[str, list[str]]) -> int:
    return sum(s.count("COMPLETE") + s.count("PRUNED") for s in states.values())


def _two_ended(studies: tuple[str, ...]):
    def ended(study_dir: Path) -> bool:
        try:
            return _ended(_states(study_dir, studies)) >= 2
        except Exception:  # the store is being created or written
            return False

    return ended


def _replicated_study() -> dict:
    """A study of two replicates (two cells: its own and ``.r1``), as slow per epoch as the table, one final seed."""
    spec = tiny_spec(NAME, EPOCHS, TRIALS, replicates=2, max_concurrent=2)
    spec["train"]["batches_per_epoch"] = BATCHES
    spec["final"] = {"seeds": 1}
    return spec


def _asha_table() -> dict:
    """The table with ASHA per cell (rungs at epoch 1; a scheduler decides on validation: 2 class-disjoint folds)."""
    table = tiny_table(NAME, EPOCHS, BATCHES, TRIALS, 1)
    table["train"]["classes_per_batch"] = 2
    table["validation"] = {"kind": "kfold", "folds": 2}
    table["search"]["scheduler"] = {"type": "asha", "grace_period": 1, "reduction_factor": 2}
    return table


#: (the commit before the move, what it starts, its Optuna studies and final groups, what its report names it)
CASES = {
    "table before issue 49": (BEFORE_ISSUE_49, tiny_table(NAME, EPOCHS, BATCHES, TRIALS, 1), CELLS, "Table"),
    "table before issue 57": (BEFORE_ISSUE_57, tiny_table(NAME, EPOCHS, BATCHES, TRIALS, 1), CELLS, "Table"),
    "replicated study before issue 57": (BEFORE_ISSUE_57, _replicated_study(), (NAME, f"{NAME}.r1"), "Study"),
    "ASHA table before the JSON state": (BEFORE_JSON_STATE, _asha_table(), CELLS, "Table"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_started_before_a_move_resumes_after_it(tmp_path, case):
    commit, written, labels, noun = CASES[case]
    studies = tuple(label if label.startswith(NAME) else f"{NAME}.{label}" for label in labels)
    old = _old_code(tmp_path / "before", commit)
    spec = tmp_path / R.SPEC_FILE
    spec.write_text(yaml.safe_dump(written))
    study_dir = tmp_path / R.DEFAULT_STORAGE / NAME
    ray_tmp = tempfile.mkdtemp(prefix="rm", dir="/tmp")
    first = run_and_stop(
        tmp_path,
        _old_env(ray_tmp, old),
        [str(spec), "--no-dashboard"],
        study_dir,
        _two_ended(studies),
        signal_driver(signal.SIGUSR1),
        timeout=300,
    )
    at_stop = _states(study_dir, studies)
    # The old code ran: its Ray experiment (the pickles the new code must read) and its Optuna trials are there.
    assert (study_dir / R.SEARCH_EXPERIMENT / "tuner.pkl").exists(), first["output"][-3000:]
    assert _ended(at_stop) >= 2, (at_stop, first["output"][-3000:])
    pickled_rungs = _pickled_rungs(study_dir) if "asha" in str(written["search"].get("scheduler")) else None
    if first["finished_before_kill"]:
        # It ended between two looks (a fast machine): its experiment is still the old code's to restore.
        assert first["code"] is None and f"{noun} 't_premove'" in first["output"], first["output"][-3000:]
        args = [str(spec), "--no-dashboard", "--resume"]
    else:
        assert first["code"] == 3, first["output"][-2000:]
        assert _ended(at_stop) < len(studies) * TRIALS, at_stop
        args = continue_args(first["output"])

    resumed = subprocess.run(
        [sys.executable, "-m", "study.run", *args],
        cwd=tmp_path,
        env=driver_env(ray_tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    if pickled_rungs is None:
        assert _states(study_dir, studies) == {c: ["COMPLETE"] * TRIALS for c in studies}
    else:
        states = _states(study_dir, studies)
        assert all(len(s) == TRIALS and set(s) <= {"COMPLETE", "PRUNED"} for s in states.values()), states
        state = json.loads((study_dir / R.SCHEDULER_STATE_FILE).read_text())
        assert state["version"] == 1 and state["kind"] == "cell_asha"
        rungs = {label: {float(m): r for m, r in cell["rungs"]} for label, cell in state["cells"].items()}
        for label, recorded in pickled_rungs.items():  # nothing the old code recorded is lost or rewritten
            for milestone, values in recorded.items():
                assert values.items() <= rungs[label][milestone].items(), (label, milestone, rungs)
        assert all(len(cell[1.0]) == TRIALS for cell in rungs.values()), rungs  # every trial at the first rung
    _, parents, children = mlflow_children(study_dir, NAME)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    search = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_SEARCH]
    assert len({r.data.tags[R.TRIAL_ID] for r in search}) == len(search) == len(studies) * TRIALS
    assert sorted(r.data.tags[R.GROUP] for r in children if r.data.tags[R.STAGE] == R.STAGE_FINAL) == list(labels)
    assert (study_dir / R.TABLE_REPORT_FILE).exists() == (noun == "Table")
