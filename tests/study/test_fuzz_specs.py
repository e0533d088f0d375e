"""Malformed specs and ``--set`` overrides: each gets exit 2 and one line naming the key or file, writes nothing.

Every case runs the CLI in-process (``study.run.main``) with a private working directory and a private
``storage:``; after it, both must still be empty, stderr must be exactly one line without a traceback (and
without a password from a URL), and Ray must never have been started (``ray.init`` is replaced by a failure).
A few cases run again as real ``python -m study.run`` subprocesses, end to end.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.fake_data import write_cub
from study.commands.run import main

#: Appears in every URL password of the cases: it must never reach stderr.
SECRET = "S3cr3tPw"

BASE: dict[str, Any] = {
    "name": "fuzz",
    "family": "ms",
    "dataset": {"name": "digits"},
    "train": {"epochs": 1, "classes_per_batch": 5, "samples_per_class": 4},
    "validation": {"kind": "none"},
    "final": {"seeds": 0},
    "search": {
        "num_trials": 2,
        "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}},
    },
}


def _spec(**changes: Any) -> str:
    """BASE as YAML with ``changes`` written at their dotted keys (``__`` for ``.``; ``_DELETE`` removes)."""
    tree = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)


_DELETE = object()
_BASE_YAML = _spec()


@dataclass(frozen=True)
class Case:
    """One malformed input: the spec file's content (``bytes`` for binary; ``MISSING``/``DIRECTORY`` for no
    file), ``--set`` overrides and other CLI arguments, and a fragment (or fragments) the one line must contain."""

    expect: str | tuple[str, ...]
    text: str | bytes = _BASE_YAML
    sets: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    data: bool = False  # needs the fake CUB tree (4 training classes) under <tmp>/data


MISSING, DIRECTORY = "<missing>", "<directory>"


def _secret_uri(scheme: str = "postgresql", tail: str = "h:notaport/db") -> str:
    return f"{scheme}://user:{SECRET}@{tail}"


CASES: dict[str, Case] = {
    # ---- the file itself
    "file-empty": Case("empty", text=""),
    "file-only-comment": Case("empty", text="# nothing here\n"),
    "file-binary": Case("not UTF-8", text=bytes(range(256)) * 4),
    "file-missing": Case("No such file", text=MISSING),
    "file-directory": Case("directory", text=DIRECTORY),
    "file-yaml-list": Case("mapping", text="- name: x\n- family: ms\n"),
    "file-yaml-scalar": Case("mapping", text="just a string\n"),
    "yaml-unclosed-bracket": Case("invalid YAML at line", text="name: [fuzz\nfamily: ms\n"),
    "yaml-bad-indent": Case("invalid YAML", text="name: fuzz\n  family: ms\n bad: 1\n"),
    "yaml-tab-indent": Case("invalid YAML", text="name: fuzz\ntrain:\n\tepochs: 2\n"),
    "yaml-python-tag": Case("invalid YAML", text="name: !!python/object/apply:os.system ['true']\nfamily: ms\n"),
    "yaml-duplicate-top-key": Case("line 20: duplicate key 'family'", text=_BASE_YAML + "family: triplet\n"),
    "yaml-duplicate-nested-key": Case(
        "line 5: duplicate key 'epochs'", text="name: fuzz\nfamily: ms\ntrain:\n  epochs: 1\n  epochs: 2\n"
    ),
    "yaml-non-string-key": Case("key", text=_BASE_YAML + "1: one\n"),
    # ---- name
    "name-missing": Case("'name'", text=_spec(name=_DELETE)),
    "name-empty": Case("name", text=_spec(name="")),
    "name-slash": Case("name", text=_spec(name="a/b")),
    "name-dotdot": Case("name", text=_spec(name="..")),
    "name-unicode": Case("name", text=_spec(name="στούντιο")),
    "name-very-long": Case("name", text=_spec(name="x" * 5000)),
    "name-int": Case("name", text=_spec(name=5)),
    "name-null": Case("name", text=_spec(name=None)),
    # ---- family
    "family-unknown": Case("unknown family 'nope'", text=_spec(family="nope")),
    "family-missing": Case("'family'", text=_spec(family=_DELETE)),
    "family-list": Case("family", text=_spec(family=["ms"])),
    # ---- params
    "params-unknown": Case("params.bogus", text=_spec(params={"bogus": 1})),
    "params-wrong-type": Case("params.ms_alpha", text=_spec(params={"ms_alpha": "abc"})),
    "params-nan": Case("params: ms_beta must be a finite number", text=_spec(params={"ms_beta": float("nan")})),
    "params-inf": Case("params: ms_beta must be a finite number", text=_spec(params={"ms_beta": float("inf")})),
    "params-list": Case("params", text=_spec(params=[1, 2])),
    # ---- dataset
    "dataset-unknown": Case("unknown dataset 'imagenet'", text=_spec(dataset={"name": "imagenet"})),
    "dataset-not-mapping": Case("dataset", text=_spec(dataset="digits")),
    "dataset-root-missing": Case("dataset.root", text=_spec(dataset={"name": "cub200"})),
    "dataset-root-absent": Case(  # the line says where it looked, the layout it expects and where to get it
        (
            "dataset 'cub200': no such directory: /nonexistent/cub; expected layout CUB_200_2011/{images/",
            "vision.caltech.edu",
        ),
        text=_spec(dataset={"name": "cub200", "root": "/nonexistent/cub"}),
    ),
    "dataset-root-is-a-file": Case(
        "no such directory", text=_spec(dataset={"name": "cub200", "root": "/etc/hostname"})
    ),
    "dataset-root-unicode": Case("cub200", text=_spec(dataset={"name": "cub200", "root": "/nonexistent/птицы/../ü"})),
    "dataset-image-size-huge": Case("dataset.image_size", text=_spec(dataset={"name": "digits", "image_size": 10**30})),
    "dataset-subset-unknown": Case("dataset.subset", text=_spec(dataset={"name": "digits", "subset": "half"})),
    "noise-kind-unknown": Case("dataset.noise.kind", sets=("dataset.noise.kind=gaussian",)),
    "noise-ratio-above-1": Case("dataset.noise.ratio", sets=("dataset.noise.ratio=1.5",)),
    "noise-ratio-negative": Case("dataset.noise.ratio", sets=("dataset.noise.ratio=-0.1",)),
    "noise-ratio-nan": Case("dataset.noise.ratio", sets=("dataset.noise.ratio=.nan",)),
    "noise-not-mapping": Case("dataset.noise", sets=("dataset.noise=per_class",)),
    # ---- model
    "model-backbone-unknown": Case("unknown backbone", sets=("model.backbone=resnet9000",)),
    "model-weights-missing": Case(
        "model.weights: no such file",
        sets=("model.pretrained=true", "model.backbone=resnet18", "model.weights=/nonexistent.pth"),
    ),
    "model-embedding-negative": Case("model.embedding_dim", sets=("model.embedding_dim=-3",)),
    "model-embedding-huge": Case("model.embedding_dim", sets=("model.embedding_dim=1000000000000000000000000000000",)),
    # ---- train
    "train-epochs-zero": Case("train.epochs", sets=("train.epochs=0",)),
    "train-epochs-negative": Case("train.epochs", sets=("train.epochs=-5",)),
    "train-epochs-10e30": Case("train.epochs", sets=("train.epochs=1000000000000000000000000000000",)),
    "train-epochs-1e308": Case("train.epochs", sets=("train.epochs=1e308",)),
    "train-epochs-string": Case("train.epochs", sets=("train.epochs=ten",)),
    "train-epochs-fraction": Case("train.epochs", sets=("train.epochs=2.5",)),
    "train-epochs-inf": Case("train.epochs", sets=("train.epochs=.inf",)),
    "train-P-one": Case("train.classes_per_batch", sets=("train.classes_per_batch=1",)),
    "train-K-negative": Case("train.samples_per_class", sets=("train.samples_per_class=-4",)),
    "train-lr-zero": Case("train.optimizer.lr", sets=("train.optimizer.lr=0",)),
    "train-lr-inf": Case("train.optimizer.lr", sets=("train.optimizer.lr=.inf",)),
    "train-lr-nan": Case("train.optimizer.lr", sets=("train.optimizer.lr=.nan",)),
    "train-momentum-1e308": Case("train.optimizer.momentum", sets=("train.optimizer.momentum=1e308",)),
    "train-optimizer-unknown": Case("train.optimizer.name", sets=("train.optimizer.name=rmsprop",)),
    "train-recall-empty": Case("train.recall_at", sets=("train.recall_at=[]",)),
    "train-recall-zero": Case("train.recall_at", sets=("train.recall_at=[0, 1]",)),
    "train-unknown-key": Case("unknown key 'train.epoch'", sets=("train.epoch=3",)),
    "train-unknown-key-in-file": Case("unknown key 'train.epoch'", text=_spec(train__epoch=3)),
    "train-step-no-milestones": Case("train.lr_schedule", sets=("train.lr_schedule.type=step",)),
    "train-workers-negative": Case("train.num_workers", sets=("train.num_workers=-1",)),
    # ---- search
    "search-trials-zero": Case("search.num_trials", sets=("search.num_trials=0",)),
    "search-trials-10e30": Case("search.num_trials", sets=("search.num_trials=1000000000000000000000000000000",)),
    "search-metric-unknown": Case("search.metric", sets=("search.metric=accuracy",)),
    "search-mode-unknown": Case("search.mode", sets=("search.mode=maximize",)),
    "search-sampler-unknown": Case("search.sampler.type", sets=("search.sampler.type=bayes",)),
    "search-sampler-seed-negative": Case("search.sampler.seed", sets=("search.sampler.seed=-1",)),
    "search-sampler-seed-10e30": Case(
        "search.sampler.seed", sets=("search.sampler.seed=1000000000000000000000000000000",)
    ),
    "search-scheduler-unknown": Case("search.scheduler.type", sets=("search.scheduler.type=hyperband",)),
    "search-grace-zero": Case("search.scheduler.grace_period", sets=("search.scheduler.grace_period=0",)),
    "search-reduction-one": Case("search.scheduler.reduction_factor", sets=("search.scheduler.reduction_factor=1",)),
    "search-reduction-nan": Case("search.scheduler.reduction_factor", sets=("search.scheduler.reduction_factor=.nan",)),
    "space-no-type": Case("search.space.ms_beta", sets=("search.space.ms_beta={low: 1, high: 2}",)),
    "space-type-unknown": Case(
        "search.space.ms_beta.type", sets=("search.space.ms_beta={type: uniform, low: 1, high: 2}",)
    ),
    "space-low-above-high": Case("search.space.ms_beta", sets=("search.space.ms_beta={type: float, low: 3, high: 2}",)),
    "space-log-zero": Case(
        "search.space.ms_beta", sets=("search.space.ms_beta={type: float, low: 0, high: 2, log: true}",)
    ),
    "space-high-inf": Case("search.space.ms_beta", sets=("search.space.ms_beta={type: float, low: 1, high: .inf}",)),
    "space-low-nan": Case("search.space.ms_beta", sets=("search.space.ms_beta={type: float, low: .nan, high: 2}",)),
    "space-int-huge": Case(
        "search.space.seed", sets=("search.space.seed={type: int, low: 0, high: 1000000000000000000000000000000}",)
    ),
    "space-unknown-param": Case("search.space", sets=("search.space.bogus={type: float, low: 1, high: 2}",)),
    "space-unknown-path": Case("search.space", sets=("search.space.train.bogus={type: int, low: 1, high: 2}",)),
    "space-choices-empty": Case(
        "search.space.ms_beta.choices", sets=("search.space.ms_beta={type: categorical, choices: []}",)
    ),
    "search-grid-empty-space": Case("grid", text=_spec(search__space={}, search__sampler={"type": "grid"})),
    "search-grid-float-param": Case("search.space.ms_alpha", sets=("search.sampler.type=grid",)),
    "space-not-mapping": Case("search.space", sets=("search.space=[1, 2]",)),
    "space-P-range-beyond-classes": Case(
        "search.space.train.classes_per_batch=50",
        text=_spec(search__space={"train.classes_per_batch": {"type": "int", "low": 2, "high": 50}}),
    ),
    "space-P-choices-beyond-classes": Case(
        "search.space.train.classes_per_batch=9",
        text=_spec(search__space={"train.classes_per_batch": {"type": "categorical", "choices": [2, 9]}}),
    ),
    # ---- validation
    "validation-kind-unknown": Case("validation.kind", sets=("validation.kind=loo",)),
    "validation-folds-one": Case("validation.folds", sets=("validation.folds=1",)),
    "validation-fraction-one": Case("validation.fraction", sets=("validation.fraction=1.0",)),
    "validation-labels-unknown": Case("validation.labels", sets=("validation.labels=oracle",)),
    "validation-kfold-too-few-classes": Case(  # 4 folds of the 5 digits classes: smaller than the batch's P
        "validation.folds=4: the 5 training classes of 'digits' give folds of 1 classes, fewer than "
        "train.classes_per_batch=5",
        sets=("validation.kind=kfold",),
    ),
    "validation-holdout-too-few-classes": Case("validation.fraction", sets=("validation.kind=holdout",)),
    # ---- final
    "final-seeds-negative": Case("final.seeds", sets=("final.seeds=-1",)),
    "final-group-by-unknown": Case("final.group_by", sets=("final.group_by=[nope]",)),
    # ---- resources
    "resources-cpu-zero": Case("resources.cpu", sets=("resources.cpu=0",)),
    "resources-cpu-negative": Case("resources.cpu", sets=("resources.cpu=-2",)),
    "resources-cpu-1e308": Case("resources.cpu", sets=("resources.cpu=1e308",)),
    "resources-gpu-nan": Case("resources.gpu", sets=("resources.gpu=.nan",)),
    "resources-gpu-inf": Case("resources.gpu", sets=("resources.gpu=.inf",)),
    # ---- tracking (a password in a URL never reaches the message)
    "tracking-uri-bad-port": Case("tracking.uri", sets=(f"tracking.uri={_secret_uri()}",)),
    "tracking-uri-unknown-scheme": Case("tracking.uri", sets=(f"tracking.uri={_secret_uri('ftp', 'h/x')}",)),
    "tracking-uri-no-scheme": Case("tracking.uri", sets=("tracking.uri=not a uri",)),
    "tracking-uri-no-host": Case("tracking.uri", sets=("tracking.uri=http://",)),
    "tracking-optuna-bad-port": Case(
        "tracking.optuna_uri", sets=(f"tracking.optuna_uri={_secret_uri(tail='h:99999999/db')}",)
    ),
    "tracking-uri-int": Case("tracking.uri", sets=("tracking.uri=5",)),
    "tracking-unknown-key": Case("unknown key 'tracking.url'", sets=("tracking.url=http://h",)),
    "tracking-secret-in-yaml-error": Case(
        "invalid YAML", text=f"name: fuzz\nfamily: ms\ntracking: {{uri: {_secret_uri(tail='h/db')}\n"
    ),
    # ---- storage
    "storage-empty": Case("storage", sets=("storage=",)),
    "storage-int": Case("storage", sets=("storage=5",)),
    "storage-uri-secret-no-tracking": Case("storage", sets=(f"storage={_secret_uri('s3', 'bucket/prefix')}",)),
    "storage-unknown-scheme": Case("storage", sets=("storage=ftp://host/dir",)),
    # ---- top level
    "top-unknown-key": Case("unknown key 'bogus'", sets=("bogus=1",)),
    "seed-negative": Case("seed", sets=("seed=-1",)),
    "seed-10e30": Case("seed", sets=("seed=1000000000000000000000000000000",)),
    # ---- --set syntax and the command line
    "set-no-equals": Case("--set", sets=("train.epochs",)),
    "set-empty-key": Case("--set", sets=("=5",)),
    "set-double-dot": Case("--set", sets=("train..epochs=3",)),
    "set-unicode-key": Case("--set", sets=("trаin.epochs=3",)),  # a Cyrillic а
    "set-bad-yaml-value": Case("--set train.epochs", sets=("train.epochs=[1",)),
    "set-into-scalar": Case("name", sets=("name.first=x",)),
    "set-secret-bad-yaml": Case("--set tracking.uri", sets=(f"tracking.uri=[{_secret_uri(tail='h/db')}",)),
    "cli-unknown-flag": Case("unrecognized arguments", extra=("--bogus",)),
    "cli-max-failures-text": Case("--max-failures", extra=("--max-failures", "many")),
    # ---- data-dependent, checked on the driver from the dataset's annotations (fake CUB: 4 training classes)
    "data-P-exceeds-classes": Case("train.classes_per_batch=5 exceeds the 4 training classes", data=True),
    "data-P-range-exceeds-classes": Case(
        "train.classes_per_batch=6 exceeds the 4 training classes of 'cub200' (at search.space.train.",
        text=_spec(search__space={"train.classes_per_batch": {"type": "int", "low": 2, "high": 6}}),
        sets=("train.classes_per_batch=2",),
        data=True,
    ),
    "data-kfold-folds-exceed-classes": Case(
        "validation.folds=6 exceeds",
        sets=("train.classes_per_batch=2", "validation={kind: kfold, folds: 6}"),
        data=True,
    ),
    "data-holdout-too-small": Case(
        "validation.fraction",
        sets=("train.classes_per_batch=4", "validation={kind: holdout, fraction: 0.25}"),
        data=True,
    ),
}


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray must never start for bad input: reaching ``ray.init`` fails the case."""
    import ray

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ray.init was called: the bad input got past the driver's checks")

    monkeypatch.setattr(ray, "init", refuse)


