"""Runs are named for a person (issue 60, item 13): ``trial 7``, ``ms.p0.2 · trial 7``, ``ms.p0.2 · final · seed 3``,
the same after a resume, and the parent's description links its children. The names are pure functions of a trial's
config and Optuna number (:func:`study.tracking.callback.trial_run_name`); the runs and the note are read back from a
real sqlite store through ``MlflowClient``."""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from study.tracking.callback import MlflowTrialCallback, ParentRun, trial_run_name
from study.tracking.store import MAX_NOTE_LENGTH, TrackingStore, children_note
from trainables.schema import record as R
from trainables.schema.trial import CELL_KEY, FINAL_KEY, SPEC_KEY


def search_config(study: str, cell: str | None) -> dict:
    config: dict = {SPEC_KEY: {"name": study}, "train.optimizer.lr": 0.01}
    if cell is not None:
        config[CELL_KEY] = cell
    return config


def final_config(study: str, group: str, seed: int) -> dict:
    return {
        SPEC_KEY: {"name": study},
        FINAL_KEY: {R.GROUP: group, R.SOURCE_TRIAL: "abc_00001", "params": {"seed": seed}},
    }


@pytest.mark.parametrize(
    ("config", "number", "name"),
    [
        (search_config("digits", "digits"), 7, "trial 7"),  # a study: its one cell is the study
        (search_config("tbl", "ms.p0.2"), 7, "ms.p0.2 · trial 7"),  # a table's cell
        (search_config("tbl", "bspml.p0.2.r1"), 0, "bspml.p0.2.r1 · trial 0"),  # a table's replicate
        (search_config("digits", "digits.r2"), 3, "digits.r2 · trial 3"),  # a study's replicate 2
        (search_config("digits", None), 4, "trial 4"),  # asked before cells were stamped
        ({}, "f67f9_00001", "trial f67f9_00001"),  # no Optuna number (yet): Ray's id
        (final_config("digits", "all", 3), "x", "final · seed 3"),  # a study's final stage
        (final_config("tbl", "ms.p0.2", 3), "x", "ms.p0.2 · final · seed 3"),  # a table cell's
        (final_config("tbl", "bspml.p0.2.r1", 1), "x", "bspml.p0.2.r1 · final · seed 1"),
        (final_config("digits", "family=ms", 0), "x", "family=ms · final · seed 0"),  # final.group_by
        (final_config("digits", "digits", 2), "x", "final · seed 2"),  # replicate 0 of a replicated study
    ],
)
def test_each_kind_of_run_has_its_readable_name(config, number, name):
    assert trial_run_name(config, number) == name
    assert trial_run_name(pickle.loads(pickle.dumps(config)), number) == name  # a pure function of what Ray restores


@pytest.fixture
def store(tmp_path):
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}", "tbl")
    return store, store.start_parent("tbl", {}, {})


def describe(config: dict) -> tuple[dict, dict]:
    return {"lr": 0.01}, {R.STAGE: R.STAGE_FINAL if FINAL_KEY in config else R.STAGE_SEARCH}


@dataclass
class OptunaLink:
    """Optuna's link (:class:`study.tracking.optuna_link.OptunaRunLink`), played: Ray trial id → Optuna trial number
    of the trials Optuna still has RUNNING."""

    numbers: dict[str, int]

    def __call__(self, trial_id: str, run_id: str) -> dict[str, str]:
        return {R.OPTUNA_TRIAL_NUMBER: str(self.numbers[trial_id])} if trial_id in self.numbers else {}


def callback(store: TrackingStore, parent: str, numbers: dict[str, int], stage: str = R.STAGE_SEARCH):
    """The driver's callback of ``stage``, new, as a resumed driver makes its own (Ray's pickled one is dropped:
    study.runtime.shells)."""
    return MlflowTrialCallback(
        ParentRun(store.uri, store.experiment_id, parent),
        describe_trial=describe,
        total_epochs=1,
        stage=stage,
        on_run=OptunaLink(numbers),
    )


