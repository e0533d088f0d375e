"""A bad spec or command line is answered without importing torch, Ray or MLflow; ``--status`` imports no trainer.

Each case runs the real CLI in a fresh interpreter with ``-X importtime`` (every module imported, one line each on
stderr), so a new module-level import anywhere on the error path fails here. Latencies are in the issue's notes
(``benchmarks`` are for speed; this checks what is imported, which does not depend on the machine's load).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainables import backbones

HEAVY = ("torch", "ray", "mlflow")


def _cli(module: str, args: list[str], cwd: Path) -> tuple[int, list[str], set[str]]:
    """Exit code, the CLI's own stderr lines and the top-level packages it imported."""
    env = {**os.environ}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.splitlines()
    imported = {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in lines if ln.startswith("import time:")}
    own = [ln for ln in lines if not ln.startswith("import time:")]
    return proc.returncode, own, imported


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--set", "train.epochs=-1"], "train.epochs: Input should be greater than or equal to 1"),
        (["--set", "family=nosuch"], "family: unknown family 'nosuch'"),
        (["--set", "dataset.name=mnist"], "dataset.name: unknown dataset 'mnist'"),
        (["--set", "model.backbone=vgg"], "model.backbone: unknown backbone 'vgg'"),
        (["--set", "dataset.name=cub200"], "dataset.root: required for dataset 'cub200'"),
        (["--set", "model.pretrained=true"], "model.pretrained: backbone 'small_cnn' has no ImageNet weights"),
        (["--set", "train.linear_probe=true"], "train.linear_probe needs a dataset whose test classes"),
        (["--set", "nokey"], "--set 'nokey': expected dotted.key=value"),
        (["--max-failures", "x"], "argument --max-failures: must be an integer, got 'x'"),
        (["--max-failures", "-7"], "argument --max-failures: must be -1 (retry always) or a count >= 0, got -7"),
    ],
)
def test_a_bad_spec_or_command_line_imports_no_torch_ray_or_mlflow(tmp_path, spec_dict, write_spec, overrides, message):
    code, err, imported = _cli("study.run", [str(write_spec(spec_dict)), *overrides], tmp_path)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert "trainables" in imported  # the probe sees this interpreter's imports
    assert imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # nothing started, nothing written


@pytest.mark.parametrize(
    ("family", "overrides", "message"),
    [
        ("ms", ["--set", "params.ms_alpha=0"], "params.ms_alpha: Input should be greater than 0 (got 0)"),
        ("bspml", ["--set", "params.lambda_growth=0.5"], "params.lambda_growth: Input should be greater than or equal"),
        ("bspml", ["--set", "params.lambda0=5", "--set", "params.lambda_max=1"], "lambda0 <= lambda_max must hold"),
        ("diva", ["--set", "params.ema_momentum=2"], "params.ema_momentum: Input should be less than or equal to 1"),
        ("diva", ["--set", "model.embedding_dim=8"], "model.embedding_dim >= 16 must hold for DiVA's four heads"),
        ("prism", ["--set", "params.rate=estimated", "--set", "params.noise_rate=0.2"], "noise_rate must be null"),
        ("proxy_anchor", ["--set", "params.nosuch=1"], "unknown parameter params.nosuch for family 'proxy_anchor'"),
    ],
)
def test_a_bad_family_param_imports_no_torch_ray_or_mlflow(tmp_path, spec_dict, write_spec, family, overrides, message):
    """A family's own rules (its folder's ``params.py``) are checked without its torch module."""
    spec_dict["family"] = family
    spec_dict["search"]["space"].pop("ms_alpha")
    code, err, imported = _cli("study.run", [str(write_spec(spec_dict)), *overrides], tmp_path)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert "trainables" in imported and imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_an_unreadable_spec_imports_no_torch(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    code, err, imported = _cli("study.run", ["bad.yaml"], tmp_path)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: bad.yaml: invalid YAML"), err
    assert imported.isdisjoint(HEAVY)


def test_status_reads_the_stores_without_torch_or_ray(tmp_path, spec_dict, write_spec):
    """A study with an Optuna record (one finished trial) and no MLflow store yet: both CLIs print its progress
    from the stores, importing Optuna but neither the trainer (torch) nor Ray."""
    import optuna

    spec_dict["storage"] = str(tmp_path / "runs")
    spec_path = write_spec(spec_dict)
    root = tmp_path / "runs" / spec_dict["name"]
    root.mkdir(parents=True)
    (root / "spec.yaml").write_text(yaml.safe_dump(spec_dict))
    study = optuna.create_study(
        study_name=spec_dict["name"], storage=f"sqlite:///{root}/optuna.db", direction="maximize"
    )
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.625))
    for module, args in (("study.run", [str(spec_path), "--status"]), ("study.status", [str(spec_path)])):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", module, *args], cwd=tmp_path, capture_output=True, text=True
        )
        imported = {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in proc.stderr.splitlines() if "|" in ln}
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "1 done (1 complete" in proc.stdout and "= 0.6250" in proc.stdout, proc.stdout
        assert "optuna" in imported and imported.isdisjoint({"torch", "ray"}), sorted(imported & {"torch", "ray"})


def test_the_light_name_lists_match_the_loaders_and_builders():
    """:mod:`trainables.datasets` and :mod:`trainables.backbones` are what a spec is checked against; the torch modules
    must build exactly those."""
    from trainables.data import loader_module
    from trainables.datasets import DATASETS
    from trainables.models import _BACKBONES, _TORCHVISION

    assert all(callable(getattr(loader_module(d.name), d.loader.split(":")[1])) for d in DATASETS)
    assert tuple(_BACKBONES) == backbones.BACKBONE_NAMES
    assert tuple(_TORCHVISION) == backbones.PRETRAINABLE


def test_every_shipped_spec_validates_without_torch_ray_or_mlflow(tmp_path):
    """All of validation (names, each family's rules, the metric registry) on every spec in search_spaces/ (a table:
    every cell's spec)."""
    from tests.conftest import REPO

    script = (
        "import sys, pathlib\n"
        "from study.intake.load import load_plan\n"
        f"paths = sorted(pathlib.Path({str(REPO / 'search_spaces')!r}).rglob('*.yaml'))\n"
        "for p in paths: load_plan(p)\n"
        "print(len(paths), sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'mlflow'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, heavy = proc.stdout.split(" ", 1)
    assert int(count) > 40 and heavy.strip() == "[]", proc.stdout


def test_every_familys_rules_and_the_metric_registry_import_without_torch(tmp_path):
    """``get_rules`` for every registered family (what validation reads), and the metric registry."""
    script = (
        "import sys\n"
        "from trainables.families.registry import FAMILY_NAMES, get_rules\n"
        "from trainables.metrics.registry import EVALUATION_METRICS\n"
        "rules = [get_rules(n) for n in FAMILY_NAMES]\n"
        "assert [r.name for r in rules] == list(FAMILY_NAMES) and EVALUATION_METRICS\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'mlflow', 'faiss', 'numpy'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
