"""Dependencies run one way (trainables.schema ← trainables ← study's sub-layers ← dashboards ← the command lines), with
no cycle, not even through a function-level import, checked on the source."""

from __future__ import annotations

from pathlib import Path

from harness.layering import (
    LAYERS,
    cycles,
    function_cycles,
    import_graph,
    store_doors,
    type_cycles,
    upward_imports,
)


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
    assert type_cycles(graph) == []  # (issue 57: study.table.bill <-> study.table.spec, one side under TYPE_CHECKING)


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


def test_the_checker_sees_an_upward_import_between_study_sub_layers(tmp_path):
    """Inside ``study``: intake (``study.intake``) below the engine (``study.search``), the cells' status below the
    launchers (``study.deploy``), ``study.runtime`` below everything; a function-level or ``TYPE_CHECKING`` import is no
    exception. A module of one rank may import another of the same rank, and anything lower."""
    _plant(
        tmp_path,
        {
            "trainables": {},
            "trainables/schema": {},
            "study": {
                "status.py": "from study.deploy.slurm import line\n",
                "cell_status.py": "from study.deploy.slurm import line\nfrom study.search import space\n",
            },
            "study/intake": {
                "validation.py": "def check():\n    from study.search.space import grid_points\n",
                "loading.py": "from study.intake.validation import check\nfrom study.runtime.storage import read\n",
            },
            "study/runtime": {
                "storage.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from study.tracking.x import X\n"
            },
            "study/tracking": {"x.py": "from study.runtime.storage import read\n"},
            "study/search": {"space.py": "from study.intake.validation import check\nfrom study.progress import bar\n"},
            "study/deploy": {"slurm.py": "from study.cell_status import show\n"},
            "dashboards": {},
        },
    )
    (tmp_path / "study" / "progress.py").write_text("")
    assert upward_imports(import_graph(tmp_path)) == [
        "study.cell_status (study.cell_status) imports study.deploy.slurm (study.deploy)",
        "study.intake.validation (study.intake) imports study.search.space (study.search)",
        "study.runtime.storage (study.runtime) imports study.tracking.x (study.tracking)",
    ]


def test_every_study_module_has_a_declared_sub_layer():
    """A new top-level part of ``study`` must be placed in :data:`LAYERS`: unplaced, it would rank with
    ``study.runtime`` at the bottom (and could import nothing above it)."""
    placed = {prefix for rank in LAYERS for prefix in rank}
    parts = {".".join(m.split(".")[:2]) for m in import_graph() if m.startswith("study.")}
    assert parts <= placed, sorted(parts - placed)


def test_the_checker_sees_a_cycle_through_a_function_level_import(tmp_path):
    """The circle study.status ↔ study.table.status (now study.cell_status) was of this kind: each side imported the other inside a function,
    so the module-level check missed it. A ``TYPE_CHECKING`` import (never run) closes no cycle, and neither does a
    lazy face (``dashboards/__init__.py``) reached by ``from dashboards import stats``, which imports the module alone."""
    _plant(
        tmp_path,
        {
            "trainables": {},
            "trainables/schema": {},
            "study": {
                "status.py": "def main():\n    from study.cell_status import cells_status\n",
                "spec.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from study.bill import Bill\n",
                "cell_status.py": "from study import spec\n\ndef cells_status():\n    from study.status import driver_text\n",
                "bill.py": "from study.spec import S\n",
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
        "study.cell_status -> study.status: study.cell_status -> study.status (function); "
        "study.status -> study.cell_status (function)"
    ]
    assert type_cycles(graph) == [  # never run, still one room split in two
        "study.bill -> study.spec: study.bill -> study.spec (module); study.spec -> study.bill (typing)"
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


def test_an_import_of_a_name_from_a_wing_is_an_import_of_the_wing(tmp_path):
    """``from study.search import run_study`` (the wings declare no faces: their ``__init__`` is a map) is an import
    of ``study.search`` itself: an upward one is seen."""
    _plant(
        tmp_path,
        {
            "trainables": {},
            "trainables/schema": {},
            "study": {"bill.py": "from study.search import run_study\n"},
            "study/intake": {"validation.py": "from study.search import run_study\n"},
            "study/search": {"driver.py": "def run_study():\n    pass\n"},
            "dashboards": {},
        },
    )
    graph = import_graph(tmp_path)
    assert ("study.search", "module") in graph["study.bill"]
    assert upward_imports(graph) == ["study.intake.validation (study.intake) imports study.search (study.search)"]
