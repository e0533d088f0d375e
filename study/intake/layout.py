"""Where a study's files live (``storage/<name>/``), derived from its spec alone: no Ray, no MLflow imports, so
``study.status`` and the dashboards can find a study cheaply.

Layout::

    spec.yaml          the validated spec the study was started with (resume refuses a different one)
    table.yaml         a table study's table spec, as it was started (study.search.driver)
    table.md           a table study's report (dashboards.table_report)
    optuna.db          Optuna RDB storage (study name = spec name), unless ``tracking.optuna_uri`` names one
    mlflow.db          MLflow sqlite store, unless ``tracking.uri`` names a server
    mlflow-artifacts/  its artifact root (also with a database ``tracking.uri``; a server keeps its own)
    tune/              Ray Tune's search experiment: state, trial directories, checkpoints
    tune_final/        Ray Tune's final-stage experiment
    scheduler_state.json  the search scheduler's rungs, versioned JSON (Ray does not restore a scheduler; we do);
                       older studies kept them in asha_state.pkl, read once and replaced
    study.log          the libraries' log lines (Ray, MLflow, Optuna), kept off the terminal (study.console)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from study.runtime.storage import make_dirs
from study.tracking.credentials import remember
from trainables.schema import record as R
from trainables.schema.errors import SpecError

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["StudyLayout", "default_tracking_uri"]


def default_tracking_uri(study_dir: str) -> str:
    return R.sqlite_uri(f"{study_dir}/{R.MLFLOW_DB}")


@dataclass(frozen=True)
class StudyLayout:
    """Where a study's files live: ``root`` is a local directory or a pyarrow filesystem URI.

    ``tracking_uri`` and ``optuna_url`` are redacted (:func:`study.tracking.credentials.redact`): safe to print or store.
    """

    root: str
    tracking_uri: str
    artifact_location: str | None
    optuna_url: str

    @classmethod
    def for_spec(cls, spec: StudySpec) -> StudyLayout:
        if "://" in spec.storage:
            missing = [k for k in ("uri", "optuna_uri") if getattr(spec.tracking, k) is None]
            if missing:
                raise SpecError(
                    f"storage: {spec.storage!r} is a URI, so tracking.{missing[0]} must name a server "
                    "(sqlite stores need a local or shared directory)"
                )
            root = f"{spec.storage.rstrip('/')}/{spec.name}"
        else:
            root = str((Path(spec.storage).expanduser() / spec.name).resolve())
        # URLs are kept redacted (no password); connections go through study.tracking.credentials.connection_url.
        optuna_url = (
            remember(spec.tracking.optuna_uri) if spec.tracking.optuna_uri else R.sqlite_uri(f"{root}/{R.OPTUNA_DB}")
        )
        tracking_uri = remember(spec.tracking.uri) if spec.tracking.uri else default_tracking_uri(root)
        # A tracking server keeps artifacts in its own artifact root; any other store (sqlite, a database URL) would
        # put them under the *current directory*'s ./mlruns, so they go with the study instead.
        served = tracking_uri.startswith(("http://", "https://", "databricks"))
        artifacts = (
            f"{root}/{R.MLFLOW_ARTIFACTS_DIR}" if "://" in root else (Path(root) / R.MLFLOW_ARTIFACTS_DIR).as_uri()
        )
        artifact_location = None if served else artifacts
        return cls(root=root, tracking_uri=tracking_uri, artifact_location=artifact_location, optuna_url=optuna_url)

    @property
    def remote(self) -> bool:
        return "://" in self.root

    @property
    def spec_file(self) -> str:
        return f"{self.root}/{R.SPEC_FILE}"

    @property
    def table_file(self) -> str:
        """A table study's table spec, as it was started."""
        return f"{self.root}/{R.TABLE_SPEC_FILE}"

    @property
    def table_report(self) -> str:
        """A table study's report."""
        return f"{self.root}/{R.TABLE_REPORT_FILE}"

    @property
    def tune_dir(self) -> str:
        return f"{self.root}/{R.SEARCH_EXPERIMENT}"

    @property
    def log_file(self) -> str:
        return f"{self.root}/{R.STUDY_LOG_FILE}"

    @property
    def scheduler_state(self) -> str:
        return f"{self.root}/{R.SCHEDULER_STATE_FILE}"

    def mkdir(self) -> None:
        make_dirs(self.root)
