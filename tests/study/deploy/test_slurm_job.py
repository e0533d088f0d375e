"""The decisions a ``dmlstudy slurm`` job makes while it runs (the running side of :mod:`study.deploy.slurm`, called
as ``python -m study.deploy.job``), without a Slurm: how each node's Ray is started (no fixed port), how the head's
address is found and recognised as this job's, and what the script does after the driver exits (requeue, or one line
saying why not). A fake ``scontrol`` on ``PATH`` stands in for Slurm where the command line is run whole, at the
address the job script calls. The real jobs run in test_slurm_faults.py and test_slurm.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.driver import REPO
from harness.netns import NetNamespace, netns_unavailable_reason
from harness.ray_nodes import kill_node
from study.deploy.slurm import ending as E
from study.deploy.slurm.ending import Ending, RunEnd, decide, finish, with_time
from study.deploy.slurm.nodes import (
    RAY_ADDRESS_FILE,
    HeadWait,
    RayNode,
    head_first,
    ray_start_argv,
    read_head_address,
    wait_head,
)
from study.deploy.slurm.scontrol import SlurmView, parse_job_fields, slurm_seconds
from study.runtime.driver_run import RunProgress, write_run_progress
from trainables.schema import record as R

CONTINUE = "dmlstudy slurm /home/me/spec.yaml --nodes 2 --time 5 --signal-lead 60"


def _progress(epochs: int = 4, startup: float | None = 40.0, epoch: float | None = 30.0, rc: int = 3) -> RunProgress:
    return RunProgress(epochs, startup, epoch, run_s=200.0, stopped_on="SIGUSR1", exit_code=rc)


def _end(**over: object) -> RunEnd:
    base: dict[str, object] = {
        "rc": 3,
        "restarts": 0,
        "max_requeues": 2,
        "elapsed_s": 230.0,
        "signal_lead_s": 60,
        "continue_command": CONTINUE,
        "study_log": "/runs/s/study.log",
        "progress": _progress(),
        "slurm": SlurmView("RUNNING", 0, 230, 300),
    }
    base.update(over)
    return RunEnd(**base)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------- nodes


def test_the_head_is_the_node_running_the_script():
    assert head_first(["n1", "n2", "n3"], "n2") == ["n2", "n1", "n3"]
    assert head_first(["n1", "n2"], None) == ["n1", "n2"]
    assert head_first(["n1", "n2"], "elsewhere") == ["n1", "n2"]


def test_no_node_listens_on_a_fixed_port():
    """Ray's fixed defaults (GCS 6379, dashboard 8265, agent 52365, workers 10002-19999, client 10001) are each
    replaced by 0, the kernel's pick; nothing depends on the job id."""
    head = ray_start_argv("ray", RayNode("10.0.0.1", 4, 1, "/t/dmlray-7"), address=None, ray_client=True)
    worker = ray_start_argv("ray", RayNode("10.0.0.2", 4, 1, "/t/dmlray-7"), address="h:1", ray_client=True)
    for argv in (head, worker):
        assert argv[:3] == ["ray", "start", "--block"] and "--temp-dir=/t/dmlray-7" in argv
        ports = [a for a in argv if "port" in a]
        assert ports and all(a.endswith("=0") for a in ports), ports
        assert "--dashboard-agent-listen-port=0" in argv and "--min-worker-port=0" in argv
    assert {"--head", "--port=0", "--dashboard-port=0", "--ray-client-server-port=0"} <= set(head)
    assert "--include-dashboard=false" in head and "--head" not in worker and "--address=h:1" in worker
    no_client = ray_start_argv("ray", RayNode("i", 1, 0, "/t"), address=None, ray_client=False)
    assert not any("client" in a for a in no_client)  # Ray refuses the option without its client installed


