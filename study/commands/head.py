"""``dmlstudy up`` / ``dmlstudy down`` (``python -m study.commands.head up|down``): start or stop the warm local Ray head that
repeated studies attach to with ``--address warm`` (the engine: :mod:`study.runtime.warm_head`)."""

from __future__ import annotations

import argparse
import sys

from study.runtime.warm_head import ATTACH_LINE, HEAD_DIR_ENV, head_dir, running, start_head, stop_head
from trainables.schema.errors import StudyError

__all__ = ["main"]


def _up(args: argparse.Namespace) -> int:
    head, already = start_head(head_dir())
    if already:
        print(f"a warm Ray head already runs (pid {head.pid}, at {head.address}); stop it with: dmlstudy down")
    else:
        print(
            f"started a warm Ray head (pid {head.pid}, at {head.address}, loopback only; its token in "
            f"{head.token_file}); stop it with: dmlstudy down"
        )
    print(ATTACH_LINE, flush=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    directory = head_dir()
    was_running = running(directory) is not None
    state = stop_head(directory)
    if state is None or not was_running:
        print(f"no warm Ray head runs (state in {directory})")
    else:
        print(f"stopped the warm Ray head (pid {state.pid}, at {state.address})")
    return 0


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="A warm local Ray head for repeated studies.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "up",
        help="start one local Ray head (loopback only, token auth) for studies to attach to; prints --address warm",
        description=f"Start a warm local Ray head; its state in ${HEAD_DIR_ENV} (default {head_dir()}). "
        "Studies attach with --address warm. When one already runs, says so.",
    )
    sub.add_parser("down", help="stop the warm Ray head (only its own processes)", description="Stop the warm head.")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m study.commands.head") -> int:
    """``up`` / ``down``. Exit 0, or 2 with one line."""
    args = _parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return _up(args) if args.command == "up" else _down(args)
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