def test_runs_are_created_with_their_names_and_keep_them_on_resume(store):
    store, parent = store
    cell = SimpleNamespace(trial_id="f67f9_00003", config=search_config("tbl", "ms.p0.2"))
    final = SimpleNamespace(trial_id="30dda6ba", config=final_config("tbl", "ms.p0.2", 3))
    first = callback(store, parent, {"f67f9_00003": 7})
    ids = [first.run_id(cell), first.run_id(final)]
    client = MlflowClient(store.uri)
    assert [client.get_run(i).info.run_name for i in ids] == ["ms.p0.2 · trial 7", "ms.p0.2 · final · seed 3"]
    # A resumed driver (a new callback) reopens the same runs under the same names, even when
    # Optuna no longer tells the number (the trial is no longer RUNNING there).
    for numbers in ({"f67f9_00003": 7}, {}):
        resumed = callback(store, parent, numbers)
        assert [resumed.run_id(cell), resumed.run_id(final)] == ids
        assert [client.get_run(i).info.run_name for i in ids] == ["ms.p0.2 · trial 7", "ms.p0.2 · final · seed 3"]


def note_links(client: MlflowClient, parent: str) -> list[tuple[str, str]]:
    """``(name, link)`` of each child listed in the parent's description, in order."""
    note = client.get_run(parent).data.tags[R.NOTE_TAG]
    return [(re.sub(r"\\(.)", r"\1", name), link) for name, link in re.findall(r"^- \[(.*)\]\((.*)\)$", note, re.M)]


def test_the_parent_description_links_every_child_and_drops_ghosts_on_resume(store):
    store, parent = store
    numbers = {f"t_{i}": i for i in range(11)}
    search = callback(store, parent, numbers)
    trials = [SimpleNamespace(trial_id=t, config=search_config("tbl", "ms.p0.2")) for t in reversed(list(numbers))]
    runs = {t.trial_id: search.run_id(t) for t in trials}
    client = MlflowClient(store.uri)
    assert R.NOTE_TAG not in client.get_run(parent).data.tags  # not rewritten per trial
    search.on_experiment_end(trials)
    final = callback(store, parent, {}, stage=R.STAGE_FINAL)
    seeds = [SimpleNamespace(trial_id=f"f_{s}", config=final_config("tbl", "ms.p0.2", s)) for s in (1, 0)]
    runs.update({t.trial_id: final.run_id(t) for t in seeds})
    final.on_experiment_end(seeds)

    exp = store.experiment_id
    expected = [(f"ms.p0.2 · trial {i}", f"#/experiments/{exp}/runs/{runs[f't_{i}']}") for i in range(11)]
    expected += [(f"ms.p0.2 · final · seed {s}", f"#/experiments/{exp}/runs/{runs[f'f_{s}']}") for s in (0, 1)]
    assert note_links(client, parent) == expected  # search then final, trial 2 before trial 10
    for name, link in expected:  # each link is its run's page
        assert client.get_run(link.rsplit("/", 1)[1]).info.run_name == name

    # A resumed search that lost trial 10 (Ray forgot it) deletes its run, and the note follows.
    resumed = callback(store, parent, numbers)
    resumed._started_ms += 10_000  # every run above was made by the killed driver
    resumed.on_step_begin(0, [t for t in trials if t.trial_id != "t_10"])
    assert [name for name, _ in note_links(client, parent)] == [n for n, _ in expected if n != "ms.p0.2 · trial 10"]


def test_a_long_list_stops_under_mlflows_limit_with_the_filter_for_the_rest():
    children = [(f"bspml.p0.2.r1 · trial {i}", f"{i:032x}", R.STAGE_SEARCH) for i in range(400)]
    note = children_note("12", "p" * 32, children)
    listed = re.findall(r"^- \[", note, re.M)
    assert len(note) <= MAX_NOTE_LENGTH and 50 < len(listed) < 400
    assert note.endswith(
        f"- … and {400 - len(listed)} more: filter the runs by `tags.\"mlflow.parentRunId\" = '{'p' * 32}'`"
    )
    assert children_note("12", "p", children[:3]) == "\n".join(
        ["**3 runs** of this study (search, then final stage):", ""]
        + [f"- [bspml.p0.2.r1 · trial {i}](#/experiments/12/runs/{i:032x})" for i in range(3)]
    )
