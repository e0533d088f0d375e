"""``dmlstudy``: the console script dispatches to each module's own command line, under one name.

A study run through ``dmlstudy run``, then read by ``dmlstudy status`` and ``dmlstudy dashboard`` by its directory, is
in ``tests/study/test_run.py`` (the end-to-end study); here every command's help and one real, cheap call each.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from study.commands import cli
from tests.dashboards.compare.test_compare import HONEST, make_study

REPO = Path(__file__).resolve().parents[2]


def _dmlstudy(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``dmlstudy ARGS`` as the console script runs it (``study.commands.cli:entry``), importing this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", "from study.commands.cli import entry; entry()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_console_script_is_declared_and_lists_every_command(tmp_path):
    pyproject = (REPO / "pyproject.toml").read_text()  # (tomllib is 3.11+; the package supports 3.10)
    assert re.search(r'^\[project\.scripts\]\ndmlstudy = "study\.commands\.cli:entry"\n\n', pyproject, re.MULTILINE)
    proc = _dmlstudy("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: dmlstudy [-h] COMMAND ...")
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == [
        "run",
        "status",
        "fetch",
        "weights",
        "export-csv",
        "dashboard",
        "compare",
        "mlflow-server",
        "slurm",
        "kuberay",
        "up",
        "down",
    ]
    bad = _dmlstudy("bogus", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("dmlstudy: error: argument COMMAND")
    # The run command leaves through study.run's fast exit: its exit code survives it.
    missing = _dmlstudy("run", "nowhere.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nowhere.yaml" in missing.stderr


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_has_its_help_under_the_one_name(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: dmlstudy {command} ")


def test_the_data_commands_fail_in_one_line_without_the_network(tmp_path, capsys):
    assert cli.main(["export-csv", "digits", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: export-csv digits: 'digits' is not a built-in on-disk dataset\n"
    assert cli.main(["weights", "vgg99"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: weights vgg99: ") and err.count("\n") == 1
    assert cli.main(["fetch", "inshop", "--root", str(tmp_path)]) == 2
    assert "its host needs a login" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_dashboard_and_compare_name_a_study_the_same_way(tmp_path, capsys):
    study_dir = make_study(tmp_path, "named", HONEST)
    capsys.readouterr()
    # compare: the study directory; dashboard: the same directory, or the old --experiment/--tracking-uri pair.
    assert cli.main(["compare", str(study_dir), "--reference", "ms", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("family,noise_kind,")
    assert cli.main(["dashboard", str(study_dir), "--no-log", "--out", str(tmp_path / "a")]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page == (tmp_path / "a" / "index.html").resolve() and "named" in page.read_text()
    uri = f"sqlite:///{study_dir / 'mlflow.db'}"
    old = ["dashboard", "--experiment", "named", "--tracking-uri", uri, "--no-log", "--out", str(tmp_path / "b")]
    assert cli.main(old) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()
    # A moved study directory is still found: the directory names the study, not the spec's storage.
    moved = tmp_path / "elsewhere" / "named"
    moved.parent.mkdir()
    study_dir.rename(moved)
    assert cli.main(["compare", str(moved), "--reference", "ms", "--format", "csv"]) == 0
    capsys.readouterr()
    # Bad names: one line, exit 2 (from argparse or from the command).
    for args in (
        ["dashboard", str(tmp_path / "nowhere")],
        ["dashboard"],
        ["dashboard", str(moved), "--experiment", "named"],
        ["compare", str(tmp_path), "--reference", "ms"],
    ):
        assert _code(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err, (args, err)


def _code(args: list[str]) -> int | str | None:
    try:
        return cli.main(args)
    except SystemExit as stop:
        return stop.code