def _argv(case: Case, root: Path) -> list[str]:
    specs = root / "specs"
    specs.mkdir(exist_ok=True)
    path = specs / "spec.yaml"
    if case.text == MISSING:
        pass
    elif case.text == DIRECTORY:
        path.mkdir()
    elif isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text)
    sets = [f"storage={root / 'store'}"]
    if case.data:
        cub, _ = write_cub(root / "data", n_classes=8, per_class=2, size=(8, 8))
        sets += ["dataset.name=cub200", f"dataset.root={cub}", "model.backbone=small_cnn"]
    sets += list(case.sets)
    return [str(path), *(a for s in sets for a in ("--set", s)), *case.extra]


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _check(case: Case, rc: int | None, stderr: str, root: Path, before: set[str]) -> None:
    assert rc == 2, f"exit code {rc}, stderr: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].strip(), f"expected one line, got {stderr!r}"
    for fragment in case.expect if isinstance(case.expect, tuple) else (case.expect,):
        assert fragment.lower() in stderr.lower(), f"{fragment!r} not in {stderr!r}"
    assert SECRET not in stderr, f"a password leaked: {stderr!r}"
    assert not (root / "store").exists(), "the storage directory was created"
    assert not any((root / "cwd").iterdir()), f"files written in the cwd: {sorted((root / 'cwd').iterdir())}"
    assert _snapshot(root) == before, f"files written: {sorted(_snapshot(root) - before)}"


