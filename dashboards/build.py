"""Command line: ``python -m dashboards.build STUDY [STUDY ...] [--out DIR]`` (``dmlstudy dashboard``), a STUDY
being a spec file or a study directory as ``dashboards.compare.cli`` takes them; or, naming MLflow experiments,
``--experiment NAME [--experiment NAME2 ...] [--tracking-uri URI]``.

Reads the studies' runs from MLflow, writes ``DIR/index.html`` (self-contained: figures embedded as base64
PNG) and ``DIR/figures/*.png``, logs the folder as the ``dashboard/`` artifact of each study's parent run
and prints the page's path. Exit 2 with one line for an unknown experiment, an empty or missing store.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from dashboards.load import DashboardData, DashboardError, load, resolve_tracking_uri
from dashboards.panels import PANEL_MODULES, Panel
from dashboards.render import render_page, write_figures
from study.arguments import ArgumentParser, one_line
from study.tracking.credentials import remember
from study.tracking.doors import mlflow_client
from trainables.schema import record as R

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["build_dashboard", "build_panels", "build_after_study", "main", "ARTIFACT_PATH"]

#: Where the page goes among the parent run's artifacts.
ARTIFACT_PATH = R.DASHBOARD_DIR


def build_panels(data: DashboardData) -> list[Panel]:
    """Every panel in page order; a panel that crashes becomes a note on the page, not a lost page."""
    panels = []
    for name in PANEL_MODULES:
        module = importlib.import_module(f"dashboards.panels.{name}")
        try:
            panels.append(module.build(data))
        except Exception as e:  # noqa: BLE001 - one panel's bug must not hide the others
            traceback.print_exc()
            panels.append(
                Panel(name, name.replace("_", " ").capitalize(), "", skipped=f"panel failed: {type(e).__name__}: {e}")
            )
    return panels


def _default_out(data: DashboardData) -> Path:
    dirs = {s.study_dir for s in data.studies}
    if len(dirs) == 1 and None not in dirs and Path(str(next(iter(dirs)))).is_dir():
        return Path(str(next(iter(dirs)))) / ARTIFACT_PATH
    return Path(ARTIFACT_PATH)


def build_dashboard(
    experiments: list[str],
    tracking_uri: str | None = None,
    out_dir: str | Path | None = None,
    *,
    log_artifact: bool = True,
) -> Path:
    """Build the page for ``experiments`` and return the path of its ``index.html``.

    ``tracking_uri`` defaults to ``$MLFLOW_TRACKING_URI``, else ``runs/<first experiment>/mlflow.db``;
    ``out_dir`` to the study's ``dashboard/`` folder (one study), else ``./dashboard``. Raises
    :class:`DashboardError` before writing anything when an experiment is unknown or has no runs.
    """
    if not experiments:
        raise DashboardError("--experiment: give at least one experiment name")
    # Redacted: the page shows it and errors name it; the real URL exists only for the connections.
    uri = remember(resolve_tracking_uri(tracking_uri, experiments))
    with tempfile.TemporaryDirectory(prefix="dash") as scratch:
        data = load(uri, experiments, Path(scratch)).first_replicate()
    panels = build_panels(data)
    out = Path(out_dir) if out_dir is not None else _default_out(data)
    out.mkdir(parents=True, exist_ok=True)
    write_figures(panels, out / R.DASHBOARD_FIGURES_DIR)
    page = out / R.DASHBOARD_PAGE
    page.write_text(render_page(data, panels), encoding="utf-8")
    if log_artifact:
        client = mlflow_client(uri)
        for study in data.studies:
            if study.parent_run_id:
                client.log_artifacts(study.parent_run_id, str(out), artifact_path=ARTIFACT_PATH)
    return page.resolve()


def build_after_study(spec: StudySpec) -> Path | None:
    """Called by ``study.run`` at the end of a study: build its page, warn (never raise) if that fails."""
    from study.intake.layout import StudyLayout

    layout = StudyLayout.for_spec(spec)
    try:
        # A study on remote storage (s3://…) gets its page in a local temp folder; MLflow keeps the copy.
        out = Path(tempfile.mkdtemp(prefix=f"{spec.name}-")) if layout.remote else Path(layout.root)
        return build_dashboard([spec.name], layout.tracking_uri, out / ARTIFACT_PATH)
    except Exception as e:  # noqa: BLE001 - the study is done; a dashboard problem must not fail it
        warnings.warn(f"dashboard not built: {type(e).__name__}: {e}", stacklevel=2)
        return None


def main(argv: list[str] | None = None, prog: str = "python -m dashboards.build") -> int:
    p = ArgumentParser(prog=prog, description="Build the comparison dashboard of studies.")
    p.add_argument(
        "study",
        nargs="*",
        metavar="STUDY",
        help="spec file or study directory, as `compare` takes them (several: one shared store)",
    )
    p.add_argument("--experiment", action="append", default=[], help="MLflow experiment = study name (repeatable)")
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="with --experiment: MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else runs/<experiment>/mlflow.db)",
    )
    p.add_argument("--out", default=None, help="output folder (default: <study dir>/dashboard)")
    p.add_argument("--no-log", action="store_true", help="do not log the page as an artifact of the parent run")
    args = p.parse_args(argv)
    if bool(args.study) == bool(args.experiment):
        p.error("name the studies either as STUDY (a spec file or study directory) or with --experiment NAME")
    if args.study and args.tracking_uri:
        p.error("--tracking-uri goes with --experiment; a STUDY names its own store")
    try:
        uri, experiments = _studies(args.study) if args.study else (args.tracking_uri, args.experiment)
        page = build_dashboard(experiments, uri, args.out, log_artifact=not args.no_log)
    except DashboardError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    print(page)
    return 0


def _studies(studies: list[str]) -> tuple[str, list[str]]:
    """One tracking store and the experiments of ``studies``; one page reads one store."""
    from dashboards.compare.cli import locate

    located = [locate(s) for s in studies]
    uris = {uri for uri, _ in located}
    if len(uris) > 1:
        raise DashboardError(
            f"STUDY: {', '.join(studies)} live in {len(uris)} MLflow stores; one page reads one store "
            "(run them with one tracking.uri, or build a page per study)"
        )
    return located[0][0], [name for _, name in located]


if __name__ == "__main__":
    sys.exit(main())
