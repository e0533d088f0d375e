"""Read-only views of a study's MLflow store, for ``--status``: no Ray, no torch, nothing created.

:mod:`study.tracking.callback` holds the Ray Tune callback, so importing it imports Ray (seconds on a busy machine); a
status query needs only MLflow's client. :class:`~study.tracking.callback.TrackingStore`'s ``peek_*`` methods are these.
"""

from __future__ import annotations

from pathlib import Path

from study.tracking.doors import mlflow_client
from trainables.schema import record as R

__all__ = ["missing_sqlite", "runs_of", "parent_status", "parent_tags", "failures"]


def missing_sqlite(uri: str) -> bool:
    """A sqlite store that does not exist yet (reading it must not create it)."""
    return uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///").split("?")[0]).exists()


def runs_of(uri: str, experiment_name: str, filter_string: str, **kwargs: object) -> list | None:
    """Runs of the study's experiment matching ``filter_string``; ``None`` when the store or experiment is absent."""
    if missing_sqlite(uri):
        return None
    c = mlflow_client(uri)
    experiment = c.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    return list(c.search_runs([experiment.experiment_id], filter_string=filter_string, **kwargs))  # type: ignore[arg-type]


def _parent(uri: str, experiment_name: str) -> object | None:
    runs = runs_of(
        uri, experiment_name, f"tags.`{R.ROLE_TAG}` = '{R.ROLE_STUDY}'", order_by=["start_time DESC"], max_results=1
    )
    return runs[0] if runs else None


def parent_status(uri: str, experiment_name: str) -> str | None:
    """The status of a study's parent run (``None``: no such run)."""
    run = _parent(uri, experiment_name)
    return None if run is None else run.info.status  # type: ignore[attr-defined]


def parent_tags(uri: str, experiment_name: str) -> dict[str, str]:
    """The tags of a study's parent run (empty: no such run)."""
    run = _parent(uri, experiment_name)
    return {} if run is None else dict(run.data.tags)  # type: ignore[attr-defined]


def failures(uri: str, experiment_name: str) -> list[tuple[str, str, str]]:
    """``(trial_id, stage, reason)`` of every FAILED trial run of a study."""
    runs = runs_of(
        uri,
        experiment_name,
        f"tags.`{R.ROLE_TAG}` = '{R.ROLE_TRIAL}' and attributes.status = 'FAILED'",
        order_by=["start_time ASC"],
    )
    tags = [r.data.tags for r in runs or []]
    return [(t.get(R.TRIAL_ID, "?"), t.get(R.STAGE, R.STAGE_SEARCH), t.get(R.FAILURE_REASON, "unknown")) for t in tags]
