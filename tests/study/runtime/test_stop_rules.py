"""The rules behind a stopped study's exit code, without a study (fast): when a stage counts as finished, which errors
after a stop are the stop's own, how long a drain may take, what a second signal does, the command a stopped driver
prints, the run's progress, the Ray-loss watch, and the Ray internals they use (``study.runtime.compat``). The
e2e side is ``tests/study/runtime/test_stop_signal.py``."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
from types import SimpleNamespace

import pytest

from study.runtime import compat, stopping
from study.runtime.driver_run import RunMeter
from study.runtime.stop_callback import RayLossWatch, StageLedger, caused_by_stop
from trainables.schema.errors import StoreOutageError


@pytest.fixture
def stopped(monkeypatch):
    """The driver's stop state, restored afterwards: ``stopped(signal)`` records a stop signal as the handler does."""
    for name, value in (("_received", None), ("_repeats", 0), ("_in_fit", False)):
        monkeypatch.setattr(stopping, name, value)
    monkeypatch.setattr(stopping, "_event", threading.Event())

    def stop(sig: int = signal.SIGUSR1) -> None:
        stopping.record(sig, None)

    return stop


def _ledger(*statuses: str) -> StageLedger:
    ledger = StageLedger(RunMeter())
    ledger.on_step_end(0, [SimpleNamespace(trial_id=str(i), status=s) for i, s in enumerate(statuses)])
    return ledger


def test_a_stage_is_finished_when_every_planned_trial_ended(stopped):
    # TERMINATED covers a trial ASHA stopped early; ERROR counts as ended. A trial the stop left RUNNING, PENDING
    # (requeued after its worker died) or PAUSED is not, and neither is a stage short of its planned trials.
    assert _ledger("TERMINATED", "TERMINATED", "ERROR").finished(3)
    assert not _ledger("TERMINATED", "TERMINATED").finished(3)
    for status in ("RUNNING", "PENDING", "PAUSED"):
        ledger = _ledger("TERMINATED", "TERMINATED", status)
        assert not ledger.finished(3) and ledger.unfinished() == 1
    assert not StageLedger(RunMeter()).finished(1)  # no step seen: nothing is known to have ended
    # A restored stage whose trials had all ended runs no step: the experiment's end says so. After a step, the
    # experiment's end (Tune's cleanup calls the trials it stops TERMINATED) changes nothing.
    restored = StageLedger(RunMeter())
    restored.on_experiment_end([SimpleNamespace(trial_id=str(i), status="TERMINATED") for i in range(3)])
    assert restored.finished(3)
    stepped = _ledger("TERMINATED", "RUNNING")
    stepped.on_experiment_end([SimpleNamespace(trial_id=str(i), status="TERMINATED") for i in range(2)])
    assert not stepped.finished(2)
    # A table replaces an errored trial: after a stop, its replacement may not have been asked yet.
    assert _ledger("TERMINATED", "ERROR").finished(2, errors_replaced=True)
    stopped()
    assert not _ledger("TERMINATED", "ERROR").finished(2, errors_replaced=True)
    assert _ledger("TERMINATED", "ERROR").finished(2)


def test_the_ledger_counts_the_runs_checkpoints_and_times_its_epochs():
    meter = RunMeter(started=0.0)
    ledger = StageLedger(meter)
    assert meter.progress(None, 1).startup_s is None and meter.progress(None, 1).epoch_s is None
    for seconds in (3.0, 1.0, 2.0, "n/a"):
        ledger.on_trial_result(0, [], None, {"time_this_iter_s": seconds})
    ledger.on_checkpoint(0, [], None, None)
    ledger.on_checkpoint(0, [], None, None)
    progress = meter.progress("SIGTERM", 3)
    assert (progress.epochs_checkpointed, progress.epoch_s, progress.stopped_on, progress.exit_code) == (
        2,
        2.0,
        "SIGTERM",
        3,
    )
    assert progress.startup_s is not None and 0 < progress.startup_s <= progress.run_s


