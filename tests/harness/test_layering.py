"""Dependencies run one way (trainables.schema ← trainables ← study ← dashboards ← study.run), checked on the source."""

from __future__ import annotations

from harness.layering import cycles, import_graph, store_doors, upward_imports


def test_no_module_imports_a_higher_layer_and_module_level_imports_have_no_cycle():
    graph = import_graph()
    assert {"trainables.schema.spec", "trainables.loop", "study.search.driver", "dashboards.build"} <= set(graph)
    assert upward_imports(graph) == []
    assert cycles(graph) == []


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path):
    for package, source in {
        "trainables": {"b.py": "import trainables.c\n", "c.py": "from trainables import b\n"},
        "trainables/schema": {"a.py": "from trainables import b\n"},
        "study": {},
        "dashboards": {},
    }.items():
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
        for name, text in source.items():
            (tmp_path / package / name).write_text(text)
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == [
        "trainables.schema.a (trainables.schema) imports trainables (trainables)",
        "trainables.schema.a (trainables.schema) imports trainables.b (trainables)",
    ]
    assert cycles(graph) == [["trainables.b", "trainables.c"]]


def test_only_study_tracking_opens_the_stores():
    assert store_doors() == []


def test_the_checker_sees_a_new_door_to_the_stores(tmp_path):
    for package, source in {
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
    }.items():
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
        for name, text in source.items():
            (tmp_path / package / name).write_text(text)
    assert store_doors(tmp_path) == [
        "dashboards.load imports mlflow.entities (only study.tracking may)",
        "dashboards.rdb opens an Optuna storage (optuna.storages.RDBStorage, line 3) (only study.tracking may)",
        "study.status opens an Optuna storage (optuna.load_study, line 4) (only study.tracking may)",
    ]
