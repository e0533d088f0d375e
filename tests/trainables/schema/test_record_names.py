"""Every name the study stores on disk or in MLflow has one home, :mod:`trainables.schema.record`: a literal copy of
one of them anywhere else in the shipped code (or the harness and benchmarks that read studies back) fails here, and so
does a run tag's name spelled in the dashboards, which read the tags as their columns."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from trainables.schema import record as R

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("study", "trainables", "dashboards", "harness", "benchmarks")
HOME = ROOT / "trainables" / "schema" / "record"

#: File and folder names: a string holding one as a path component is a copy.
FILE_NAMES = (
    R.SPEC_FILE,
    R.OPTUNA_DB,
    R.MLFLOW_DB,
    R.MLFLOW_ARTIFACTS_DIR,
    R.FINAL_EXPERIMENT,
    R.ASHA_STATE_FILE,
    R.SCHEDULER_STATE_FILE,
    R.FINAL_SUMMARY_FILE,
    R.CLASS_WEIGHTS_FILE,
    R.SAMPLE_WEIGHTS_FILE,
    R.TRAIN_LABELS_FILE,
    R.PAIRED_EMBEDDINGS_FILE,
    R.DASHBOARD_PAGE,
    R.TABLE_SPEC_FILE,
    R.TABLE_REPORT_FILE,
    R.STUDY_LOG_FILE,
    R.FINAL_CATEGORY_FILE,
)
#: Tags and folder names too short to search inside other strings: a string equal to one is a copy.
EXACT_NAMES = (
    R.ROLE_TAG,
    R.BEST_TRIAL_ID,
    R.FINAL_PLANNED,
    R.SOURCE_TRIAL,
    R.FAILURE_REASON,
    R.STOPPED_EARLY,
    R.VAL_LABELS,
    R.SEARCH_EXPERIMENT,
    R.ARTIFACTS_DIR,
    R.SERVER_LOG,
)

#: Run tags that are also ordinary words, so a string equal to one is a copy only where the tags are read as columns:
#: in the dashboards. Elsewhere the same words are spec keys (``family:``, ``dataset:``, ``seed:`` in YAML), whose home
#: is the spec models. (``validation`` and ``selection`` are left out: ``validation`` also names a dashboard panel.)
TAG_NAMES = (
    R.FAMILY,
    R.DATASET,
    R.NOISE_KIND,
    R.NOISE_RATIO,
    R.SUBSET,
    R.SEED,
    R.GROUP,
    R.TRIAL_ID,
    R.STAGE,
)
#: Where :data:`TAG_NAMES` are read as columns.
TAG_READERS = ("dashboards",)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literal_copies(root: Path = ROOT) -> list[str]:
    """``path:line: 'literal'`` for every string constant outside the record that copies a stored name, or in the
    dashboards a tag's name (docstrings, which describe the names, and help texts are prose; they are not read)."""
    component = re.compile(r"(?:^|[/\\\s'\"=])(" + "|".join(map(re.escape, FILE_NAMES)) + r")(?:$|[/\\\s'\"])")
    found = []
    for package in PACKAGES:
        exact = EXACT_NAMES + TAG_NAMES if package in TAG_READERS else EXACT_NAMES
        for path in sorted((root / package).rglob("*.py")):
            if HOME in path.parents:
                continue
            tree = ast.parse(path.read_text(), str(path))
            skip = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg == "help":
                    skip.update(id(n) for n in ast.walk(node.value))
            hits = [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                if node.value in exact or component.search(node.value)
            ]
            found += [f"{path.relative_to(root)}:{n.lineno}: {n.value!r}" for n in sorted(hits, key=lambda n: n.lineno)]
    return found


def test_no_stored_name_is_spelled_outside_the_record():
    assert literal_copies() == []


def test_the_check_finds_a_copy(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "x.py").write_text(
        f'"""Docstrings may say {R.SPEC_FILE}."""\nA = "{R.OPTUNA_DB}"\nB = f"{{root}}/{R.SPEC_FILE}"\nC = "{R.ROLE_TAG}"\n'
        f'SPEC_KEY = "{R.FAMILY}"\n'
    )
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "y.py").write_text(
        f'def f(runs):\n    return runs.sort("{R.FAMILY}", "{R.NOISE_RATIO}").group_by(runs["{R.SUBSET}"])\n'
        f'G = {{"{R.GROUP}": 1}}\n'
    )
    assert [line.split(": ", 1)[0] for line in literal_copies(tmp_path)] == [
        "study/x.py:2",
        "study/x.py:3",
        "study/x.py:4",
        "dashboards/y.py:2",
        "dashboards/y.py:2",
        "dashboards/y.py:2",
        "dashboards/y.py:3",
    ]
