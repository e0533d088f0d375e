"""``tests/PROMISES.md`` stays whole: every test it names exists, every end-to-end test has its row, and its two
sections (promises by kind; the tests) name the same promises for each test.

An end-to-end test, for this check, is a test function under ``tests/study``, ``tests/trainables``,
``tests/dashboards`` or ``tests/docs`` that is marked ``e2e`` (on itself or by its module's ``pytestmark``), or that
starts a server, a cluster or a study's driver: it, a fixture it asks for or a helper it calls (of its own module)
names one of :data:`STARTERS`. The test files are read with :mod:`ast`, not collected: the whole check takes well under
a second."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMISES = REPO / "tests" / "PROMISES.md"
SCANNED = ("tests/study", "tests/trainables", "tests/dashboards", "tests/docs")

#: Names whose use starts something end to end: servers (PostgreSQL, S3, MLflow), clusters (Slurm, a network
#: namespace's ``ray start`` nodes, Ray's simulated cluster, the deployment) and a study's driver run by the harness.
STARTERS = frozenset(
    {
        "postgres_server",
        "s3_server",
        "SlurmCluster",
        "Deployment",
        "NetNamespace",
        "serve",
        "start_server",
        "Cluster",
        "kill_then_resume",
        "kill_and_resume",
        "run_and_stop",
        "start_driver",
    }
)

_NODE = re.compile(r"`(tests/[\w/]+\.py::\w+)`")
_PROMISE_ROW = re.compile(r"^\| ([A-Z]+\d+) \| .*? \| (.*) \|$")
_GAP = "**none end to end**"


@dataclass
class PromiseList:
    """What ``PROMISES.md`` says: per promise id, its tests (section 1); per listed test, its promise ids (section 2);
    the ids of the known gaps; and every test node named anywhere."""

    tests_of: dict[str, set[str]] = field(default_factory=dict)
    promises_of: dict[str, set[str]] = field(default_factory=dict)
    gaps: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)


def parse_promises(text: str) -> PromiseList:
    """Read section 1's rows (``| ID | promise | checked by |``) and section 2's (``| `node` | … | ids |``)."""
    found = PromiseList()
    for line in text.splitlines():
        found.named.update(_NODE.findall(line))
        if (row := _PROMISE_ROW.match(line)) is not None:
            pid, checked_by = row.groups()
            assert pid not in found.tests_of and pid not in found.gaps, f"promise {pid} is listed twice"
            if checked_by.startswith(_GAP):
                found.gaps.add(pid)
            else:
                found.tests_of[pid] = set(_NODE.findall(checked_by))
                assert found.tests_of[pid], f"promise {pid} names no test and does not say it is a gap"
        elif line.startswith("| `tests/"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            (node,) = _NODE.findall(cells[0])
            assert node not in found.promises_of, f"{node} has two rows in section 2"
            found.promises_of[node] = {p.strip() for p in cells[-1].split(",") if p.strip()}
    return found


def _is_e2e_mark(node: ast.expr) -> bool:
    return "mark.e2e" in ast.unparse(node)


def _names(node: ast.AST) -> set[str]:
    """Every bare name and attribute name used in ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _starts_something(name: str, functions: dict[str, ast.FunctionDef], seen: set[str]) -> bool:
    """Whether function ``name`` of a module, or a fixture it asks for or a function it names there, uses a starter."""
    if name in seen or name not in functions:
        return False
    seen.add(name)
    function = functions[name]
    used = _names(function) | {a.arg for a in function.args.args}
    return bool(used & STARTERS) or any(_starts_something(n, functions, seen) for n in used if n in functions)


def end_to_end_tests(path: Path, root: Path) -> set[str]:
    """The end-to-end test functions of one test module, as node ids relative to ``root``."""
    tree = ast.parse(path.read_text())
    module_marked = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and _is_e2e_mark(node.value)
        for node in tree.body
    )
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    relative = path.relative_to(root).as_posix()
    return {
        f"{relative}::{name}"
        for name, function in functions.items()
        if name.startswith("test_")
        and (
            module_marked
            or any(_is_e2e_mark(d) for d in function.decorator_list)
            or _starts_something(name, functions, set())
        )
    }


def scan(root: Path, folders: tuple[str, ...] = SCANNED) -> set[str]:
    """Every end-to-end test under ``folders`` of ``root``."""
    return {
        node
        for folder in folders
        for path in sorted((root / folder).rglob("test_*.py"))
        for node in end_to_end_tests(path, root)
    }


def defined(node: str, root: Path) -> bool:
    """Whether ``path::name`` is a function defined in that file (at module level or in a class)."""
    relative, name = node.split("::")
    path = root / relative
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree))


