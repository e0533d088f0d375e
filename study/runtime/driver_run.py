"""What one run of the driver achieved (:class:`RunProgress`), written to the study directory as it exits
(:data:`~trainables.schema.record.RUN_PROGRESS_FILE`) and read by a batch job's script before it requeues the job.

A requeued run that restores its trials, trains part of an epoch and is stopped again before any trial reaches its
next checkpoint gains nothing; requeueing it again only repeats that. The driver counts the checkpoints its trials
reported in this run and times its start-up and its epochs, so the job script (``dmlstudy slurm``) can stop the chain
with one line saying which ``--time`` would work instead of requeueing in vain.

What a whole run has left, stage by stage (:class:`StageCounts`), is how ``--status`` tells a run that ended from one
that a ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainables.schema import record as R

__all__ = [
    "RunMeter",
    "StageCounts",
    "RunProgress",
    "RunWall",
    "append_driver_wall",
    "read_run_progress",
    "run_meter",
    "run_wall",
    "start_run_meter",
    "write_run_progress",
]

#: MLflow's parent run status of a driver that ended every stage (``study.search.driver``: FINISHED only then), and
#: of one a stop ended (KILLED: exit 3, what was saved is saved and ``--resume`` continues, or writes the result).
PARENT_FINISHED = "FINISHED"
PARENT_STOPPED = "KILLED"


@dataclass(frozen=True)
class RunProgress:
    """One driver run, from its start to its exit.

    Args:
        epochs_checkpointed: trial-epochs whose checkpoint a trial reported during this run (search and final stage).
        startup_s: seconds from the driver's start to the first epoch any trial reported (``None``: none reported).
        epoch_s: the median seconds of one trial-epoch seen in this run (``None``: none finished).
        run_s: seconds from the driver's start to its exit.
        stopped_on: the stop signal's name (``"SIGUSR1"``), or ``None`` when the run was not stopped by one.
        exit_code: the driver's exit code (0 finished, 1 failed, 2 bad input, 3 stopped for ``--resume``).
    """

    epochs_checkpointed: int
    startup_s: float | None
    epoch_s: float | None
    run_s: float
    stopped_on: str | None
    exit_code: int


def write_run_progress(study_dir: str | Path, progress: RunProgress) -> None:
    """Write ``progress`` to the study directory (a local or shared path; replaced atomically)."""
    path = Path(study_dir) / R.RUN_PROGRESS_FILE
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(dataclasses.asdict(progress), indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise


def read_run_progress(study_dir: str | Path) -> RunProgress | None:
    """The last run's progress, or ``None`` when no run wrote one (or the file cannot be read)."""
    try:
        data = json.loads((Path(study_dir) / R.RUN_PROGRESS_FILE).read_text())
        return RunProgress(**{f.name: data[f.name] for f in dataclasses.fields(RunProgress)})
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class RunWall:
    """The wall time of a whole run: every driver's, summed (a resumed study had several: a stop, a crash, a Slurm
    requeue). The report's whole-run slot use divides every driver's trial time by it.

    Args:
        seconds: the earlier drivers' walls (start to exit, from :data:`~trainables.schema.record.DRIVER_WALLS_FILE`)
            plus this driver's (its search start to its final stage's end).
        drivers: how many drivers it sums.
        complete: whether every earlier driver is known: the first one's record is there (not so for a study started
            before the record existed, or on a remote storage, where none is written: ``seconds`` is then only part of
            the run's wall). A driver killed before its last words (SIGKILL, a lost node) writes none either.
    """

    seconds: float
    drivers: int = 1
    complete: bool = True

    def label(self) -> str:
        """What the wall covers, for the lines that print it."""
        if not self.complete:
            part = "this driver's" if self.drivers == 1 else f"{self.drivers} drivers'"
            return f"{part} only: an earlier driver left no record"
        return "this driver's" if self.drivers == 1 else f"all {self.drivers} drivers'"