def test_what_a_stop_causes_is_the_stops(stopped):
    from ray.exceptions import RayActorError, RaySystemError
    from ray.tune.error import TuneError

    lost = [KeyboardInterrupt(), RaySystemError("GCS gone"), RayActorError(), ConnectionResetError(), TuneError("x")]
    wrapped = TuneError("Tune failed")
    wrapped.__cause__ = RaySystemError("GCS gone")
    outage = StoreOutageError("mlflow server away")
    outage.__cause__ = ConnectionRefusedError()
    assert not any(caused_by_stop(e) for e in lost)  # without a stop signal, Ray's errors are failures
    stopped(signal.SIGTERM)
    assert all(caused_by_stop(e) for e in [*lost, wrapped])
    assert not caused_by_stop(outage)  # a store past its outage budget fails the study, stop or not
    assert not caused_by_stop(OSError(28, "No space left on device"))
    assert not caused_by_stop(ValueError("a bug"))


def test_sigterm_and_ctrl_c_drain_within_slurms_killwait(stopped):
    stopped(signal.SIGUSR1)
    assert stopping.drain_bound(60.0) == 60.0  # the time limit's lead is the job's to choose
    for sig in (signal.SIGTERM, signal.SIGINT):
        stopping._received = sig
        assert stopping.drain_bound(60.0) == stopping.URGENT_DRAIN_S < 30
        assert stopping.drain_bound(2.0) == 2.0


def test_a_second_signal_hurries_and_a_second_ctrl_c_outside_fit_interrupts(stopped, capsys):
    stopped(signal.SIGINT)
    assert stopping.stopping() and stopping.received() == "SIGINT" and not stopping.hurried()
    assert stopping.wait_for_stop(0)
    with stopping.fit_window():
        stopping.record(signal.SIGINT, None)  # inside Tune's loop: the drain ends at the next step
    assert stopping.hurried()
    stopping.record(signal.SIGTERM, None)  # only Ctrl-C raises
    with pytest.raises(KeyboardInterrupt):
        stopping.record(signal.SIGINT, None)
    out = capsys.readouterr().out
    assert out.count("SIGINT received: stopping the study") == 1 and out.count("received again") == 1
    assert stopping.received() == "SIGINT"  # the first signal names the stop


def test_a_second_signal_of_another_kind_is_named_as_it_came(stopped, capsys):
    """Slurm's TERM to every process of a job, then the job script's forwarded signal: the line names both as they
    came (before: "SIGUSR1 received again" after a SIGTERM)."""
    stopped(signal.SIGTERM)
    stopping.record(signal.SIGUSR1, None)
    out = capsys.readouterr().out
    assert "SIGUSR1 received after SIGTERM: stopping without waiting for the running trials" in out, out
    assert "received again" not in out and stopping.received() == "SIGTERM"


def test_the_continue_command_carries_every_option_quoted_and_no_password():
    from study.commands.invocation import Invocation, parser

    argv = [
        "my spec.yaml",
        "--set",
        "storage=/data/run's dir",
        "--set",
        "tracking.uri=postgresql://me:hunter2@db/mlflow",
        "--address",
        "10.0.0.1:6379",
        "--drain-timeout",
        "20",
        "--no-dashboard",
        "--resume",
    ]
    run = Invocation("dmlstudy run", parser().parse_args(argv))
    resume = run.command(resume=True)
    assert "hunter2" not in resume and resume.startswith("dmlstudy run 'my spec.yaml' --set ")
    words = shlex.split(resume)
    assert words[3:7] == ["--set", "storage=/data/run's dir", "--set", "tracking.uri=postgresql://me:***@db/mlflow"]
    assert words[7:] == ["--address", "10.0.0.1:6379", "--drain-timeout", "20", "--no-dashboard", "--resume"]
    assert shlex.split(run.command(resume=False))[-1] == "--no-dashboard"
    assert run.continue_line().endswith(f"nothing was started: run the same command again: {run.command(False)}")


