"""Dependencies run one way (trainables.schema ← trainables ← study ← dashboards ← study.run), checked on the source."""

from __future__ import annotations

from harness.layering import cycles, import_graph, upward_imports


def test_no_module_imports_a_higher_layer_and_module_level_imports_have_no_cycle():
    graph = import_graph()
    assert {"trainables.schema.spec", "trainables.loop", "study.tuner", "dashboards.build"} <= set(graph)
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
