#!/usr/bin/env bash
# Issue 43 items 4 and 5, the pure moves and seams: the last circle goes (``driver_text`` beside the lock it reads),
# ``runtime`` stops importing ``layout`` (the storage check takes the study's root), the MLflow server's command line
# leaves ``tracking/`` for a command module (``python -m study.mlflow_server``), and "the test metric of this metric"
# has one definition, in the torch-free schema (``trainables.schema.metric_names.final_metric``). No behaviour changes.
#
# Replayable from any checkout after merging other work: a step already done is skipped, and the search engine's
# modules are found at their old paths (study/stage_tuners.py, study/tuner.py) or their new ones (study/search/).
#
#   bash harness/moves/issue43_seams.sh          (RUFF=path/to/ruff to sort the rewritten imports with another ruff)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

python3 - <<'EOF'
import ast
import re
from pathlib import Path


def first(*paths: str) -> Path | None:
    return next((Path(p) for p in paths if Path(p).exists()), None)


def carry(src: Path, names: list[str]) -> str:
    """Cut the top-level definitions ``names`` (with their decorators and the comment lines right above them) out of
    ``src``; return their text, in file order."""
    text = src.read_text()
    lines = text.splitlines(keepends=True)
    spans = []
    for node in ast.parse(text).body:
        if getattr(node, "name", None) in names:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            spans.append((start, node.end_lineno))
    out = "".join("".join(lines[a:b]) + "\n\n" for a, b in spans)
    for a, b in reversed(spans):
        del lines[a:b]
    src.write_text(re.sub(r"\n{4,}", "\n\n\n", "".join(lines)).rstrip("\n") + "\n")
    return out


