"""The house's source rules that a linter does not check, run by ``python -m harness.layering`` (CI).

- No function or method in ``study/``, ``trainables/`` or ``dashboards/`` is longer than :data:`MAX_FUNCTION_LINES`
  lines, from its ``def`` line to its last line (decorators not counted; nested functions count inside their parent
  and on their own); the scripts in ``study/deploy/templates/`` are not Python and are not read.
- A function-level import of ``study``'s own modules in ``study/`` says why it is not at module level, in a comment on its line or the line above (``# defers Ray: --status must not import
  it``): deferring a heavy library or breaking a real cycle are the reasons. ``TYPE_CHECKING`` imports are exempt.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

__all__ = [
    "MAX_FUNCTION_LINES",
    "LENGTH_ROOTS",
    "IMPORT_ROOTS",
    "long_functions",
    "unexplained_imports",
]

_ROOT = Path(__file__).resolve().parents[1]
#: The longest a function may be, ``def`` line to last line.
MAX_FUNCTION_LINES = 60
#: Where functions are measured, and what is not Python there.
LENGTH_ROOTS: tuple[str, ...] = ("study", "trainables", "dashboards")
_NOT_MEASURED: tuple[str, ...] = ("study/deploy/templates/",)
#: Where function-level imports of the project's modules must say why.
IMPORT_ROOTS: tuple[str, ...] = ("study",)
#: Whose modules those imports name (a deferred ``trainables`` import defers torch, and says so by its name).
_OWN_PACKAGES = frozenset({"study"})


def _sources(root: Path, folders: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(path relative to root, text)`` of every Python file under ``folders``, sorted."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if not relative.startswith(_NOT_MEASURED):
                out.append((relative, path.read_text()))
    return out


def _qualified_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """``(Class.method or outer.inner name, node)`` for every function of ``tree``."""
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def long_functions(root: Path = _ROOT, *, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name is N lines (more than limit)`` for each function over the limit."""
    out = []
    for relative, text in _sources(root, LENGTH_ROOTS):
        for name, node in _qualified_functions(ast.parse(text, relative)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append(f"{relative}:{node.lineno} {name} is {length} lines (more than {limit})")
    return out


def _comment_lines(text: str) -> dict[int, bool]:
    """Line number → whether the line is a comment alone (``True``) or code with a trailing comment (``False``)."""
    out: dict[int, bool] = {}
    lines = text.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            row = token.start[0]
            out[row] = lines[row - 1].lstrip().startswith("#")
    return out


def _own_module(node: ast.Import | ast.ImportFrom) -> str | None:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.level:
        return None
    return next((n for n in names if n.split(".")[0] in _OWN_PACKAGES), None)


def _typing_only(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def unexplained_imports(root: Path = _ROOT) -> list[str]:
    """``path:line imports M inside a function without a comment saying why`` for each such import of ``study``'s
    modules."""
    out = []
    for relative, text in _sources(root, IMPORT_ROOTS):
        tree = ast.parse(text, relative)
        top_level, typing_only = {id(n) for n in tree.body}, _typing_only(tree)
        comments = _comment_lines(text)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top_level | typing_only:
                continue
            module = _own_module(node)
            if module is None:
                continue
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if any(row in comments for row in span) or comments.get(node.lineno - 1) is True:
                continue
            out.append(f"{relative}:{node.lineno} imports {module} inside a function without a comment saying why")
    return out