def test_the_head_address_is_this_runs(tmp_path):
    assert read_head_address(tmp_path, since=0) is None
    (tmp_path / RAY_ADDRESS_FILE).write_text("10.0.0.1:41234\n")
    assert read_head_address(tmp_path, since=time.time() - 5) == "10.0.0.1:41234"
    assert read_head_address(tmp_path, since=time.time() + 30) is None  # an earlier run's file


def test_wait_head_returns_only_an_address_the_check_accepts(tmp_path):
    (tmp_path / RAY_ADDRESS_FILE).write_text("10.0.0.1:41234")
    seen: list[str] = []

    def check(address: str, tmpdir: object) -> tuple[bool, str]:
        seen.append(address)
        return len(seen) >= 3, "the Ray head at 10.0.0.1:41234 refuses this job's token: it is another job's"

    assert wait_head(HeadWait(tmp_path, 0, 10), alive=lambda: True, check=check, poll_s=0.01) == (
        "10.0.0.1:41234",
        "",
    )
    address, why = wait_head(
        HeadWait(tmp_path, 0, 0.05), alive=lambda: True, check=lambda *_: (False, "no"), poll_s=0.01
    )
    assert address is None and "not up within" in why and "(no)" in why
    address, why = wait_head(HeadWait(tmp_path, time.time() + 60, 10), alive=lambda: False, poll_s=0.01)
    assert address is None and "srun step ended" in why and "wrote no address" in why


# ------------------------------------------------------------------------------------------------- what Slurm says


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:02:00", 120), ("1-00:00:05", 86405), ("02:30", 150), ("5", 300), ("00:00:00", 0), ("2-03:04", 183840)],
)
def test_slurm_durations(text, seconds):
    assert slurm_seconds(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "", "1:2:3:4", "x-01:00"])
def test_no_duration(text):
    assert slurm_seconds(text) is None


def test_scontrol_fields():
    line = "JobId=7 JobName=dml-s JobState=COMPLETING Reason=None Restarts=2 RunTime=00:01:10 TimeLimit=00:02:00"
    assert parse_job_fields(line) == SlurmView("COMPLETING", 2, 70, 120)
    assert parse_job_fields("slurm_load_jobs error: Invalid job id specified") is None


# ---------------------------------------------------------------------------------------------- after the driver


def test_with_time_sets_the_limit():
    assert with_time(CONTINUE, 9).endswith("--signal-lead 60 --time 9") and "--time 5" not in with_time(CONTINUE, 9)
    assert with_time("dmlstudy slurm s.yaml --time=5", 7) == "dmlstudy slurm s.yaml --time 7"
    assert with_time("dmlstudy slurm 'my spec.yaml'", 3) == "dmlstudy slurm 'my spec.yaml' --time 3"


def test_finished_and_failed():
    assert decide(_end(rc=0)) == Ending("finished", "study finished", 0)
    failed = decide(_end(rc=1))
    assert failed.action == "failed" and failed.exit_code == 1 and "see /runs/s/study.log" in failed.line
    assert decide(_end(rc=137)).exit_code == 137


def test_a_run_that_checkpointed_is_requeued_and_says_what_it_did():
    ending = decide(_end())
    assert ending.action == "requeue" and ending.exit_code == 0
    assert (
        ending.line
        == "requeueing (requeue 1 of at most 2) on SIGUSR1; this run checkpointed 4 epochs (epoch 30 s, start-up 40 s)"
    )


def test_requeues_used_up():
    ending = decide(_end(restarts=2))
    assert ending.action == "stop" and ending.exit_code == 3
    assert ending.line.startswith(
        "stopped on SIGUSR1 after 2 requeues (--max-requeues); this run checkpointed 4 epochs"
    )
    assert ending.line.endswith(f"continue the study with: {CONTINUE}")


