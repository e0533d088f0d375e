"""``python -m harness.layering``: check that dependencies run one way, and print the import graph's evidence.

Layers, lowest first: ``schema`` (spec models, errors, metric names) ← ``trainables`` (families, data, models,
loop) ← ``study`` (validation against the registries, tuning, tracking) ← ``dashboards`` ← ``study.run`` (the
command line, which composes a study and its dashboard) ← ``study.cli`` (``dmlstudy``, which dispatches to every
command line). A module may import its own layer and the layers below it, never above — function-local and
``TYPE_CHECKING`` imports included. Imports must also be free of cycles within a layer: those at module level, and
those made inside functions too (a function-local import that dodges a cycle keeps the cycle; ``TYPE_CHECKING``
imports, which never run, do not count). ``from P import M`` of a module ``M`` is an import of ``P.M``, as
``import P.M`` is: that Python runs ``P/__init__.py`` first is true of every import under ``P``.

One door to the stores (:mod:`study.tracking`): no module outside ``study.tracking`` imports ``mlflow`` or opens an
Optuna storage (``optuna.load_study``/``create_study``/``get_all_study_names``…, ``optuna.storages``), so every store
call goes through the outage guard; a new door fails CI here. Exit 0 when all of it holds, 1 with one line per
violation otherwise.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

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
    "store_doors",
    "main",
]

#: Packages (a sub-package may be a layer of its own below its parent: the torch-free ``trainables.schema``), then the
#: command lines that sit above them all, lowest layer first.
LAYERS: tuple[str, ...] = ("trainables.schema", "trainables", "study", "dashboards", "study.run", "study.cli")
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


def _layer(module: str) -> int | None:
    matches = [rank for rank, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    # the longest (most specific) prefix wins: study.run over study, trainables.schema over trainables
    return max(matches, key=lambda rank: len(LAYERS[rank])) if matches else None


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


def import_graph(root: Path = _ROOT) -> dict[str, list[tuple[str, str]]]:
    """``module → [(imported module, where)]`` for every module of the layered packages; ``where`` is :data:`MODULE`,
    :data:`FUNCTION` or :data:`TYPING`."""
    graph: dict[str, list[tuple[str, str]]] = {}
    for package in {p.split(".")[0] for p in LAYERS}:
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(), str(path))
            top_level = {id(node) for node in tree.body}
            typing_only = _typing_only(tree)
            edges = graph.setdefault(module, [])
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    inner = [f"{node.module}.{a.name}" for a in node.names]
                    # ``from P import M`` of modules only is ``import P.M``: no edge to P's __init__ of its own
                    whole = any(not _is_module(name, root) for name in inner)
                    names = [node.module, *inner] if whole else inner
                else:
                    continue
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
            if low is not None and high is not None and high > low:
                out.append(f"{module} ({LAYERS[low]}) imports {target} ({LAYERS[high]})")
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
    for package in sorted({p.split(".")[0] for p in LAYERS}):
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


def main() -> int:
    graph = import_graph()
    upward = upward_imports(graph)
    loops = cycles(graph)
    function_loops = function_cycles(graph)
    doors = store_doors()
    edges = sum(len(e) for e in graph.values())
    for line in upward:
        print(f"upward import: {line}")
    for component in loops:
        print(f"import cycle: {' -> '.join(component)}")
    for line in function_loops:
        print(f"import cycle through a function-level import: {line}")
    for line in doors:
        print(f"store door: {line}")
    print(
        f"{len(graph)} modules, {edges} internal imports; layers {' <- '.join(LAYERS)}; "
        f"{len(upward)} upward imports, {len(loops)} module-level cycles, {len(function_loops)} cycles through "
        f"function-level imports, {len(doors)} store doors outside {STORE_DOOR}"
    )
    return 1 if upward or loops or function_loops or doors else 0


if __name__ == "__main__":
    sys.exit(main())