def append_driver_wall(study_dir: str | Path, progress: RunProgress, resumed: bool) -> None:
    """Append this driver's run (its wall seconds, whether it resumed the study) to the study's
    :data:`~trainables.schema.record.DRIVER_WALLS_FILE`; an :class:`OSError` (a full disk) is the caller's."""
    line = {"run_s": progress.run_s, "resumed": resumed, "exit_code": progress.exit_code, "ended": time.time()}
    with open(Path(study_dir) / R.DRIVER_WALLS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def run_wall(study_dir: str | Path | None, this_driver_s: float, resumed: bool) -> RunWall:
    """The whole run's :class:`RunWall`: this driver's ``this_driver_s`` and every earlier driver's recorded wall
    (``study_dir`` ``None``: a remote storage, where none is recorded). A run that did not resume has no earlier
    driver: a record left by an earlier study of the same name is not this run's."""
    if not resumed:
        return RunWall(this_driver_s)
    earlier = []
    try:
        text = "" if study_dir is None else (Path(study_dir) / R.DRIVER_WALLS_FILE).read_text(encoding="utf-8")
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            data = json.loads(line)
            earlier.append((float(data["run_s"]), bool(data["resumed"])))
        except (ValueError, KeyError, TypeError):  # a line torn by a crash
            continue
    # The run's first driver did not resume: the chain since the last such record is this run's.
    starts = [i for i, (_, was_resumed) in enumerate(earlier) if not was_resumed]
    chain = earlier[starts[-1] :] if starts else earlier
    seconds = this_driver_s + sum(run_s for run_s, _ in chain)
    return RunWall(seconds, 1 + len(chain), complete=bool(starts))


@dataclass
class RunMeter:
    """What this driver run has achieved so far, counted as it happens by a Tune callback of every stage
    (:class:`~study.runtime.stop_callback.StageLedger`) and turned into :class:`RunProgress` at the driver's exit.

    Args:
        started: the driver's start (``time.time()``).
    """

    started: float = field(default_factory=time.time)
    checkpoints: int = 0
    first_result: float | None = None
    epoch_times: list[float] = field(default_factory=list)

    def result(self, seconds: object) -> None:
        """A trial reported an epoch that took ``seconds`` (its ``time_this_iter_s``; anything else is not timed)."""
        if self.first_result is None:
            self.first_result = time.time()
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
            self.epoch_times.append(float(seconds))

    def checkpoint(self) -> None:
        """A trial reported a checkpoint: one model-epoch that a later run does not train again."""
        self.checkpoints += 1

    def progress(self, stopped_on: str | None, exit_code: int) -> RunProgress:
        """This run, from its start to now, as the driver exits with ``exit_code``."""
        now = time.time()
        return RunProgress(
            epochs_checkpointed=self.checkpoints,
            startup_s=None if self.first_result is None else round(self.first_result - self.started, 3),
            epoch_s=round(statistics.median(self.epoch_times), 3) if self.epoch_times else None,
            run_s=round(now - self.started, 3),
            stopped_on=stopped_on,
            exit_code=exit_code,
        )


_meter = RunMeter()


def start_run_meter(started: float) -> RunMeter:
    """Begin counting a driver run that started at ``started`` (``time.time()``); returns its meter."""
    global _meter
    _meter = RunMeter(started=started)
    return _meter


def run_meter() -> RunMeter:
    """The meter of this process's driver run (a fresh one counting from import when none was started)."""
    return _meter


@dataclass(frozen=True)
class StageCounts:
    """What every stage of a run has ended against what it plans, as its stores say (``--status``): the search per
    cell, then each later stage the plan runs (:func:`study.search.stages.counted_stages`; the final stage per
    ``final.group_by`` group, per cell of a table, per replicate). A later stage's plan over groups is the
    number its driver tagged on the parent run as the stage started (``None``: it has not started): a study's groups
    come from its search, so only the driver knows how many there are.

    Args:
        searched: per cell, its search trials that ended (finished, stopped early or failed).
        trials_per_cell: each cell's search budget.
        searched_ok: whether any search trial finished (none did: the driver fails at the search, no stage follows).
        later: per later stage in run order, its name (the stage tag), its runs finished and its runs planned.
    """

    searched: tuple[int, ...]
    trials_per_cell: int
    searched_ok: bool = True
    later: tuple[tuple[str, int, int | None], ...] = ()

    def left(self) -> list[str]:
        """What is left, one phrase per stage (``final: 3 of 8 runs``); empty when every stage has ended."""
        short = [n for n in self.searched if n < self.trials_per_cell]
        if short:
            ended = sum(min(n, self.trials_per_cell) for n in self.searched)
            return [f"search: {ended} of {len(self.searched) * self.trials_per_cell} trials"]
        if not self.searched_ok:
            return []
        out = []
        for stage, done, planned in self.later:
            if planned is None:
                out.append(f"{stage}: not started")
            elif done < planned:
                out.append(f"{stage}: {done} of {planned} runs")
        return out

    def resumable(self, parent: str | None) -> bool:
        """Whether ``--resume`` has something to do, after a driver whose parent run ended ``parent``: a stopped
        driver (KILLED) always (it may have stopped after its last run, before writing the result), a finished one
        never, any other (FAILED, a driver that died) while a stage has runs left."""
        if parent == PARENT_STOPPED:
            return True
        return parent != PARENT_FINISHED and bool(self.left())