def test_a_run_that_checkpointed_nothing_is_not_requeued_and_says_which_time_works():
    """The epoch measured in an earlier run of the chain gives the --time: Ray's start (the run less the driver),
    the driver's start-up to its first epoch, the signal lead, Slurm's signal slack and a margin."""
    earlier = (_progress(epochs=2, startup=50.0, epoch=45.0),)
    nothing = RunProgress(0, None, None, run_s=100.0, stopped_on="SIGUSR1", exit_code=3)
    ending = decide(_end(progress=nothing, elapsed_s=120.0, earlier=earlier))
    assert ending.action == "stop" and ending.exit_code == 3
    line = ending.line
    assert line.startswith("not requeued: this run checkpointed no epoch in its 120 s (the driver ran 100 s, stopped")
    assert "A trial-epoch takes 45 s" in line and "start-up to the first epoch 50 s" in line and "earlier run" in line
    # 20 s of Ray + 50 s to the first checkpoint + 60 s lead + 30 s slack + 60 s margin = 220 s: 4 minutes.
    assert "--time 4 (now 5)" in line and line.endswith(f"continue the study with: {with_time(CONTINUE, 4)}")


def test_a_run_in_which_no_epoch_ever_finished_gets_double_the_time():
    nothing = RunProgress(0, None, None, run_s=100.0, stopped_on="SIGUSR1", exit_code=3)
    line = decide(_end(progress=nothing)).line
    assert "No epoch finished within it" in line and "--time 10 (now 5)" in line
    assert line.endswith(with_time(CONTINUE, 10))


def test_a_signal_before_the_driver_started_is_no_progress():
    ending = decide(_end(driver_started=False, progress=None, progress_note="the driver did not run", signal="SIGUSR1"))
    assert ending.action == "stop" and "SIGUSR1 came before the driver started" in ending.line


def test_sigterm_is_requeued_whatever_the_run_checkpointed():
    """A preemption (``scancel --signal=TERM``) is external: the next run gets its whole time, so no zero-progress
    rule (the time limit's); Slurm's TERM reaching the driver first (progress ``stopped_on``) or only the job script
    (``signal``: the driver never started, its record missing, or the TERM killed it while it imported: exit 143)."""
    nothing = RunProgress(0, None, None, run_s=85.0, stopped_on="SIGTERM", exit_code=3)
    line = (
        "requeueing (requeue 1 of at most 2) on SIGTERM (a preemption or scancel: the next run gets its whole time, "
        "whatever this one checkpointed)"
    )
    assert decide(_end(progress=nothing, elapsed_s=97.0)) == Ending(
        "requeue", f"{line}; this run checkpointed 0 epochs", 0
    )
    no_driver = _end(driver_started=False, progress=None, progress_note="the driver did not run", signal="SIGTERM")
    assert decide(no_driver) == Ending("requeue", f"{line}; the driver had not started", 0)
    note = f"the driver left no readable /runs/s/{R.RUN_PROGRESS_FILE}"
    for over in ({"rc": 3}, {"rc": 143}):
        assert decide(_end(progress=None, progress_note=note, signal="SIGTERM", **over)).line == line
    assert decide(_end(rc=143, progress=None, signal="SIGUSR1")).action == "failed"  # not the stop's TERM
    used_up = decide(_end(progress=nothing, restarts=2, signal="SIGTERM"))
    assert used_up.action == "stop" and used_up.exit_code == 3
    assert used_up.line == (
        "stopped on SIGTERM after 2 requeues (--max-requeues); this run checkpointed 0 epochs; "
        f"continue the study with: {CONTINUE}"
    )
    # The time limit keeps its rule: SIGUSR1 and nothing checkpointed is not requeued, whatever the script saw later.
    usr1 = RunProgress(0, None, None, run_s=85.0, stopped_on="SIGUSR1", exit_code=3)
    assert decide(_end(progress=usr1, signal="SIGTERM")).line.startswith("not requeued: this run checkpointed no epoch")


