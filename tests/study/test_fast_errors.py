"""A bad spec or command line is answered without importing torch, Ray or MLflow; ``--status`` imports no trainer.

Each case runs the real CLI (``runpy``, as ``python -m`` does) in a process of its own, forked from one server per
module that imported the CLIs' module-level closure once (``study.run``, ``study.status``), and reads that process's
``sys.modules`` when it exits. A heavy import at module level shows in the server (checked once, and again in every
case, since a child inherits it); one on an error path shows in that case's child. So a new heavy import anywhere on
the error path fails here, as with a fresh interpreter per case, without paying the CLIs' 1.5 s import per case.
The two scripts at the end check other import closures (every spec, every family's rules) in fresh interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from trainables import backbones

HEAVY = ("torch", "ray", "mlflow")
#: What each case reports: exit code, its stdout, its stderr lines, the top-level packages it had imported at exit.
CliResult = tuple[int, str, list[str], set[str]]

#: The server: imports the modules named in argv, says which packages it holds, then forks one child per request line
#: (module, args, cwd). The child runs the module as ``__main__`` with its stdout and stderr on files and, from an
#: ``atexit`` handler registered first (so it runs last, also when the CLI leaves through ``os._exit`` after running
#: the handlers itself), writes its ``sys.modules``' packages.
_SERVER = r"""
import atexit, json, os, runpy, sys, traceback
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd, path in ((1, request["out"]), (2, request["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            os.chdir(request["cwd"])

            def _modules(path=request["modules"]):
                with open(path, "w") as f:
                    json.dump(sorted({m.split(".")[0] for m in sys.modules}), f)

            atexit.register(_modules)
            sys.argv = [request["module"], *request["args"]]
            sys.modules.pop(request["module"], None)  # as under -m: the module runs as __main__ only (its imports stay)
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        except SystemExit as e:  # what the interpreter does with it
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])), flush=True)
"""


@pytest.fixture(scope="module")
def cli() -> Iterator[Callable[[str, list[str], Path], CliResult]]:
    """``cli(module, args, cwd)``: one forked run of ``python -m module args`` in ``cwd``."""
    env = {**os.environ}
    env.pop("RAY_ADDRESS", None)
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, "study.run", "study.status"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    requests, replies = server.stdin, server.stdout
    assert requests is not None and replies is not None
    preloaded = set(json.loads(replies.readline()))
    # The probe sees the CLIs' module-level imports; none of them is heavy.
    assert {"study", "trainables"} <= preloaded and preloaded.isdisjoint(HEAVY), sorted(preloaded & set(HEAVY))
    scratch = Path(tempfile.mkdtemp(prefix="fast_errors_"))

    def run(module: str, args: list[str], cwd: Path) -> CliResult:
        paths = {key: str(scratch / key) for key in ("out", "err", "modules")}
        print(json.dumps({"module": module, "args": args, "cwd": str(cwd), **paths}), file=requests, flush=True)
        code = json.loads(replies.readline())
        modules = Path(paths["modules"])
        imported = set(json.loads(modules.read_text())) if modules.exists() else set()
        modules.unlink(missing_ok=True)
        out, err = (Path(paths[key]).read_text() for key in ("out", "err"))
        assert imported, f"the case left without listing its modules (exit {code}): {err[-2000:]}"
        return code, out, err.splitlines(), imported

    yield run
    requests.close()
    server.wait(timeout=60)


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
def test_a_bad_spec_or_command_line_imports_no_torch_ray_or_mlflow(
    cli, tmp_path, spec_dict, write_spec, overrides, message
):
    code, _, err, imported = cli("study.run", [str(write_spec(spec_dict)), *overrides], tmp_path)
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
def test_a_bad_family_param_imports_no_torch_ray_or_mlflow(
    cli, tmp_path, spec_dict, write_spec, family, overrides, message
):
    """A family's own rules (its folder's ``params.py``) are checked without its torch module."""
    spec_dict["family"] = family
    spec_dict["search"]["space"].pop("ms_alpha")
    code, _, err, imported = cli("study.run", [str(write_spec(spec_dict)), *overrides], tmp_path)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert "trainables" in imported and imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_an_unreadable_spec_imports_no_torch(cli, tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    code, _, err, imported = cli("study.run", ["bad.yaml"], tmp_path)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: bad.yaml: invalid YAML"), err
    assert imported.isdisjoint(HEAVY)


def test_status_reads_the_stores_without_torch_or_ray(cli, tmp_path, spec_dict, write_spec):
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
        code, out, err, imported = cli(module, args, tmp_path)
        assert code == 0, err[-20:]
        assert "1 done (1 complete" in out and "= 0.6250" in out, out
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
