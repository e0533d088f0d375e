"""The warm local Ray head (``dmlstudy up`` / ``down``, ``--address warm``): its state directory and token file, how a
driver finds it and watches its processes, that ``down`` ends only the processes it recorded; and, end to end, one
study attached to a head that is killed mid-study and resumed on a new one.

The unit tests use stand-in processes (``sleep``) for the holder and the head's GCS and raylet: they check the PID
and start-time bookkeeping, not Ray. The end-to-end test starts real heads through the CLI, each in a temp dir of its
own, and ends them by their recorded PIDs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.driver import (
    REPO,
    logged_epochs,
    mlflow_children,
    optuna_trials,
    ray_processes,
    start_driver,
    tiny_spec,
)
from harness.sockets import is_loopback, process_tree, sockets_of
from study.commands import head as head_command
from study.runtime import warm_head as W
from study.runtime.ray_node import private_node_processes, reload_auth_settings, watch_attached
from trainables.schema.errors import StudyError


def _sleeper(ignore_term: bool = False) -> subprocess.Popen:
    script = ('trap "" TERM; ' if ignore_term else "") + "exec sleep 60"
    return subprocess.Popen(["sh", "-c", script])


def _write_state(directory: Path, holder: int, processes: dict[str, int], address: str = "127.0.0.1:1") -> W.HeadState:
    state = W.HeadState(
        directory=directory,
        address=address,
        pid=holder,
        ticks=W.start_ticks(holder) or 0,
        ray_tmpdir=str(directory / "raytmp"),
        processes={name: [pid, W.start_ticks(pid) or 0] for name, pid in processes.items()},
    )
    (directory / "raytmp").mkdir(exist_ok=True)
    W._write_private(directory / W.STATE_FILE, state.to_json())
    return state


@pytest.fixture
def head_dir(tmp_path, monkeypatch):
    directory = tmp_path / "head"
    directory.mkdir()
    monkeypatch.setenv(W.HEAD_DIR_ENV, str(directory))
    return directory


def test_the_state_directory_is_the_env_var_else_the_runtime_dir_else_the_cache():
    assert W.head_dir({W.HEAD_DIR_ENV: "/x/y", "XDG_RUNTIME_DIR": "/run/user/1"}) == Path("/x/y")
    assert W.head_dir({"XDG_RUNTIME_DIR": "/run/user/1"}) == Path("/run/user/1/dmlstudy-head")
    assert W.head_dir({}) == Path.home() / ".cache" / "dmlstudy" / "head"


def test_state_and_token_files_are_the_users_alone(head_dir):
    W._write_private(head_dir / W.TOKEN_FILE, "secret")
    assert stat.S_IMODE((head_dir / W.TOKEN_FILE).stat().st_mode) == 0o600
    assert (head_dir / W.TOKEN_FILE).read_text() == "secret"
    assert [p.name for p in head_dir.iterdir()] == [W.TOKEN_FILE]  # no temp file left beside it


def test_start_ticks_names_one_process_and_not_a_dead_one():
    proc = _sleeper()
    try:
        ticks = W.start_ticks(proc.pid)
        assert ticks is not None and ticks >= W.start_ticks(os.getpid())  # started after this test process
    finally:
        proc.kill()
        proc.wait()
    assert W.start_ticks(proc.pid) is None


def test_warm_names_the_running_head_and_its_address_and_nothing_else(head_dir):
    with pytest.raises(StudyError, match="no warm Ray head runs.*dmlstudy up"):
        W.resolve("warm")
    assert W.resolve("127.0.0.1:6379") is None
    state = _write_state(head_dir, os.getpid(), {}, address="127.0.0.1:4242")  # this process plays the holder
    assert W.resolve("warm") == state
    assert W.resolve("127.0.0.1:4242") == state
    assert W.resolve("127.0.0.1:4243") is None and W.resolve("auto") is None
    dead = _sleeper()
    dead.kill()
    dead.wait()
    stale = _write_state(head_dir, dead.pid, {})
    assert W.read_state(head_dir) == stale and W.running(head_dir) is None
    with pytest.raises(StudyError):
        W.resolve("warm")


def test_a_driver_attaching_takes_the_heads_token_over_its_own(head_dir):
    state = _write_state(head_dir, os.getpid(), {})
    env = {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "another-clusters"}
    W.attach_env(state, env)
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(head_dir / W.TOKEN_FILE)}


def test_reload_auth_settings_reaches_rays_config_and_token_loader():
    reload_auth_settings()  # the two private calls exist in this Ray (Config.initialize, reset_cache)


def test_the_driver_watches_the_heads_processes_until_it_lets_go(head_dir):
    holder, gcs, raylet = _sleeper(), _sleeper(), _sleeper()
    try:
        state = _write_state(head_dir, holder.pid, {"gcs_server": gcs.pid, "raylet": raylet.pid})
        watch_attached(state.watched())
        watched = private_node_processes()  # no Ray started in this process: the attached head's
        assert {name: p.pid for name, p in watched.items()} == {"gcs_server": gcs.pid, "raylet": raylet.pid}
        assert [p.poll() for p in watched.values()] == [None, None]
        raylet.kill()
        raylet.wait()
        assert watched["raylet"].poll() is None  # gone, the holder alive: it has yet to record how
        W._write_private(head_dir / W.ENDED_FILE, json.dumps({str(raylet.pid): -6}))
        assert watched["raylet"].poll() == -6  # what the holder, its parent, saw
        holder.kill()
        holder.wait()
        gcs.kill()
        gcs.wait()
        assert watched["gcs_server"].poll() == -signal.SIGKILL  # the holder gone: Ray's fate sharing killed it
    finally:
        watch_attached({})
        for p in (holder, gcs, raylet):
            p.kill()
            p.wait()
    assert private_node_processes() == {}


def test_down_ends_the_recorded_processes_only_and_clears_the_state(head_dir):
    holder, stubborn, other = _sleeper(), _sleeper(ignore_term=True), _sleeper()
    # An agent of the head: recorded nowhere, started with the head's own temp dir.
    agent = subprocess.Popen(["sleep", "60"], env={**os.environ, "RAY_TMPDIR": str(head_dir / "raytmp")})
    try:
        state = _write_state(head_dir, holder.pid, {"raylet": stubborn.pid, "gcs_server": other.pid})
        assert W.head_processes(state.ray_tmpdir) == [agent.pid]
        # ``other`` is recorded with another start time: a later process that reused the PID, not the head's.
        record = json.loads((head_dir / W.STATE_FILE).read_text())
        record["processes"]["gcs_server"][1] += 1
        (head_dir / W.STATE_FILE).write_text(json.dumps(record))
        W._write_private(head_dir / W.TOKEN_FILE, "t")
        started = time.monotonic()
        stopped = W.stop_head(head_dir, grace_s=0.5)
        assert stopped is not None and stopped.pid == state.pid
        assert time.monotonic() - started < 5
        assert holder.wait(5) == -signal.SIGTERM  # asked first
        assert stubborn.wait(5) == -signal.SIGKILL  # it ignored SIGTERM: killed by its recorded PID
        assert agent.wait(5) == -signal.SIGKILL
        assert other.poll() is None  # not the recorded process: left alone
        assert sorted(p.name for p in head_dir.iterdir()) == []  # state, token and Ray's temp dir gone
        assert W.stop_head(head_dir) is None
    finally:
        for p in (holder, stubborn, other, agent):
            p.kill()
            p.wait()


def test_up_and_down_say_what_they_did_without_the_token(head_dir, monkeypatch, capsys):
    holder = _sleeper()
    try:
        _write_state(head_dir, holder.pid, {}, address="127.0.0.1:4242")
        W._write_private(head_dir / W.TOKEN_FILE, "0123456789abcdef")
        assert head_command.main(["up"], prog="dmlstudy") == 0
        out = capsys.readouterr().out.splitlines()
        assert out == [
            f"a warm Ray head already runs (pid {holder.pid}, at 127.0.0.1:4242); stop it with: dmlstudy down",
            "--address warm",
        ]
        assert head_command.main(["down"], prog="dmlstudy") == 0
        assert capsys.readouterr().out == f"stopped the warm Ray head (pid {holder.pid}, at 127.0.0.1:4242)\n"
        assert holder.wait(5) == -signal.SIGTERM
        assert head_command.main(["down"], prog="dmlstudy") == 0
        assert capsys.readouterr().out.startswith("no warm Ray head runs")
    finally:
        holder.kill()
        holder.wait()


# ---- end to end ----


def _dmlstudy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from study.commands.cli import entry; entry()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _head_listeners(state: W.HeadState) -> list:
    pids: set[int] = set()
    for pid in [state.pid, *(p for p, _ in state.processes.values())]:
        pids |= process_tree(pid)
    return [s for s in sockets_of(pids) if s.listening]


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) not found: it lists the head's sockets")
def test_a_study_on_the_warm_head_survives_the_heads_death_and_resumes_on_a_new_one(tmp_path):
    """up → a study attached (``--address warm``) → a second up says the head runs → the head listens on loopback
    only, its token file 0600 and never printed → the head SIGKILLed mid-study: exit 3, one line naming what died,
    then the continue line → up again (a new head) → ``--resume`` finishes every trial and epoch once → down ends
    both heads' processes."""
    directory = tmp_path / "head"
    ray_tmp = tempfile.mkdtemp(prefix="rw", dir="/tmp")  # the driver's own: attached, it starts no Ray there
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
        W.HEAD_DIR_ENV: str(directory),
        "RAY_TMPDIR": ray_tmp,
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
    }
    name, epochs, num_trials = "t_warm_head", 2, 2
    spec = tiny_spec(name, epochs=epochs, num_trials=num_trials, max_concurrent=1)
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    study_dir = tmp_path / "runs" / name
    heads: list[W.HeadState] = []
    outputs: list[str] = []
    try:
        up = _dmlstudy(env, "up")
        outputs.append(up.stdout + up.stderr)
        assert up.returncode == 0 and up.stdout.splitlines()[-1] == "--address warm", up.stdout + up.stderr
        head = W.read_state(directory)
        assert head is not None and head.alive()
        heads.append(head)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(head.token_file.stat().st_mode) == 0o600

        proc = start_driver(tmp_path, env, "spec.yaml", "--address", "warm", "--no-dashboard")
        started, listeners = time.monotonic(), []
        again = _dmlstudy(env, "up")
        outputs.append(again.stdout + again.stderr)
        assert again.returncode == 0 and again.stdout.splitlines() == [
            f"a warm Ray head already runs (pid {head.pid}, at {head.address}); stop it with: dmlstudy down",
            "--address warm",
        ]
        while logged_epochs(study_dir, name) < 1:  # the first trial is mid-way
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() - started < 300, "no epoch was logged"
            listeners += _head_listeners(head)
            time.sleep(0.2)
        owners = {name for s in listeners for name, _ in s.owners}
        assert {"gcs_server", "raylet"} <= owners and any(o.startswith("ray::") for o in owners), owners
        assert [s.local for s in listeners if not is_loopback(s.local_host)] == []

        os.kill(head.pid, signal.SIGKILL)  # the head dies mid-study (its Ray processes share the holder's fate)
        out, _ = proc.communicate(timeout=120)
        outputs.append(out)
        lines = out.strip().splitlines()
        assert proc.returncode == 3, out[-3000:]
        # One line says what died, then the continue line ends the output (a line Ray's log monitor forwards from
        # the dying head may fall between them under load).
        died = next((line for line in reversed(lines[:-1]) if "died (" in line), "")
        assert "gcs_server pid" in died or "raylet pid" in died, out[-3000:]
        assert "SIGKILL" in died and "Traceback" not in out, out[-3000:]
        assert lines[-1] == (
            "stopped; continue it with: python -m study.run spec.yaml --address warm --no-dashboard --resume"
        )

        up = _dmlstudy(env, "up")
        outputs.append(up.stdout + up.stderr)
        assert up.returncode == 0 and up.stdout.startswith("started a warm Ray head"), up.stdout + up.stderr
        second = W.read_state(directory)
        assert second is not None and second.pid != head.pid
        heads.append(second)
        resumed = subprocess.run(
            [sys.executable, "-m", "study.run", "spec.yaml", "--address", "warm", "--no-dashboard", "--resume"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outputs.append(resumed.stdout + resumed.stderr)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        client, parents, children = mlflow_children(study_dir, name)
        assert len(children) == num_trials and all(r.info.status == "FINISHED" for r in [*parents, *children])
        for run in children:
            steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1"))
            assert steps == list(range(1, epochs + 1)), (run.info.run_id, steps)
        trials = optuna_trials(study_dir, name)
        assert len(trials) == num_trials and all(t.state.name == "COMPLETE" for t in trials)

        token = second.token_file.read_text()
        down = _dmlstudy(env, "down")
        outputs.append(down.stdout + down.stderr)
        assert down.returncode == 0 and down.stdout.startswith(f"stopped the warm Ray head (pid {second.pid}")
        assert not any(token in text or token[:16] in text for text in outputs)
        assert not second.token_file.exists() and not Path(second.ray_tmpdir).exists()
    finally:
        for state in heads:  # whatever the test left, by recorded PID only
            for pid, ticks in [(state.pid, state.ticks), *state.processes.values()]:
                if W.start_ticks(pid) == ticks:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            shutil.rmtree(state.ray_tmpdir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for state in heads:  # nothing of either head is left: no process started with its Ray temp dir
        deadline = time.monotonic() + 10
        while ray_processes(state.ray_tmpdir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ray_processes(state.ray_tmpdir) == [], state