def test_a_missing_progress_record_is_not_requeued():
    note = f"the driver left no readable /runs/s/{R.RUN_PROGRESS_FILE}"
    ending = decide(_end(progress=None, progress_note=note, signal="SIGUSR1"))
    assert ending.action == "stop" and ending.exit_code == 3
    assert ending.line.startswith(f"not requeued: {note}, so whether this run made progress on SIGUSR1 is unknown")


def test_preemption_slurm_requeues_itself():
    """PreemptMode=REQUEUE: inside the script Slurm already counts the restart (Restarts one above the run's
    SLURM_RESTART_COUNT, JobState COMPLETING); `scontrol requeue` would fail ("Job is pending execution")."""
    term = RunProgress(4, 40.0, 30.0, run_s=50.0, stopped_on="SIGTERM", exit_code=3)
    ending = decide(_end(slurm=SlurmView("COMPLETING", 1, 50, 300), progress=term))
    assert ending == Ending(
        "slurm-requeues",
        "Slurm requeues the job itself (preempted on SIGTERM): its next run resumes; this run checkpointed 4 epochs",
        0,
    )
    # ...even after a run that made no progress: Slurm decides, not the script.
    assert decide(_end(slurm=SlurmView("COMPLETING", 1, 50, 300), progress=None)).action == "slurm-requeues"


def test_a_cancelled_job_is_not_requeued():
    """`scancel JOB` (no --signal): JobState COMPLETING before the limit; `scontrol requeue` would succeed and undo
    the cancel (seen on Slurm 22.05)."""
    ending = decide(_end(slurm=SlurmView("COMPLETING", 0, 50, 300)))
    assert ending.action == "stop" and ending.exit_code == 3 and "the job was cancelled on SIGUSR1" in ending.line
    assert ending.line.endswith(CONTINUE)
    # Past the time limit (the stop ran over it, Slurm's TERM came): the chain goes on.
    assert decide(_end(slurm=SlurmView("COMPLETING", 0, 300, 300))).action == "requeue"


def test_a_failed_requeue_says_so_and_fails():
    lines: list[str] = []
    ending = _finish(_end(), rc=1, message="Requested operation is presently disabled for job 7", lines=lines)
    assert ending.action == "stop" and ending.exit_code == 3
    assert lines[0].startswith("requeueing (requeue 1 of at most 2) on SIGUSR1")
    assert lines[1] == (
        "scontrol requeue 7 failed (Requested operation is presently disabled for job 7): the job is not requeued and "
        f"ends FAILED; continue the study with: {CONTINUE}"
    )


def test_a_requeue_refused_because_slurm_requeues_it_is_preemption():
    lines: list[str] = []
    ending = _finish(
        _end(), rc=1, message="Job is pending execution for job 7", lines=lines, after=SlurmView("PENDING", 1, 0, 300)
    )
    assert ending.action == "slurm-requeues" and ending.exit_code == 0 and "preempted" in lines[1]


def _finish(end: RunEnd, rc: int, message: str, lines: list[str], after: SlurmView | None = None) -> Ending:
    original = E.say
    E.say = lambda line, err=False: lines.append(line)  # type: ignore[assignment]
    try:
        return finish(end, "7", lambda: (rc, message), lambda: after or end.slurm)
    finally:
        E.say = original  # type: ignore[assignment]


# ------------------------------------------------------------------------------------- the command line, whole


_FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  show) [ "$2" = hostnames ] && { printf 'n1\\nn2\\nn3\\n'; exit 0; }; cat "$FAKE_DIR/job" ;;
  requeue) cat "$FAKE_DIR/requeue_out" >&2; exit "$(cat "$FAKE_DIR/requeue_rc")" ;;
esac
"""


@pytest.fixture
def fake_slurm(tmp_path):
    """A fake ``scontrol`` on ``PATH`` (what it answers: files in ``tmp_path``) and the job's environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(_FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    (tmp_path / "job").write_text("JobId=7 JobState=RUNNING Restarts=1 RunTime=00:03:20 TimeLimit=00:05:00\n")
    (tmp_path / "requeue_rc").write_text("0")
    (tmp_path / "requeue_out").write_text("")
    study = tmp_path / "runs" / "s"
    study.mkdir(parents=True)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "SLURM_JOB_ID": "7",
        "SLURM_RESTART_COUNT": "1",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURMD_NODENAME": "n2",
    }
    return tmp_path, study, env


