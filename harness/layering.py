"""``python -m harness.layering``: check that dependencies run one way, and print the import graph's evidence.

Layers, lowest first (:data:`LAYERS`; modules of one rank may import each other):

1. ``trainables.schema`` (spec models, errors, metric names), then ``trainables`` (families, data, models, loop);
2. ``study``, in sub-layers:

   - ``study.runtime`` (Ray's compatibility module, storage paths, locks, stop signals: the tools every other part
     uses; ``study/__init__.py`` and any module not named below rank here, so a new module must be placed before it
     may import the rest of ``study``);
   - ``study.tracking`` (the one door to MLflow and the Optuna storages; it uses ``study.runtime``);
   - the low helpers: ``study.final`` (picking the best, intervals, the final stage's plan: it imports no other part
     of ``study``), ``study.arguments`` (it masks passwords with ``study.tracking``), ``study.console`` (it writes
     through ``study.runtime`` and masks with ``study.tracking``), ``study.data`` (fetching datasets and weights; its
     command line uses ``study.arguments``);
   - ``study.intake`` (a spec read, checked, given its directory and its plan: a study is a table of one arm);
   - ``study.search`` and ``study.progress`` (the engine and its live table);
   - ``study.bill`` and ``study.cell_status`` (what a plan costs, where each of its cells stands: they read the
     engine's calibration and its stores);
   - ``study.deploy`` (Slurm and KubeRay launchers, which price plans);

3. ``dashboards``;
4. the command lines (``study.commands``): ``status``, ``mlflow_server`` and ``head`` (``dmlstudy up``/``down``), then
   ``run`` and ``invocation`` (which compose a run, its report and its dashboard, and answer ``--status``), then ``cli``
   (``dmlstudy``, which dispatches to every command line) beside the entry points ``python -m study.run`` and
   ``python -m study.status``.

A module may import its own layer and the layers below it, never above — function-local and ``TYPE_CHECKING``
imports included. Imports must also be free of cycles within a layer: those at module level, and those made inside
functions too (a function-local import that dodges a cycle keeps the cycle), and those under ``TYPE_CHECKING``
(they never run, but a type-level cycle is still two modules that cannot be read, moved or tested one without the
other). ``from P import M`` of a module ``M`` is an import of ``P.M``, as ``import P.M`` is: that Python
runs ``P/__init__.py`` first is true of every import under ``P``.

One door to the stores (:mod:`study.tracking`): no module outside ``study.tracking`` imports ``mlflow`` or opens an
Optuna storage (``optuna.load_study``/``create_study``/``get_all_study_names``…, ``optuna.storages``), so every store
call goes through the outage guard; a new door fails CI here.

The same command runs the house's other source rules (:mod:`harness.house_rules`): no function longer than
:data:`~harness.house_rules.MAX_FUNCTION_LINES` lines in ``study/``, ``trainables/``, ``dashboards/``, and no
function-level import of the project's own modules in ``study/`` without a comment saying why it is not at module
level. Exit 0 when all of it holds, 1 with one line per violation otherwise.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from harness.house_rules import MAX_FUNCTION_LINES, long_functions, unexplained_imports

__all__ = [
    "LAYERS",
    "STORE_DOOR",
    "MODULE",
    "FUNCTION",
    "TYPING",
    "import_graph",
    "upward_imports",
    "cycles",
    "function_cycles",
    "type_cycles",
    "store_doors",
    "main",
]

#: The layers, lowest first, each a tuple of module prefixes of one rank (a module belongs to its longest matching
#: prefix: ``study.run`` over ``study``, ``trainables.schema`` over ``trainables``). Ranked from the import graph as it
#: stands: ``study.tracking`` uses ``study.runtime``; ``study.arguments`` and ``study.console`` use ``study.tracking``;
#: ``study.data``'s command line uses ``study.arguments``; intake uses all of those; ``study.search`` uses intake,
#: ``study.bill`` the engine's calibration, ``study.deploy`` the bill; ``dashboards`` read the cells' status;
#: ``study.commands.run`` (with ``study.commands.invocation``, its command line) answers ``--status`` through
#: ``study.commands.status`` and reports through ``dashboards``; ``study.commands.cli`` dispatches to every command,
#: and the entry points ``study.run`` and ``study.status`` call theirs.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("trainables.schema",),
    ("trainables",),
    ("study", "study.runtime"),
    ("study.tracking",),
    ("study.final", "study.arguments", "study.console", "study.data"),
    ("study.intake",),
    ("study.search", "study.progress"),
    ("study.bill", "study.cell_status"),
    ("study.deploy",),
    ("dashboards",),
    ("study.commands", "study.commands.status", "study.commands.mlflow_server", "study.commands.head"),
    ("study.commands.run", "study.commands.invocation"),
    ("study.commands.cli", "study.run", "study.status"),
)
_PREFIXES: dict[str, int] = {prefix: rank for rank, prefixes in enumerate(LAYERS) for prefix in prefixes}
_ROOT = Path(__file__).resolve().parents[1]
#: Where an import stands: at module level, inside a function (or a class body, or any block but the one below),
#: under ``if TYPE_CHECKING:`` (never run).
MODULE, FUNCTION, TYPING = "module", "function", "typing"
#: The one package that may import ``mlflow`` and open Optuna storages.
STORE_DOOR = "study.tracking"
#: Optuna's functions and modules that open a storage from a URL (Optuna's own ``Study`` methods work on a storage
#: already opened, so they are not doors).
_OPTUNA_DOORS = frozenset(
    {"load_study", "create_study", "delete_study", "copy_study", "get_all_study_names", "get_all_study_summaries",
     "storages"}
)  # fmt: skip


def _layer(module: str) -> tuple[int, str] | None:
    """``(rank, prefix)`` of the layer ``module`` belongs to: its longest (most specific) matching prefix wins."""
    matches = [prefix for prefix in _PREFIXES if module == prefix or module.startswith(prefix + ".")]
    if not matches:
        return None
    prefix = max(matches, key=len)
    return _PREFIXES[prefix], prefix


def _packages() -> list[str]:
    """The top-level packages the layers name (``study``, ``trainables``, ``dashboards``)."""
    return sorted({prefix.split(".")[0] for prefix in _PREFIXES})


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, root: Path) -> bool:
    path = root / name.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists()


def _typing_only(tree: ast.Module) -> set[int]:
    """The ids of the imports under a module-level ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and _dotted(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _imported(node: ast.Import | ast.ImportFrom, root: Path) -> list[str]:
    """The modules an import statement imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert node.module is not None
    inner = [f"{node.module}.{a.name}" for a in node.names]
    # ``from P import M`` of modules only is ``import P.M``: no edge to P's __init__ of its own
    whole = any(not _is_module(name, root) for name in inner)
    return [node.module, *inner] if whole else inner


def import_graph(root: Path = _ROOT) -> dict[str, list[tuple[str, str]]]:
    """``module → [(imported module, where)]`` for every module of the layered packages; ``where`` is :data:`MODULE`,
    :data:`FUNCTION` or :data:`TYPING`."""
    graph: dict[str, list[tuple[str, str]]] = {}
    for package in _packages():
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(), str(path))
            top_level = {id(node) for node in tree.body}
            typing_only = _typing_only(tree)
            edges = graph.setdefault(module, [])
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Import)
                    or (isinstance(node, ast.ImportFrom) and node.module and node.level == 0)
                ):
                    continue
                names = _imported(node, root)
                where = MODULE if id(node) in top_level else TYPING if id(node) in typing_only else FUNCTION
                for name in names:
                    if _layer(name) is not None and (name in graph or _is_module(name, root)):
                        edges.append((name, where))
    return graph


def upward_imports(graph: dict[str, list[tuple[str, str]]]) -> list[str]:
    """``a imports b`` lines where ``b`` sits in a higher layer than ``a``."""
    out = []
    for module, edges in sorted(graph.items()):
        for target, _ in edges:
            low, high = _layer(module), _layer(target)
            if low is not None and high is not None and high[0] > low[0]:
                out.append(f"{module} ({low[1]}) imports {target} ({high[1]})")
    return sorted(set(out))


def _doors_of(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] == "mlflow"]
            found += [f"imports {a.name}" for a in node.names if a.name.startswith("optuna.storages")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top == "mlflow" or node.module.startswith("optuna.storages"):
                found.append(f"imports {node.module}")
            elif node.module == "optuna":
                found += [f"imports optuna.{a.name}" for a in node.names if a.name in _OPTUNA_DOORS]
        elif isinstance(node, ast.Call) and (name := _dotted(node.func)).split(".")[0] == "optuna":
            parts = name.split(".")
            if set(parts) & _OPTUNA_DOORS - {"storages"} or ("storages" in parts and parts[-1].endswith("Storage")):
                found.append(f"opens an Optuna storage ({name}, line {node.lineno})")
    return found


def _dotted(node: ast.AST) -> str:
    """``optuna.storages.RDBStorage`` for that attribute chain, ``""`` for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def store_doors(root: Path = _ROOT) -> list[str]:
    """``module imports mlflow`` / ``module opens an Optuna storage`` lines for the layered packages' modules outside
    :data:`STORE_DOOR`."""
    out = []
    for package in _packages():
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            if module == STORE_DOOR or module.startswith(STORE_DOOR + "."):
                continue
            for door in sorted(set(_doors_of(ast.parse(path.read_text(), str(path))))):
                out.append(f"{module} {door} (only {STORE_DOOR} may)")
    return out


def cycles(graph: dict[str, list[tuple[str, str]]], kinds: frozenset[str] = frozenset({MODULE})) -> list[list[str]]:
    """Strongly connected components of more than one module among the imports of ``kinds`` (module-level ones
    unless told; Tarjan)."""
    adjacency = {m: sorted({t for t, k in edges if k in kinds and t in graph and t != m}) for m, edges in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adjacency[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(1000, 10 * len(adjacency)))
    for v in adjacency:
        if v not in index:
            visit(v)
    return found


def function_cycles(graph: dict[str, list[tuple[str, str]]]) -> list[str]:
    """``a -> b (names) -> a`` lines for the cycles that the imports made inside functions close (those of module-level
    imports alone are :func:`cycles`'), each import of the cycle with where it stands."""
    module_level = cycles(graph)
    out = []
    for component in cycles(graph, frozenset({MODULE, FUNCTION})):
        if component in module_level:
            continue
        members = set(component)
        ties = sorted(
            {f"{m} -> {t} ({k})" for m in component for t, k in graph[m] if t in members and t != m and k != TYPING}
        )
        out.append(f"{' -> '.join(component)}: {'; '.join(ties)}")
    return out


def type_cycles(graph: dict[str, list[tuple[str, str]]]) -> list[str]:
    """``a -> b (names) -> a`` lines for the cycles that ``TYPE_CHECKING`` imports close (those of running imports are
    :func:`cycles`' and :func:`function_cycles`'), each import of the cycle with where it stands."""
    running = cycles(graph, frozenset({MODULE, FUNCTION}))
    out = []
    for component in cycles(graph, frozenset({MODULE, FUNCTION, TYPING})):
        if component in running:
            continue
        members = set(component)
        ties = sorted({f"{m} -> {t} ({k})" for m in component for t, k in graph[m] if t in members and t != m})
        out.append(f"{' -> '.join(component)}: {'; '.join(ties)}")
    return out


def main() -> int:
    graph = import_graph()
    upward = upward_imports(graph)
    loops = cycles(graph)
    function_loops = function_cycles(graph)
    type_loops = type_cycles(graph)
    doors = store_doors()
    long, unexplained = long_functions(), unexplained_imports()
    edges = sum(len(e) for e in graph.values())
    for line in upward:
        print(f"upward import: {line}")
    for component in loops:
        print(f"import cycle: {' -> '.join(component)}")
    for line in function_loops:
        print(f"import cycle through a function-level import: {line}")
    for line in type_loops:
        print(f"import cycle through a TYPE_CHECKING import: {line}")
    for line in doors:
        print(f"store door: {line}")
    for line in long:
        print(f"long function: {line}")
    for line in unexplained:
        print(f"function-level import: {line}")
    print(
        f"{len(graph)} modules, {edges} internal imports; layers {' <- '.join('|'.join(r) for r in LAYERS)}; "
        f"{len(upward)} upward imports, {len(loops)} module-level cycles, {len(function_loops)} cycles through "
        f"function-level imports, {len(type_loops)} through TYPE_CHECKING imports, {len(doors)} store doors outside {STORE_DOOR}, {len(long)} functions over "
        f"{MAX_FUNCTION_LINES} lines, {len(unexplained)} unexplained function-level imports"
    )
    return 1 if upward or loops or function_loops or type_loops or doors or long or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