@pytest.mark.parametrize("case_id", list(CASES))
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[case_id]
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    argv = _argv(case, tmp_path)
    before = _snapshot(tmp_path)
    capsys.readouterr()
    try:
        rc: int | None = main(argv)
    except SystemExit as e:  # argparse exits by itself
        rc = e.code if isinstance(e.code, int) else 1
    _check(case, rc, capsys.readouterr().err, tmp_path, before)


def test_the_suite_covers_every_section() -> None:
    """At least 50 cases, and each spec section is fuzzed."""
    sections = {
        "file", "yaml", "name", "family", "params", "dataset", "noise", "model", "train", "search", "space",
        "validation", "final", "resources", "tracking", "storage", "seed", "set", "cli", "data",
    }  # fmt: skip
    seen = {case_id.split("-")[0] for case_id in CASES}
    assert sections <= seen, sections - seen
    assert len(CASES) >= 50
    print(f"fuzz cases: {len(CASES)}")


def test_the_driver_accepts_what_the_data_allows(tmp_path: Path) -> None:
    """No false alarm: P reaching exactly the 4 training classes of the fake CUB passes the driver's checks."""
    from study.intake.spec_reader import parse_spec
    from trainables.checks import check_inputs

    cub, _ = write_cub(tmp_path, n_classes=8, per_class=2, size=(8, 8))
    raw = copy.deepcopy(BASE)
    raw["dataset"] = {"name": "cub200", "root": str(cub)}
    raw["search"]["space"]["train.classes_per_batch"] = {"type": "int", "low": 2, "high": 4}
    check_inputs(parse_spec(raw))
    raw["validation"] = {"kind": "kfold", "folds": 2}
    raw["search"]["space"]["train.classes_per_batch"]["high"] = 2
    check_inputs(parse_spec(raw))