def _job(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "study.deploy.job", *args], env=env, capture_output=True, text=True)


def _end_args(study: Path, rc: int = 3, elapsed: int = 200) -> list[str]:
    return ["end", "--rc", str(rc), "--driver-pid", "123", "--elapsed", str(elapsed), "--study-dir", str(study),
            "--max-requeues", "5", "--signal-lead", "60", "--continue", CONTINUE]  # fmt: skip


def test_the_nodes_command_puts_the_script_node_first(fake_slurm):
    _, _, env = fake_slurm
    assert _job(env, "nodes").stdout.split() == ["n2", "n1", "n3"]


def test_end_requeues_and_records_the_run(fake_slurm):
    root, study, env = fake_slurm
    write_run_progress(study, _progress(epochs=6))
    done = _job(env, *_end_args(study))
    assert done.returncode == 0, done.stderr
    assert "requeueing (requeue 2 of at most 5) on SIGUSR1; this run checkpointed 6 epochs" in done.stdout
    assert "requeue 7" in (root / "calls").read_text()
    record = json.loads((study / R.SLURM_RUNS_FILE).read_text())
    assert record["job"] == "7" and record["run"] == 2 and record["ending"] == "requeue"
    assert record["epochs_checkpointed"] == 6 and record["epoch_s"] == 30.0


def test_end_says_a_failed_requeue_and_exits_3(fake_slurm):
    root, study, env = fake_slurm
    write_run_progress(study, _progress())
    (root / "requeue_rc").write_text("1")
    (root / "requeue_out").write_text("Requested operation is presently disabled for job 7\n")
    done = _job(env, *_end_args(study))
    assert done.returncode == 3, done.stderr
    assert "scontrol requeue 7 failed (Requested operation is presently disabled for job 7)" in done.stdout
    assert done.stdout.rstrip().endswith(f"continue the study with: {CONTINUE}")


def test_end_refuses_an_earlier_runs_record(fake_slurm):
    """The record must be this run's: written after the run began, with the driver's exit code."""
    root, study, env = fake_slurm
    write_run_progress(study, _progress())
    old = time.time() - 600
    os.utime(study / R.RUN_PROGRESS_FILE, (old, old))
    done = _job(env, *_end_args(study, elapsed=200))
    assert (
        done.returncode == 3
        and "is an earlier run's" in done.stdout
        and "requeue 7" not in (root / "calls").read_text()
    )
    write_run_progress(study, _progress(rc=1))
    done = _job(env, *_end_args(study))
    assert done.returncode == 3 and "says exit 1, not this run's 3" in done.stdout


def test_end_uses_an_earlier_runs_epoch_time(fake_slurm):
    """The chain's runs file keeps each run's times: a run that checkpointed nothing is told the epoch measured
    before (a requeued run restores, trains part of an epoch, and is stopped again)."""
    _, study, env = fake_slurm
    write_run_progress(study, _progress(epochs=3, startup=30.0, epoch=100.0))
    assert _job(env, *_end_args(study)).returncode == 0
    write_run_progress(study, RunProgress(0, None, None, run_s=150.0, stopped_on="SIGUSR1", exit_code=3))
    done = _job(env, *_end_args(study))
    assert done.returncode == 3 and "not requeued: this run checkpointed no epoch" in done.stdout
    assert "A trial-epoch takes 100 s" in done.stdout and "--time 4 (now 5)" in done.stdout
    assert len((study / R.SLURM_RUNS_FILE).read_text().splitlines()) == 2


