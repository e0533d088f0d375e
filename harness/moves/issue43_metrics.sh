#!/usr/bin/env bash
# Issue 43 item 3 (trainables/metrics/ as one package; the dataset names in the catalogue), and item 6's pointers to
# the README sections that moved into docs/: the pure moves and rewrites, replayable.
#
# Run from the repository root, as often as needed (after merging other work, say): each `git mv` runs only while its
# source still stands, and the rewrites turn any import or reference of an old path into the new one, so a second run
# changes nothing. What is written by hand, not moved, is in the commits beside this script: the carve of
# trainables/metrics/neighbours.py (the kNN search and what it searches) and trainables/metrics/contrastive.py (the
# torch metrics) out of retrieval.py, the package's face, the dataset sets' move into trainables/datasets.py, and the
# tests that reach a module by attribute (`from trainables import metrics`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

move() { if [ -e "$1" ]; then mkdir -p "$(dirname "$2")" && git mv "$1" "$2"; fi; }
move trainables/metrics.py trainables/metrics/retrieval.py
move trainables/metric_registry.py trainables/metrics/registry.py
move trainables/category_metrics.py trainables/metrics/categories.py
move trainables/names.py trainables/backbones.py

python3 - <<'PY'
"""Rewrite every `from OLD import a, b` (one line or parenthesised) of the tree into one import per new module, and
the dotted references in docstrings and docs; `ruff check --fix --select I` then sorts the imports."""
import ast
import re
import subprocess

# old module -> {name: new module}; "*" is where a name not listed goes.
MOVES = {
    "trainables.metrics": {
        "knn_indices": "trainables.metrics.neighbours",
        "use_faiss_gpu": "trainables.metrics.neighbours",
        "paired_metrics": "trainables.metrics.contrastive",
        "linear_probe_accuracy": "trainables.metrics.contrastive",
        "*": "trainables.metrics.retrieval",
    },
    "trainables.metric_registry": {"*": "trainables.metrics.registry"},
    "trainables.category_metrics": {"*": "trainables.metrics.categories"},
    "trainables.names": {
        "BACKBONE_NAMES": "trainables.backbones",
        "PRETRAINABLE": "trainables.backbones",
        "*": "trainables.datasets",
    },
}
SUBMODULES = {"categories", "contrastive", "neighbours", "registry", "retrieval"}
PATHS = {  # file paths in prose (docs, comments), the most specific first
    "trainables/metrics.py::paired_metrics": "trainables/metrics/contrastive.py::paired_metrics",
    "trainables/metrics.py": "trainables/metrics/retrieval.py",
    "trainables/metric_registry.py": "trainables/metrics/registry.py",
    "trainables/category_metrics.py": "trainables/metrics/categories.py",
}


def target(old: str, name: str) -> str:
    return MOVES[old].get(name, MOVES[old]["*"])


def rewrite_imports(text: str) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    for node in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
        if not (isinstance(node, ast.ImportFrom) and node.module in MOVES and node.level == 0):
            continue
        if node.module == "trainables.metrics" and all(a.name in SUBMODULES for a in node.names):
            continue  # `from trainables.metrics import retrieval`: the package's own modules, already new
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        by_module: dict[str, list[str]] = {}
        for alias in node.names:
            spelled = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
            by_module.setdefault(target(node.module, alias.name), []).append(spelled)
        new = [f"{indent}from {m} import {', '.join(names)}\n" for m, names in sorted(by_module.items())]
        lines[node.lineno - 1 : node.end_lineno] = new
    return "".join(lines)


def rewrite_references(text: str) -> str:
    # item 6: the README's "Reproducible studies" is docs/reproducibility.md now
    text = text.replace('README "Reproducible studies"', "docs/reproducibility.md")
    text = text.replace("are said so in the\nREADME: ", "are said so in\ndocs/reproducibility.md: ")
    for old, new in PATHS.items():
        text = text.replace(old, new)
    for old, names in MOVES.items():
        for name in (n for n in names if n != "*"):
            text = re.sub(rf"\b{re.escape(old)}\.{name}\b", f"{names[name]}.{name}", text)
        # a dotted reference to a name not listed: ``trainables.metric_registry.computes`` and the like
        if old != "trainables.metrics":
            text = re.sub(rf"\b{re.escape(old)}\.(?=[A-Za-z_])", MOVES[old]["*"] + ".", text)
            text = re.sub(rf"\b{re.escape(old)}\b(?![./\w])", MOVES[old]["*"], text)
    text = re.sub(r"\btrainables\.metrics\.(?!(?:" + "|".join(SUBMODULES) + r")\b)(\w+)",
                  r"trainables.metrics.retrieval.\1", text)
    return text


files = subprocess.run(["git", "ls-files", "*.py", "*.md"], capture_output=True, text=True, check=True).stdout.split()
for path in files:
    if path.startswith("harness/moves/"):
        continue
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = rewrite_references(rewrite_imports(text) if path.endswith(".py") else text)
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        print("rewrote", path)
PY

"${RUFF:-ruff}" check --quiet --fix --select I . || true
"${RUFF:-ruff}" format --quiet .
