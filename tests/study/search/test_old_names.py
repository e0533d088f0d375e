"""study.search.old_names: a pickle an older study wrote (Ray's tuner.pkl, the searcher's state) names the modules
the search engine had before it moved to study/search/; after ``accept_old_names`` each name resolves to the object
that lives in the new module now."""

from __future__ import annotations

import pickle

import pytest

from study import bill, cell_status, progress
from study.intake import asha_cost, cells, layout, plan, spec_reader, validation
from study.runtime import driver_run
from study.search import cell_asha, cell_search, driver, persistent_asha, space, study_search, trial_record, tuners
from study.search.old_names import MOVED, accept_old_names


def _old_pickle(obj: object, new: str, old: str) -> bytes:
    """``obj`` pickled (protocol 0: one ``c<module>`` line per global) as a study written before the move names it."""
    data = pickle.dumps(obj, protocol=0)
    assert f"c{new}\n".encode() in data
    return data.replace(f"c{new}\n".encode(), f"c{old}\n".encode())


@pytest.mark.parametrize(
    ("old", "name", "where"),
    [
        ("study.bookkeeping", "StudySearch", study_search),
        ("study.bookkeeping", "PersistentASHA", persistent_asha),
        ("study.search_space", "DefineByRun", space),
        ("study.search_space", "ConditionalGridSampler", space),
        ("study.ordered_search", "OrderedSampler", None),
        ("study.stage_tuners", "_trial_dirname", tuners),
        ("study.tuner", "describe_trial", trial_record),
        ("study.table.search", "TableSearch", cell_search),
        ("study.table.scheduler", "CellASHA", cell_asha),
        ("study.table.progress", "TableProgress", progress),
        # Issue 57: intake became a folder, study.table dissolved into the one plan.
        ("study.plan", "StudyPlan", plan),
        ("study.plan", "PlanCell", plan),
        ("study.layout", "StudyLayout", layout),
        ("study.loading", "parse_spec", spec_reader),
        ("study.intake.loading", "parse_spec", spec_reader),  # renamed: intake/load.py reads a plan, this a spec
        ("study.runtime.run_progress", "RunProgress", driver_run),  # a Tuner's callbacks name it
        ("study.validation", "trial_params", validation),
        ("study.table.spec", "replicate_seed", plan),
        ("study.table.spec", "condition_label", cells),
        ("study.table.asha_cost", "expected_share", asha_cost),
        ("study.table.bill", "Bill", bill),
        ("study.table.status", "CellStatus", cell_status),
        ("study.table.run", "run_study", driver),
    ],
)
def test_an_old_name_resolves_to_its_new_home(old: str, name: str, where: object) -> None:
    accept_old_names()
    found = pickle.loads(f"c{old}\n{name}\n.".encode())
    if where is not None:
        assert found is getattr(where, name)
    assert found.__module__ in MOVED[old]


def test_an_old_pickle_of_an_instance_loads_and_pickles_again_under_the_new_name() -> None:
    accept_old_names()
    data = _old_pickle(space.DefineByRun({}), "study.search.space", "study.search_space")
    restored = pickle.loads(data)
    assert isinstance(restored, space.DefineByRun)
    assert b"study.search_space" not in pickle.dumps(restored, protocol=0)


def test_an_unknown_old_name_is_an_attribute_error() -> None:
    accept_old_names()
    with pytest.raises(AttributeError, match="no_such_name"):
        pickle.loads(b"cstudy.tuner\nno_such_name\n.")