def test_end_requeues_a_sigterm_the_script_trapped_before_the_driver_started(fake_slurm):
    root, study, env = fake_slurm
    args = _end_args(study)
    args[args.index("--driver-pid") + 1] = ""
    done = _job(env, *args, "--signal", "SIGTERM")
    assert done.returncode == 0, done.stderr
    assert (
        "requeueing (requeue 2 of at most 5) on SIGTERM" in done.stdout and "the driver had not started" in done.stdout
    )
    assert "requeue 7" in (root / "calls").read_text()


def test_end_after_a_finished_study(fake_slurm):
    _, study, env = fake_slurm
    done = _job(env, *_end_args(study, rc=0))
    assert done.returncode == 0 and "study finished" in done.stdout and not (study / R.SLURM_RUNS_FILE).exists()


# ----------------------------------------------------------------------------------------- a real head, its token


@pytest.mark.e2e
def test_wait_head_knows_this_jobs_head_by_its_token_and_temp_dir():
    """A real head started as the job starts it (``ray-node``: every port 0). ``wait-head`` prints its address with
    the head's token and temp dir; with another token it is "another job's" (refused by the token), and so it is with
    this token but another temp dir (a head reached at an address that is not this job's).

    Head and commands run in a private network namespace (:class:`harness.netns.NetNamespace`), as every multi-node
    test does: outside one, Ray rewrites ``--ip 127.0.0.1`` to the machine's own address and talks to it."""
    if (reason := netns_unavailable_reason()) is not None:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix="wh", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(REPO), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_TMPDIR=tmp)
    ray = str(Path(sys.executable).with_name("ray"))
    since = str(int(time.time()))
    with NetNamespace() as ns:

        def job(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "study.deploy.job", *args]
            return ns.run(argv, env=env, capture_output=True, text=True)

        head = ns.popen(
            [sys.executable, "-m", "study.deploy.job", "ray-node", "--ray", ray, "--ip", "127.0.0.1", "--cpus", "0",
             "--tmpdir", tmp],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            wait = ["wait-head", "--tmpdir", tmp, "--pid", str(head.pid), "--since", since]
            up = job(env, *wait, "--timeout", "90")
            assert up.returncode == 0, up.stderr
            address = up.stdout.strip()
            assert address.startswith("127.0.0.1:"), address  # outside a namespace: the machine's own address
            assert address.rsplit(":", 1)[1] != "6379"
            assert address == (Path(tmp) / RAY_ADDRESS_FILE).read_text().strip()
            foreign = job({**env, "RAY_AUTH_TOKEN": secrets.token_hex(16)}, *wait, "--timeout", "2")
            assert foreign.returncode == 1 and "refuses this job's token: it is another job's" in foreign.stderr
            other = Path(tmp) / "other"
            other.mkdir()
            shutil.copy(Path(tmp) / RAY_ADDRESS_FILE, other / RAY_ADDRESS_FILE)
            elsewhere = job(
                env, "wait-head", "--tmpdir", str(other), "--pid", str(head.pid), "--since", since, "--timeout", "2"
            )
            assert elsewhere.returncode == 1 and "is another job's (its temp dir is" in elsewhere.stderr
            nodes = job(env, "wait-nodes", address, "1", "--timeout", "30")
            assert "ray: 1 of 1 nodes up" in nodes.stdout
            sockets = ns.run(["ss", "-Htn"], capture_output=True, text=True, check=True).stdout.split("\n")
            ends = {end.rsplit(":", 1)[0] for line in sockets if line.strip() for end in line.split()[3:5]}
            assert ends <= {"127.0.0.1", "[::1]", "[::ffff:127.0.0.1]"}, ends  # every connection on loopback
        finally:
            # its session and every descendant, by PID, before the namespace goes; SIGKILL 3 s after the SIGTERM, as a
            # head's ray start --block does not exit on SIGTERM even within 20 s
            kill_node(head, grace=3)
            shutil.rmtree(tmp, ignore_errors=True)
