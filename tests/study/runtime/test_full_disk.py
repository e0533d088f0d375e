"""A store that fills mid-study (a 3 MB tmpfs): exit 1 with one line naming the store and the remedy, no traceback;
after the disk is enlarged, ``--resume`` finishes every trial with every epoch in MLflow and Optuna."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

from harness.driver import driver_env, mlflow_children, optuna_trials, tiny_spec

pytestmark = pytest.mark.e2e


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB tmpfs (root only; skipped where mounting is not allowed), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_is_one_line_and_resume_finishes(tmp_path, small_disk):
    epochs, num_trials = 3, 4
    spec = tiny_spec("t_full", epochs=epochs, num_trials=num_trials)
    spec["storage"] = str(small_disk / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = driver_env(ray_tmp, HOME=str(tmp_path / "home"))  # the private Ray's token must not land in ~/.ray

    def run(*extra: str) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard", *extra]
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    try:
        full = run()
        print(f"full-disk run: exit {full.returncode}, stderr:\n{full.stderr}")  # for the record (pytest -s)
        errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
        assert full.returncode == 1, full.stderr[-3000:]
        assert "Traceback" not in full.stderr and len(errors) == 1, full.stderr[-3000:]
        assert errors[0] == full.stderr.splitlines()[-1]
        assert "cannot be written" in errors[0] and "free space" in errors[0] and "--resume" in errors[0]
        assert str(small_disk / "runs" / "t_full") in errors[0]  # names the store
        subprocess.run(["mount", "-o", "remount,size=200m", "tmpfs", str(small_disk)], check=True)
        resumed = run("--resume")
        print(f"resume: exit {resumed.returncode}, {resumed.stdout.strip().splitlines()[-5:]}")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not (tmp_path / "home" / ".ray").exists()
    study_dir = small_disk / "runs" / "t_full"
    client, parents, children = mlflow_children(study_dir, "t_full")
    assert len(children) == num_trials and all(r.info.status == "FINISHED" for r in [*parents, *children])
    for run_ in children:
        steps = sorted(m.step for m in client.get_metric_history(run_.info.run_id, "test/recall_at_1"))
        assert steps == list(range(1, epochs + 1)), (run_.info.run_id, steps)
    trials = optuna_trials(study_dir, "t_full")
    assert len(trials) == num_trials and all(t.state.name == "COMPLETE" for t in trials)
