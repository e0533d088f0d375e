"""The schedulers' state file (:mod:`study.search.scheduler_state`): versioned JSON, names and numbers only; an older
study's pickle (``asha_state.pkl``, written by the code before the JSON file) is read once and replaced; a file of
another kind, a newer version or not JSON is one line naming it. The restart itself (a scheduler rebuilt empty reads
the file and decides as the uninterrupted run) is tested in test_table_scheduler.py and test_halving.py."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
from ray.tune.experiment import Trial

from study.search import scheduler_state as S
from study.search.cell_asha import rung_values
from study.search.halving import HalvingScheduler
from tests.study.search.test_halving import Loop, _outcome, _values
from tests.study.search.test_halving import _scheduler as _halving
from tests.study.search.test_table_scheduler import _drive, _events, _trial, replay
from tests.study.search.test_table_scheduler import _scheduler as _cell_asha
from trainables.schema import record as R
from trainables.schema.errors import StudyError


def _state(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_file_is_versioned_json_of_names_and_numbers_and_a_nan_round_trips(tmp_path):
    path = tmp_path / R.SCHEDULER_STATE_FILE
    scheduler = _cell_asha(str(path))
    _drive(lambda: scheduler, _events(1), seed=1, stop_after=12)
    nan_trial = _trial("nan", 0)
    scheduler.on_trial_add(None, nan_trial)
    scheduler.on_trial_result(None, nan_trial, {"training_iteration": 1, "val": float("nan")})
    state = _state(path)  # strict JSON: json.loads of "NaN" would pass, so check the text
    assert "NaN" not in path.read_text() and '"nan"' in path.read_text()
    assert (state["schema"], state["version"], state["kind"]) == (R.SCHEDULER_STATE_SCHEMA, 1, "cell_asha")
    assert set(state["cells"]) == {"ms.p0", "ms.p0.4"} and state["trial_cell"]["nan"] == "ms.p0"

    restored = _cell_asha(str(path))
    restored.on_trial_add(None, nan_trial)
    before, after = rung_values(scheduler), rung_values(restored)
    assert math.isnan(after["ms.p0"][1].pop("nan")) and math.isnan(before["ms.p0"][1].pop("nan"))
    assert after == before


def test_an_older_studys_cell_asha_pickle_is_read_once_then_json_is_written(tmp_path):
    """The code before the JSON file pickled Ray's ASHAScheduler objects per cell into ``asha_state.pkl``, and its
    scheduler (in Ray's tuner.pkl) holds that path. Restored, it reads the pickle, decides as the uninterrupted run,
    and its next write is ``scheduler_state.json`` beside it; the pickle is left as it was."""
    events = _events(5)
    straight = _cell_asha(str(tmp_path / "straight.json"))
    whole, _ = _drive(lambda: straight, events, seed=5)
    first = _cell_asha(str(tmp_path / "first.json"))
    before, live = _drive(lambda: first, events, seed=5, stop_after=20)
    study = tmp_path / "older_study"
    study.mkdir()
    old = study / R.ASHA_STATE_FILE  # what the older code wrote, the way it wrote it
    old.write_bytes(pickle.dumps({"per_cell": first.per_cell, "trial_cell": first.trial_cell}))

    restored = _cell_asha(str(old))  # the older driver's scheduler, unpickled by Tuner.restore: empty rungs
    for trial, _, _ in live.values():
        restored.on_trial_add(None, trial)
    assert rung_values(restored) == rung_values(first)
    assert not (study / R.SCHEDULER_STATE_FILE).exists()  # nothing written before a decision changed something
    replay(restored, events, whole[20:])  # decides as the uninterrupted run
    assert rung_values(restored) == rung_values(straight)
    assert _state(study / R.SCHEDULER_STATE_FILE)["kind"] == "cell_asha"

    today = _cell_asha(str(study / R.SCHEDULER_STATE_FILE))  # a resume after that reads the JSON, not the pickle
    today.on_trial_add(None, _trial("new", 0))
    assert rung_values(today) == rung_values(straight)


def test_an_older_studys_halving_pickle_is_read_once_then_json_is_written(tmp_path):
    values = _values()
    straight = Loop(_halving(tmp_path / "straight.json"), values, seed=3)
    straight.run()
    first = Loop(_halving(tmp_path / "first.json"), values, seed=3)
    first.run(stop_at=25)
    held: HalvingScheduler = first.scheduler
    study = tmp_path / "older_study"
    study.mkdir()
    old = study / R.ASHA_STATE_FILE
    old.write_bytes(pickle.dumps({"per_cell": held.per_cell, "trial_cell": held.trial_cell, "order": held.next_order}))

    restored = _halving(old)
    for trial in first.trials:
        if trial.status != Trial.TERMINATED:
            trial.status = Trial.PENDING
    resumed = Loop(restored, values, seed=3, limiter=first.search_alg.searcher, trials=first.trials)
    for trial in first.trials:
        restored.on_trial_add(resumed, trial)
    resumed.run()
    assert _outcome(resumed) == _outcome(straight)
    assert _state(study / R.SCHEDULER_STATE_FILE)["kind"] == "halving"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not the scheduler's state"),
        ('{"schema": "something.else", "version": 1}', "not a dmlstudy.scheduler_state file"),
        ('{"schema": "dmlstudy.scheduler_state", "version": 99, "kind": "cell_asha"}', "state version 99"),
        ('{"schema": "dmlstudy.scheduler_state", "version": 1, "kind": "halving"}', "written by the 'halving'"),
    ],
)
def test_a_file_it_cannot_read_is_one_line_naming_it(tmp_path, text, needle):
    path = tmp_path / R.SCHEDULER_STATE_FILE
    path.write_text(text)
    scheduler = _cell_asha(str(path))
    with pytest.raises(StudyError, match=needle) as e:
        scheduler.on_trial_add(None, _trial("t0", 0))
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_paths_follow_the_file_a_scheduler_holds():
    assert S.state_paths("/s/scheduler_state.json") == ("/s/scheduler_state.json", "/s/asha_state.pkl")
    assert S.state_paths("/s/asha_state.pkl") == ("/s/scheduler_state.json", "/s/asha_state.pkl")
    assert S.state_paths("s3://b/s/scheduler_state.json") == (
        "s3://b/s/scheduler_state.json",
        "s3://b/s/asha_state.pkl",
    )
