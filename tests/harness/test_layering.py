"""Dependencies run one way (trainables.schema ← trainables ← study ← dashboards ← study.run), with no cycle, not even
through a function-level import, checked on the source."""

from __future__ import annotations

from pathlib import Path

from harness.layering import cycles, function_cycles, import_graph, store_doors, upward_imports


def _plant(root: Path, tree: dict[str, dict[str, str]]) -> None:
    """A tree of packages under ``root``: package folder → {file name: source}; each gets an empty ``__init__.py``
    unless it names one."""
    for package, source in tree.items():
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        for name, text in source.items():
            (root / package / name).write_text(text)


def test_no_module_imports_a_higher_layer_and_imports_have_no_cycle():
    graph = import_graph()
    assert {"trainables.schema.spec", "trainables.loop", "study.search.driver", "dashboards.build"} <= set(graph)
    assert upward_imports(graph) == []
    assert cycles(graph) == []
    assert function_cycles(graph) == []


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path):
    _plant(
        tmp_path,
        {
            "trainables": {"b.py": "import trainables.c\n", "c.py": "from trainables import b\n"},
            "trainables/schema": {"a.py": "from trainables import b\n"},
            "study": {},
            "dashboards": {},
        },
    )
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == ["trainables.schema.a (trainables.schema) imports trainables.b (trainables)"]
    assert cycles(graph) == [["trainables.b", "trainables.c"]]


def test_the_checker_sees_a_cycle_through_a_function_level_import(tmp_path):
    """The circle study.status ↔ study.table.status was of this kind: each side imported the other inside a function,
    so the module-level check missed it. A ``TYPE_CHECKING`` import (never run) closes no cycle, and neither does a
    lazy face (``dashboards/__init__.py``) reached by ``from dashboards import stats``, which imports the module alone."""
    _plant(
        tmp_path,
        {
            "trainables": {},
            "trainables/schema": {},
            "study": {
                "status.py": "def main():\n    from study.table.status import print_table_status\n",
                "spec.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from study.table.run import Table\n",
            },
            "study/table": {
                "status.py": "from study import spec\n\ndef print_table_status():\n    from study.status import driver_text\n",
                "run.py": "from study.spec import S\n",
            },
            "dashboards": {
                "__init__.py": "def __getattr__(name):\n    from dashboards.build import build\n    return build\n",
                "build.py": "from dashboards import stats\n",
                "stats.py": "",
            },
        },
    )
    graph = import_graph(tmp_path)
    assert cycles(graph) == []
    assert function_cycles(graph) == [
        "study.status -> study.table.status: study.status -> study.table.status (function); "
        "study.table.status -> study.status (function)"
    ]


def test_only_study_tracking_opens_the_stores():
    assert store_doors() == []


def test_the_checker_sees_a_new_door_to_the_stores(tmp_path):
    _plant(
        tmp_path,
        {
            "trainables": {},
            "trainables/schema": {},
            "study": {
                "status.py": "import optuna\n\ndef f(url):\n    return optuna.load_study(study_name='s', storage=url)\n"
            },
            "study/tracking": {"stores.py": "import mlflow\nfrom optuna.storages import RDBStorage\n"},
            "dashboards": {
                "load.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlflow.entities import Run\n",
                "fine.py": "import optuna\n\ndef f(s: optuna.storages.BaseStorage) -> None:\n    optuna.trial.TrialState\n",
                "rdb.py": "import optuna\n\nS = optuna.storages.RDBStorage('sqlite://')\n",
            },
        },
    )
    assert store_doors(tmp_path) == [
        "dashboards.load imports mlflow.entities (only study.tracking may)",
        "dashboards.rdb opens an Optuna storage (optuna.storages.RDBStorage, line 3) (only study.tracking may)",
        "study.status opens an Optuna storage (optuna.load_study, line 4) (only study.tracking may)",
    ]
