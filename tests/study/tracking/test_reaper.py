"""``python -m study.tracking.reaper``: once its stdin closes (its parent gone), the whole process group ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def test_the_group_ends_when_the_parents_pipe_closes():
    group = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    reaper = subprocess.Popen(
        [sys.executable, "-m", "study.tracking.reaper", str(group.pid)], stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        time.sleep(0.5)
        assert group.poll() is None and reaper.poll() is None  # nothing happens while the pipe is open
        reaper.stdin.close()  # type: ignore[union-attr]
        assert group.wait(timeout=30) is not None  # SIGTERMed (and reaped here, so no zombie keeps the group)
        assert reaper.wait(timeout=30) == 0
        try:
            os.killpg(group.pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, "a process of the group outlived the reaper"
    finally:
        for p in (group, reaper):
            if p.poll() is None:
                p.kill()