def swap(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{path}: expected {old!r}"
    path.write_text(text.replace(old, new, count))


# 1. driver_text goes where the lock is: study.status and study.table.status both read it from study.runtime.lock, and
#    the circle between them (print_table_status one way, driver_text the other) goes.
lock = Path("study/runtime/lock.py")
if "def driver_text" not in lock.read_text():
    body = carry(Path("study/status.py"), ["driver_text"])
    body = body.replace("    from study.runtime.lock import lock_holder\n\n", "")
    body = body.replace(":func:`~study.runtime.lock.lock_holder`", ":func:`lock_holder`")
    swap(lock, '__all__ = ["study_lock", "lock_holder"]', '__all__ = ["study_lock", "lock_holder", "driver_text"]')
    lock.write_text(lock.read_text().rstrip("\n") + "\n\n\n" + body.rstrip("\n") + "\n")
    swap(Path("study/status.py"), "from study.arguments import ArgumentParser, one_line\n",
         "from study.arguments import ArgumentParser, one_line\nfrom study.runtime.lock import driver_text\n")
    swap(Path("study/table/status.py"), "    from study.status import driver_text\n",
         "    from study.runtime.lock import driver_text\n")

# 2. runtime stops importing layout: the storage check takes the study's root (a path or a URI), not its layout.
cluster = Path("study/runtime/cluster.py")
if "from study.layout import StudyLayout" in cluster.read_text():
    swap(cluster, "from study.layout import StudyLayout\n", "")
    swap(cluster, "def check_storage_reachable(layout: StudyLayout, shared_storage: bool) -> None:\n"
                  '    """Refuse a node-local storage path when the cluster has more than one node."""',
         "def check_storage_reachable(root: str, shared_storage: bool) -> None:\n"
         '    """Refuse a node-local storage path (the study\'s directory ``root``) when the cluster has more than one\n'
         '    node; a URI (object storage) is reachable from every node."""')
    swap(cluster, "layout.remote or shared_storage or is_shared_path(Path(layout.root).parent)",
         '"://" in root or shared_storage or is_shared_path(Path(root).parent)')
    swap(cluster, 'f"storage: {layout.root} is on', 'f"storage: {root} is on')
driver = first("study/search/driver.py", "study/tuner.py")
if driver is not None and "check_storage_reachable(layout," in driver.read_text():
    swap(driver, "check_storage_reachable(layout,", "check_storage_reachable(layout.root,")

# 3. The MLflow server's command line leaves tracking/ (which stops importing study.arguments): study.mlflow_server.
server = Path("study/tracking/server.py")
command = Path("study/mlflow_server.py")
if not command.exists():
    old_doc = ast.get_docstring(ast.parse(server.read_text()), clean=False)
    assert old_doc is not None and "python -m study.tracking.server DIR" in old_doc
    doc = old_doc.replace("python -m study.tracking.server DIR [--host 127.0.0.1] [--port 5000]",
                          "python -m study.mlflow_server DIR [--host 127.0.0.1] [--port 5000]      (dmlstudy mlflow-server DIR)")
    doc = doc.replace("This module runs ``mlflow server`` as a subprocess and does not import mlflow.",
                      "The server itself, and its use from Python (``serve``), is :mod:`study.tracking.server`.")
    body = carry(server, ["_die_with_parent", "main", "_Stopped", "_stop_on_signal"])
    body = body.replace('prog: str = "python -m study.tracking.server"', 'prog: str = "python -m study.mlflow_server"')
    command.write_text(
        f'"""{doc}"""\n\n'
        "from __future__ import annotations\n\n"
        "import contextlib\nimport ctypes\nimport os\nimport signal\nimport sys\nfrom types import FrameType\n\n"
        "from study.arguments import ArgumentParser\n"
        "from study.tracking.server import MlflowServer, start_server\n\n"
        '__all__ = ["main"]\n\n'
        "_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>\n\n\n"
        + body.rstrip("\n")
        + '\n\n\nif __name__ == "__main__":\n    sys.exit(main())\n'
    )
    server.write_text(server.read_text().replace(f'"""{old_doc}"""', '''"""A local MLflow tracking server for a study: sqlite backend, artifacts served from a directory.

``with serve(DIR) as server: server.uri`` for the length of a block, :func:`start_server` for longer; its command
line is :mod:`study.mlflow_server` (``dmlstudy mlflow-server DIR``). The server runs in its own process group, so
:meth:`MlflowServer.stop` ends ``mlflow server`` and the uvicorn and job-runner processes it forks, and with
``die_with_parent`` a :mod:`study.tracking.reaper` ends that group however this process ends. It binds to 127.0.0.1
unless told otherwise: the server has no authentication. This module runs ``mlflow server`` as a subprocess and does
not import mlflow.
"""''', 1))
    swap(server, "import ctypes\n", "")
    swap(server, "from types import FrameType\n", "")
    swap(server, "from study.arguments import ArgumentParser\n", "")
    swap(server, '__all__ = ["MlflowServer", "start_server", "serve", "main", "free_port"]',
         '__all__ = ["MlflowServer", "start_server", "serve", "free_port"]')
    swap(server, "_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>\n\n\n", "")
    swap(server, '\n\nif __name__ == "__main__":\n    sys.exit(main())\n', "\n")

# 4. One function for "the test metric of this metric", in the torch-free schema: the final stage's progress table
#    (study.stage_tuners / study.search.tuners) and the table report (dashboards.table_report) both import it.
names = Path("trainables/schema/metric_names.py")
if "def final_metric" not in names.read_text():
    swap(names, '    "split_per_category",\n]', '    "split_per_category",\n    "final_metric",\n]')
    swap(names, '''def on_fold(fold: int, name: str) -> str:''', '''def final_metric(metric: str) -> str:
    """The test metric the final stage reports for a search metric: ``val/recall_at_1`` → ``test/recall_at_1``; a
    metric without the validation prefix (selection on the test classes) is its own."""
    return TEST_PREFIX + metric.removeprefix(VAL_PREFIX) if metric.startswith(VAL_PREFIX) else metric


def on_fold(fold: int, name: str) -> str:''')
tuners = first("study/search/tuners.py", "study/stage_tuners.py")
if tuners is not None and "def final_metric" in tuners.read_text():
    carry(tuners, ["final_metric"])
    swap(tuners, "from trainables.schema.metric_names import TEST_PREFIX, VAL_PREFIX\n",
         "from trainables.schema.metric_names import final_metric\n")
    swap(tuners, ', "final_metric"]', "]")
    swap(tuners, "final_metric(spec)", "final_metric(spec.search.metric)")
report = Path("dashboards/table_report.py")
if "def _test_metric" in report.read_text():
    carry(report, ["_test_metric"])
    swap(report, "from trainables.schema.metric_names import TEST_PREFIX, VAL_PREFIX\n",
         "from trainables.schema.metric_names import final_metric\n")
    swap(report, "_test_metric(table)", "final_metric(table.base.search.metric)")

# 5. A table's two files go through StudyLayout as a study's do: its spec (``table.yaml``, named in the record now) and
#    its report (``table.md``); the report's writer takes the layout, whose root and tracking URI it used.
record = Path("trainables/schema/record.py")
if "TABLE_SPEC_FILE" not in record.read_text():
    swap(record, '    "SPEC_FILE",\n', '    "SPEC_FILE",\n    "TABLE_SPEC_FILE",\n    "TABLE_REPORT_FILE",\n')
    swap(record, "#: A table study's report", "#: A table study's spec, as it was started (a resume refuses another).\n"
                 'TABLE_SPEC_FILE: Final = "table.yaml"\n#: A table study\'s report')
layout = Path("study/layout.py")
if "def table_file" not in layout.read_text():
    swap(layout, "    spec.yaml          the validated spec the study was started with (resume refuses a different one)\n",
         "    spec.yaml          the validated spec the study was started with (resume refuses a different one)\n"
         "    table.yaml         a table study's table spec, as it was started (study.table.run)\n"
         "    table.md           a table study's report (dashboards.table_report)\n")
    swap(layout, "    @property\n    def tune_dir(self) -> str:",
         '    @property\n    def table_file(self) -> str:\n        """A table study\'s table spec, as it was started."""\n'
         "        return f\"{self.root}/{R.TABLE_SPEC_FILE}\"\n\n"
         '    @property\n    def table_report(self) -> str:\n        """A table study\'s report."""\n'
         "        return f\"{self.root}/{R.TABLE_REPORT_FILE}\"\n\n"
         "    @property\n    def tune_dir(self) -> str:")
table_run = Path("study/table/run.py")
if "def table_file" in table_run.read_text():
    carry(table_run, ["table_file"])
    swap(table_run, '"table_file", ', "")
    text = table_run.read_text()
    table_run.write_text(text.replace("table_file(layout)", "layout.table_file"))
test_spec = Path("tests/study/test_table_spec.py")
if "table_file(layout)" in test_spec.read_text():
    swap(test_spec, "_check_saved_table, _table_text, table_file\n", "_check_saved_table, _table_text\n")
    swap(test_spec, "write_bytes(table_file(layout),", "write_bytes(layout.table_file,")
report = Path("dashboards/table_report.py")
if "study_dir: str, parent_run_id: str, tracking_uri: str" in report.read_text():
    swap(report, "def write_table_report(table: Table, study_dir: str, parent_run_id: str, tracking_uri: str)",
         "def write_table_report(table: Table, layout: StudyLayout, parent_run_id: str)")
    swap(report, "    text = table_report(table, study_dir)\n    where = f\"{study_dir.rstrip('/')}/{R.TABLE_REPORT_FILE}\"\n",
         "    text = table_report(table, layout.root)\n    where = layout.table_report\n")
    swap(report, "mlflow_client(tracking_uri)", "mlflow_client(layout.tracking_uri)")
    swap(report, "from trainables.schema.metric_names import final_metric\n",
         "from trainables.schema.metric_names import final_metric\n\nif TYPE_CHECKING:\n    from study.layout import StudyLayout\n")
    swap(report, "from pathlib import Path\n", "from pathlib import Path\nfrom typing import TYPE_CHECKING\n")
    swap(Path("study/run.py"), "write_table_report(table, layout.root, outcome.parent_run_id, layout.tracking_uri)",
         "write_table_report(table, layout, outcome.parent_run_id)")

# 6. Every reference to the server's command line, dotted and in prose.
for name in ["study/cli.py", "README.md", "docs/cluster.md", "tests/study/test_mlflow_server.py",
             "study/tracking/__init__.py"]:
    path = Path(name)
    text = path.read_text()
    new = text.replace('"mlflow-server": ("study.tracking.server",', '"mlflow-server": ("study.mlflow_server",')
    new = new.replace("python -m study.tracking.server", "python -m study.mlflow_server")
    new = new.replace('"-m", "study.tracking.server"', '"-m", "study.mlflow_server"')
    new = new.replace("- :mod:`study.tracking.server`: a local ``mlflow server``.",
                      "- :mod:`study.tracking.server`: a local ``mlflow server`` (its command line: :mod:`study.mlflow_server`).")
    if new != text:
        path.write_text(new)
        print("rewrote", name)
EOF

# 7. Import blocks sorted again, and lines the longer names pushed past the limit wrapped.
git add study/mlflow_server.py
RUFF="${RUFF:-ruff}"
"$RUFF" check --select I --fix -q . || true
"$RUFF" format -q .
