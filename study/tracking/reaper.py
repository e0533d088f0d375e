"""``python -m study.tracking.reaper PGID``: end a process group once this process's parent is gone.

It waits for EOF on stdin (its parent holds the pipe's other end, and the kernel closes it however the parent ends,
SIGKILL included), then SIGTERMs the group and SIGKILLs what is left after :data:`GRACE_S`. The local MLflow server
(:mod:`study.tracking.server`) starts one beside ``mlflow server``: ``PR_SET_PDEATHSIG`` would reach ``mlflow server``
alone, which then dies and leaves its uvicorn worker and job runner serving. Standard library only, so it starts
fast and imports nothing of the study.
"""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["GRACE_S", "reap", "main"]

#: Seconds the group gets between SIGTERM and SIGKILL.
GRACE_S = 20.0


def reap(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM process group ``pgid``, wait up to ``grace_s`` for it to end, then SIGKILL what is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            os.killpg(pgid, 0)  # ProcessLookupError once the whole group is gone
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    (pgid,) = argv if argv is not None else sys.argv[1:]
    sys.stdin.buffer.read()  # returns at EOF: the parent has ended (or closed its end on purpose)
    reap(int(pgid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
