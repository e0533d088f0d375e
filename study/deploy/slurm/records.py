"""A run's records in the study directory: the driver's :class:`~study.runtime.driver_run.RunProgress` of this run
(:func:`this_runs_progress`: one an earlier run left is not this one's), and each run's line appended to the study's
:data:`~trainables.schema.record.SLURM_RUNS_FILE` (:func:`append_record`), so that a later run that measured no epoch
still knows how long one takes (:func:`earlier_runs`)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path

from study.deploy.slurm.ending import Ending, RunEnd, say
from study.runtime.driver_run import RunProgress, read_run_progress
from trainables.schema import record as R

__all__ = ["this_runs_progress", "earlier_runs", "append_record"]

#: A progress record written this long before the run's start still counts as this run's (clocks of a node and a
#: shared file system's server differ a little; a requeued run starts ≥ 10 s after the last one ended).
CLOCK_SLACK_S = 5


def this_runs_progress(study_dir: Path, rc: int, started: float) -> tuple[RunProgress | None, str]:
    """The driver's record of this run, or ``None`` and why (none written, or one of an earlier run)."""
    path = study_dir / R.RUN_PROGRESS_FILE
    progress = read_run_progress(study_dir)
    if progress is None:
        return None, f"the driver left no readable {path}"
    try:
        written = path.stat().st_mtime
    except OSError:
        return None, f"the driver left no readable {path}"
    if written < started - CLOCK_SLACK_S:
        when = datetime.fromtimestamp(written).strftime("%Y-%m-%d %H:%M:%S")
        return None, f"{path} is an earlier run's (written {when}, before this run began)"
    if progress.exit_code != rc:
        return None, f"{path} says exit {progress.exit_code}, not this run's {rc}"
    return progress, ""


def earlier_runs(study_dir: Path) -> tuple[RunProgress, ...]:
    out = []
    try:
        lines = (study_dir / R.SLURM_RUNS_FILE).read_text().splitlines()
    except OSError:
        return ()
    names = {f.name for f in dataclasses.fields(RunProgress)}
    for line in lines:
        try:
            data = json.loads(line)
            out.append(RunProgress(**{k: data[k] for k in names}))
        except (ValueError, KeyError, TypeError):
            continue
    return tuple(out)


def append_record(study_dir: Path, job_id: str, end: RunEnd, ending: Ending) -> None:
    """Append this run's record (its progress, how it ended) to the study's runs file."""
    record: dict[str, object] = {
        "job": job_id,
        "run": end.restarts + 1,
        "ended": datetime.now().isoformat(timespec="seconds"),
        "elapsed_s": round(end.elapsed_s),
        "ending": ending.action,
        "exit": ending.exit_code,
    }
    if end.progress is not None:
        record.update(dataclasses.asdict(end.progress))
    try:
        with open(study_dir / R.SLURM_RUNS_FILE, "a") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        say(f"(could not append to {study_dir / R.SLURM_RUNS_FILE}: {e.strerror})")