def problems(text: str, root: Path, folders: tuple[str, ...] = SCANNED) -> list[str]:
    """What keeps the list from being whole and true, one line each (empty: nothing)."""
    listed = parse_promises(text)
    said = [f"{node}: no such test" for node in sorted(listed.named) if not defined(node, root)]
    said += [
        f"{node}: an end-to-end test without its row" for node in sorted(scan(root, folders) - set(listed.promises_of))
    ]
    pairs_by_kind = {(pid, node) for pid, nodes in listed.tests_of.items() for node in nodes}
    pairs_by_test = {(pid, node) for node, pids in listed.promises_of.items() for pid in pids}
    said += [
        f"{node}: promise {pid} in section 1 but not in its row" for pid, node in sorted(pairs_by_kind - pairs_by_test)
    ]
    said += [
        f"{node}: promise {pid} in its row but not in section 1" for pid, node in sorted(pairs_by_test - pairs_by_kind)
    ]
    said += [f"{node}: its row names no promise" for node, pids in sorted(listed.promises_of.items()) if not pids]
    return said


def test_the_promise_list_is_whole():
    assert problems(PROMISES.read_text(), REPO) == []


def test_the_list_names_every_stop_moment_of_the_issue():
    """The stop moments issue 66 names are each a promise (S…), with a test or said to be a gap."""
    text = PROMISES.read_text()
    listed = parse_promises(text)
    stops = {
        pid: line for line in text.splitlines() if (row := _PROMISE_ROW.match(line)) and (pid := row.group(1))[0] == "S"
    }
    assert set(stops) == {p for p in set(listed.tests_of) | listed.gaps if p.startswith("S")}
    for moment in (
        "before the first epoch",
        "mid-epoch",
        "halving barrier",
        "mid-race",
        "final stage",
        "replicate rounds",
    ):
        assert any(moment in line.lower() for line in stops.values()), moment


# ------------------------------------------------------------------------------------------- the checker can fail


_PLANTED = {
    "tests/study/test_a.py": ("import pytest\npytestmark = pytest.mark.e2e\ndef test_marked_by_module():\n    pass\n"),
    "tests/study/test_b.py": (
        "import pytest\n"
        "from harness.postgres import postgres_server\n"
        "@pytest.fixture\n"
        "def pg():\n    with postgres_server() as s:\n        yield s\n"
        "def _helper():\n    return kill_then_resume()\n"
        "def test_through_a_fixture(pg):\n    pass\n"
        "def test_through_a_helper():\n    _helper()\n"
        "@pytest.mark.e2e\n"
        "def test_marked():\n    pass\n"
        "def test_unit():\n    assert 1 + 1 == 2\n"
    ),
}


def _plant(root: Path) -> None:
    for relative, source in _PLANTED.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def _row(node: str, pids: str) -> str:
    return f"| `{node}` | s | r | no | — | {pids} |"


def test_the_checker_finds_every_kind_of_end_to_end_test(tmp_path):
    _plant(tmp_path)
    assert scan(tmp_path, ("tests/study",)) == {
        "tests/study/test_a.py::test_marked_by_module",
        "tests/study/test_b.py::test_through_a_fixture",
        "tests/study/test_b.py::test_through_a_helper",
        "tests/study/test_b.py::test_marked",
    }


def test_the_checker_sees_a_missing_row_a_missing_test_and_two_sections_that_disagree(tmp_path):
    _plant(tmp_path)
    a, b, c, d = (
        "tests/study/test_a.py::test_marked_by_module",
        "tests/study/test_b.py::test_through_a_fixture",
        "tests/study/test_b.py::test_through_a_helper",
        "tests/study/test_b.py::test_marked",
    )
    whole = "\n".join(
        [
            f"| S1 | a stop | `{a}`, `{b}` |",
            f"| F1 | a fault | `{c}` |",
            f"| B1 | a budget | `{d}` |",
            "| S2 | a gap | **none end to end**: `tests/study/test_b.py::test_unit` |",
            _row(a, "S1"),
            _row(b, "S1"),
            _row(c, "F1"),
            _row(d, "B1"),
        ]
    )
    folders = ("tests/study",)
    assert problems(whole, tmp_path, folders) == []
    assert problems(whole.replace(_row(d, "B1"), ""), tmp_path, folders) == [
        f"{d}: an end-to-end test without its row",
        f"{d}: promise B1 in section 1 but not in its row",
    ]
    renamed = whole.replace("test_unit`", "test_gone`")
    assert problems(renamed, tmp_path, folders) == ["tests/study/test_b.py::test_gone: no such test"]
    merged = whole.replace(f"`{a}`, `{b}`", f"`{a}`")  # b no longer checks S1 in section 1, but its row says it does
    assert problems(merged, tmp_path, folders) == [f"{b}: promise S1 in its row but not in section 1"]
