from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.driver import SESSION_HEAD_ENV, study_env

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def _decoded_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests' decoded-image caches (dataset.cache: decoded) go to the session's temp dir, inherited by every
    subprocess and Ray worker a test starts, not to the user's cache directory."""
    os.environ.setdefault("DMLSTUDY_CACHE_DIR", str(tmp_path_factory.mktemp("decoded_cache")))


@pytest.fixture(scope="session")
def _session_head(_decoded_cache_dir: None) -> Iterator[Path]:
    """The state directory of one warm local Ray head (``dmlstudy up``'s, :mod:`study.runtime.warm_head`) that the
    tests using :func:`on_warm_head` share: started by the first of them, stopped after the last test. Its own temp
    dirs (a test's clean-up kills what runs in the test's ``RAY_TMPDIR``); started after the decoded-image cache's
    variable is set, so its workers see it."""
    from study.runtime import warm_head

    directory = Path(tempfile.mkdtemp(prefix="dmlheadstate", dir="/tmp"))
    yield directory
    warm_head.stop_head(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def on_warm_head(_session_head: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's studies attach to the session's warm head (``RAY_ADDRESS=warm``, as a user's shell after
    ``dmlstudy up`` may hold) instead of starting a private Ray each: the ``ray.init`` and ``ray.shutdown`` of every
    driver are saved (docs/notebook/performance.md). Only for tests that check nothing only the default local start
    has (tests/PROMISES.md, section 2's column and section 4). A head that died is started again."""
    from study.runtime import warm_head

    warm_head.start_head(_session_head)  # the running one, or a new one
    monkeypatch.setenv("RAY_ADDRESS", warm_head.WARM_ADDRESS)
    monkeypatch.setenv(warm_head.HEAD_DIR_ENV, str(_session_head))
    monkeypatch.setenv(SESSION_HEAD_ENV, "1")
    return _session_head


@pytest.fixture
def spec_dict() -> dict:
    """A small valid digits study; tests mutate a copy."""
    return {
        "name": "t_study",
        "family": "ms",
        "dataset": {"name": "digits"},
        "train": {"epochs": 2, "classes_per_batch": 5, "samples_per_class": 4},
        # digits has 5 training classes, too few for validation folds: these tests run the kind: none path
        # (trials report test/ metrics); tests/study/test_selection.py runs the honest protocol.
        "validation": {"kind": "none"},
        "final": {"seeds": 0},
        "search": {
            "num_trials": 2,
            "space": {
                "ms_alpha": {"type": "float", "low": 1.0, "high": 3.0},
                "train.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            },
        },
    }


@pytest.fixture
def write_spec(tmp_path: Path):
    def write(spec: dict | str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


@pytest.fixture
def run_cli(tmp_path: Path):
    """Run ``python -m study.run`` in a subprocess with its own RAY_TMPDIR; returns CompletedProcess."""

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        # Ray's socket paths must stay under 108 bytes: a short private directory per run.
        ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        env = study_env({**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1"})
        try:
            return subprocess.run(
                [sys.executable, "-m", "study.run", *args],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)

    return run