def test_the_ray_loss_watch_ends_the_driver_only_after_a_stop_and_until_disarmed(stopped, monkeypatch):
    ended: list[int] = []
    done = threading.Event()

    def exit_now(code: int) -> None:
        ended.append(code)
        done.set()

    monkeypatch.setattr(stopping, "exit_now", exit_now)
    gcs = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{gcs.getsockname()[1]}"
    closed: list[str] = []
    watch = RayLossWatch(address, every_s=0.05).start()
    watch.closing = lambda: closed.append("KILLED")
    gcs.close()  # the GCS goes away, but no stop signal came: not the watch's business
    assert not done.wait(0.5)
    stopped(signal.SIGTERM)
    assert done.wait(10) and ended == [stopping.EXIT_STOPPED] and closed == ["KILLED"]

    disarmed = RayLossWatch(address, every_s=0.05).start()
    disarmed.disarm()  # the driver shuts its Ray down itself
    ended.clear()
    done.clear()
    assert not done.wait(0.5) and ended == []


def test_a_local_instances_processes_start_in_sessions_of_their_own():
    """``own_session_local_instance`` replaces ``ray._private.services.ConsolePopen`` (what Ray 2.60's
    ``start_ray_process`` starts every process with) inside the block only; those processes get a session of their
    own, so a signal to the driver's process group misses them."""
    from ray._private import services

    from study.runtime.ray_node import own_session_local_instance

    before = services.ConsolePopen
    with own_session_local_instance():
        proc = services.ConsolePopen(["sleep", "5"])
        try:
            assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
        finally:
            proc.kill()
            proc.wait()
    assert services.ConsolePopen is before and issubclass(before, subprocess.Popen)


def test_a_trial_is_given_one_more_retry_and_it_is_taken_back():
    """``spare_failure`` and ``trial_failures`` read and write ``Trial.max_failures`` and
    ``Trial.run_metadata.num_failures``, which ``Trial.should_recover`` compares."""
    from ray.tune.experiment import Trial

    trial = Trial("__fake", stub=True, max_failures=0)
    trial.run_metadata.num_failures = compat.trial_failures(trial) + 1  # as handle_error counts a failure
    assert not trial.should_recover()
    assert compat.spare_failure(trial, 1) and trial.should_recover()
    assert compat.spare_failure(trial, -1) and not trial.should_recover()
    assert not compat.spare_failure(Trial("__fake", stub=True, max_failures=-1), 1)  # retries forever already


def test_tune_asks_its_searcher_without_waiting_once_a_stop_came(stopped):
    """``tune_asks_without_waiting_while`` wraps ``TuneController._update_trial_queue(blocking, timeout)``, which with
    ``blocking`` asks ``_search_alg.next_trial()`` once a second until ``is_finished()`` or the timeout."""
    from ray.tune.execution.tune_controller import TuneController

    asked: list[int] = []
    searcher = SimpleNamespace(next_trial=lambda: asked.append(1))
    controller = SimpleNamespace(_search_alg=searcher, is_finished=lambda: False)
    compat.tune_asks_without_waiting_while(stopping.stopping)
    assert TuneController._update_trial_queue(controller, blocking=True, timeout=1.5) is False  # type: ignore[arg-type]
    assert len(asked) >= 2  # no stop: Tune waits, asking again
    asked.clear()
    stopped()
    assert TuneController._update_trial_queue(controller, blocking=True, timeout=60) is False  # type: ignore[arg-type]
    assert asked == [1]


def test_tunes_signal_handler_says_when_it_has_fired():
    """``tune_interrupted`` reads the ``experiment_interrupted_event`` Tune's ``SIGUSR1`` handler closes over."""
    from ray.tune.tune import _setup_signal_catching

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGINT)}
    try:
        event = _setup_signal_catching()
        handler = signal.getsignal(signal.SIGUSR1)
        assert not compat.tune_interrupted(handler) and not compat.tune_interrupted(signal.SIG_DFL)
        handler(signal.SIGUSR1, None)
        assert event.is_set() and compat.tune_interrupted(handler)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