#: Run again as real ``python -m study.run`` processes (concurrently: each pays the imports once): the bad input a
#: user meets first (tests/PROMISES.md F18: an unknown key, a bad ``--set`` value, an unknown flag, folds too small
#: for the batch, a missing dataset root or weights file), and three of the fuzzed kinds.
END_TO_END = (
    "train-unknown-key-in-file",
    "train-epochs-string",
    "cli-unknown-flag",
    "validation-kfold-too-few-classes",
    "dataset-root-absent",
    "model-weights-missing",
    "file-binary",
    "tracking-uri-bad-port",
    "data-P-exceeds-classes",
)


@pytest.mark.e2e
def test_bad_input_end_to_end_in_subprocesses(tmp_path: Path) -> None:
    """The same property through ``python -m study.run``: the real exit code, one line, no traceback, and no Ray
    session directory in the process's own ``RAY_TMPDIR``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("RAY_ADDRESS", None)
    running = []
    for case_id in END_TO_END:
        root = tmp_path / case_id
        (root / "cwd").mkdir(parents=True)
        argv = _argv(CASES[case_id], root)
        ray_tmp = tempfile.mkdtemp(prefix="rayfz", dir="/tmp")
        proc = subprocess.Popen(
            [sys.executable, "-m", "study.run", *argv],
            cwd=root / "cwd",
            env={**env, "RAY_TMPDIR": ray_tmp},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        running.append((case_id, root, _snapshot(root), ray_tmp, proc))
    try:
        for case_id, root, before, ray_tmp, proc in running:
            _, stderr = proc.communicate(timeout=240)
            assert not os.listdir(ray_tmp), f"{case_id}: Ray was started"
            _check(CASES[case_id], proc.returncode, stderr, root, before)
    finally:
        for *_, ray_tmp, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            shutil.rmtree(ray_tmp, ignore_errors=True)
