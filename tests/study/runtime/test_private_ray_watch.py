"""The study's own local Ray dying ends the driver at once (issue 60, items 11 and 12), without Ray: a real process
killed with SIGKILL stands for the raylet (:class:`~study.runtime.watchdog.PrivateRayWatch`), and Tune's failure
handling is checked to ask the watch before it acts (:func:`~study.runtime.compat.before_trial_failure`). Through a
real study whose raylet is killed, then resumed: tests/study/search/test_private_ray_death.py."""

from __future__ import annotations

import signal
import subprocess
import time
import types

import pytest

from study.runtime import compat, ray_node
from study.runtime.watchdog import PrivateRayWatch, exit_phrase


@pytest.fixture
def raylet():
    """A process that stands for the private instance's raylet."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def _wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_driver_ends_within_a_second_of_its_raylets_death_naming_it(raylet):
    ended: list[str] = []
    watch = PrivateRayWatch({"raylet": raylet}, ended.append, every_s=0.05).start()
    try:
        time.sleep(0.3)
        assert ended == []  # alive: nothing said
        raylet.send_signal(signal.SIGKILL)
        assert _wait_for(lambda: bool(ended), timeout_s=1.0), "the watch did not see the raylet die"
    finally:
        watch.stop()
    assert ended == [
        f"the study's private Ray node died (raylet pid {raylet.pid} was killed by SIGKILL (a kill -9, or the "
        "kernel's out-of-memory killer))"
    ]
    time.sleep(0.2)
    assert len(ended) == 1  # said once


def test_a_stopped_watch_says_nothing_when_ray_shuts_down(raylet):
    ended: list[str] = []
    watch = PrivateRayWatch({"raylet": raylet}, ended.append, every_s=0.05).start()
    watch.stop()  # the driver shuts its Ray down itself
    raylet.terminate()
    raylet.wait()
    time.sleep(0.2)
    watch.check()
    assert ended == []


def test_tune_asks_the_watch_before_it_acts_on_a_trial_failure(raylet):
    """Tune's failure handling calls the hook first: with the node dead, the driver ends there, before the searcher
    (Optuna FAIL, a table's replacement) or MLflow (FAILED) hears of the failure."""
    from ray.tune.execution.tune_controller import TuneController

    class Ended(Exception):
        pass

    def end(why: str) -> None:
        raise Ended(why)  # stands for the driver's exit

    watch = PrivateRayWatch({"raylet": raylet}, end, every_s=60.0).start()  # the thread waits: the hook alone acts
    controller, trial = types.SimpleNamespace(), types.SimpleNamespace()
    try:
        with pytest.raises(AttributeError):  # alive: Tune's own handling runs (on a stand-in, which it cannot use)
            TuneController._process_trial_failure(controller, trial, RuntimeError("lost"))
        raylet.send_signal(signal.SIGKILL)
        raylet.wait()
        controller = types.SimpleNamespace()
        with pytest.raises(Ended, match="raylet pid"):
            TuneController._process_trial_failure(controller, trial, RuntimeError("lost"))
        assert vars(controller) == {}  # Tune did nothing before the hook
    finally:
        watch.stop()
    with pytest.raises(AttributeError):  # removed with the watch
        TuneController._process_trial_failure(controller, trial, RuntimeError("lost"))


def test_private_node_processes_are_where_compat_reads_them(monkeypatch, raylet):
    from ray._private import ray_constants, services, worker

    info = services.ProcessInfo(
        process=raylet,
        stdout_file=None,
        stderr_file=None,
        use_valgrind=False,
        use_gdb=False,
        use_valgrind_profiler=False,
        use_perftools_profiler=False,
        use_tmux=False,
    )
    node = types.SimpleNamespace(all_processes={ray_constants.PROCESS_TYPE_RAYLET: [info]})
    monkeypatch.setattr(worker, "_global_node", node)
    assert ray_node.private_node_processes() == {"raylet": raylet}
    monkeypatch.setattr(worker, "_global_node", None)
    assert ray_node.private_node_processes() == {}


def test_exit_phrases():
    assert exit_phrase(1) == "exited with 1"
    assert exit_phrase(-signal.SIGTERM) == "was killed by SIGTERM"
    assert exit_phrase(-200) == "was killed by signal 200"


def test_a_failed_trial_goes_into_tunes_next_snapshot():
    """Ray refreshes a trial's snapshot entry where it stops a live actor only: one whose actor had died stayed RUNNING
    in the snapshot, and ``--resume`` ran it again though Optuna had it FAIL and its cell had replaced it."""
    from ray.tune.execution.tune_controller import TuneController

    compat.snapshot_failed_trials()
    marked: list[object] = []
    controller = types.SimpleNamespace(_mark_trial_to_checkpoint=marked.append)
    trial = types.SimpleNamespace(status="TERMINATED", handle_error=lambda exc: None)  # Tune then does nothing more
    TuneController._process_trial_failure(controller, trial, RuntimeError("lost"))
    assert marked == [trial]
    assert callable(TuneController._mark_trial_to_checkpoint)  # the name the wrapper calls
