"""``dmlstudy COMMAND ...``: the one console command (``[project.scripts]``), a dispatcher over the modules' own
command lines, which stay as they are (``python -m study.run SPEC`` is ``dmlstudy run SPEC``).

Every command names a study the same way: by its spec file or by its directory (``storage/<name>/``); ``run``
takes the spec it starts. Each command keeps its own options, help (``dmlstudy COMMAND --help``) and exit codes
(0 done, 2 bad input with one line on stderr, 1 a study that failed). It sits in the top layer with ``study.run``:
it imports the dashboards' command lines.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from study.arguments import ArgumentParser
from study.commands.run import _exit

__all__ = ["COMMANDS", "main"]

#: command → (module whose ``main(argv, prog)`` runs it, arguments put before the user's, one-line help).
COMMANDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "run": ("study.run", (), "run a study from its YAML spec (--resume continues it, --status shows it)"),
    "status": ("study.status", (), "show where a study stands (spec file or study directory); starts nothing"),
    "fetch": ("study.data.__main__", ("fetch",), "download, verify and extract a benchmark dataset"),
    "weights": ("study.data.__main__", ("weights",), "download torchvision's ImageNet weights into the torch cache"),
    "export-csv": ("study.data.__main__", ("export-csv",), "write a dataset as open-metric-learning's CSV"),
    "dashboard": ("dashboards.build", (), "build the HTML dashboard of studies (spec files or study directories)"),
    "compare": ("dashboards.compare.cli", (), "family x noise comparison tables of studies' final stages"),
    "mlflow-server": ("study.commands.mlflow_server", (), "serve a directory's MLflow store over HTTP"),
    "slurm": (
        "study.deploy.slurm.__main__",
        (),
        "submit a study or table as a Slurm job that requeues itself at its limit",
    ),
    "kuberay": (
        "study.deploy.kuberay.__main__",
        (),
        "write a KubeRay RayJob manifest that runs the study on Kubernetes",
    ),
    "up": (
        "study.commands.head",
        ("up",),
        "start a warm local Ray head for repeated studies (loopback, token); studies attach with --address warm",
    ),
    "down": ("study.commands.head", ("down",), "stop the warm local Ray head that `dmlstudy up` started"),
}


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="dmlstudy",
        description="Hyperparameter studies of deep-metric-learning losses under label noise.",
        epilog="A STUDY is its spec file or its directory (storage/<name>/). `dmlstudy COMMAND --help` for a "
        "command's options.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_, _, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:  # --help, nothing, or an unknown command: argparse says so
        parser = _parser()
        parser.parse_args(argv[:1])
        parser.print_usage(sys.stderr)
        return 2
    module, before, _ = COMMANDS[argv[0]]
    prog = "dmlstudy" if before else f"dmlstudy {argv[0]}"  # study.data names its own subcommand
    code: int = importlib.import_module(module).main([*before, *argv[1:]], prog=prog)
    return code


def entry() -> NoReturn:
    """The console script: ``dmlstudy run`` leaves the way ``python -m study.run`` does (no slow teardown)."""
    code = main()
    if sys.argv[1:2] == ["run"]:
        _exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
