"""Every guide's example is a real command, run here, and its output is the one the guide shows.

The convention, for anyone writing a guide in ``docs/guide/``:

- The checked example is a fenced block whose language is ``console``. In it a line starting with ``$ `` is a
  command (one line; ``bash`` runs it), and every other non-empty line is output the command must print, in that
  order, on stdout or stderr: each such line must be found inside one output line, later than the previous one's,
  with ``…`` standing for any text (paths, seconds, scores). Lines the guide leaves out are not checked.
- The command must exit 0, unless the HTML comment ``<!-- exit N -->`` (invisible on the site) is the line just
  before the block: then it must exit N.
- Other blocks (``yaml``, plain fences) are illustrations and are not run. Every guide has at least one
  ``console`` block (``test_every_guide_has_a_checked_example``).

Commands run in a fresh directory holding a link to the repository's ``search_spaces/`` (so ``runs/`` lands there),
with the repository on ``PYTHONPATH`` and this Python's ``bin`` first on ``PATH`` (``dmlstudy`` is its console
script). Most examples take a second or two (a validation path, ``--dry-run``, ``--help``); ``study.md``'s
``--plan`` trains a few timed batches (about 8 s on 2 cores). The one real study is the quickstart's (2 trials of 1
epoch on digits, about 45 s with Ray's start), marked ``e2e``; ``results.md``'s example reads that study's
directory, so the two guides are checked by one test, in order.

What is not run here: a real Slurm job (``tests/study/deploy/test_slurm.py`` runs one on a two-node Slurm cluster;
``slurm.md`` is checked by ``--dry-run``, which renders the same script), a real KubeRay cluster (none is
reachable; ``kuberay.md`` writes the manifest, which ``tests/study/deploy/test_kuberay.py`` checks against the
RayJob CRD), and a cluster with its servers (``cluster.md`` is checked by the pre-flight's line for a PostgreSQL
that is not there; ``tests/study/runtime/test_deployment.py`` runs ``ray start`` nodes with PostgreSQL, an MLflow
server and an S3 emulator).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "docs" / "guide"

#: Guides whose examples are checked together, in this order, in one directory (``results.md`` reads the study the
#: quickstart ran): the file's one real study.
WITH_A_STUDY = ("quickstart", "results")

_FENCE = re.compile(r"^(?:<!-- exit (?P<exit>\d+) -->\n)?```console\n(?P<body>.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    guide: str
    command: str
    expected: tuple[str, ...]
    exit_code: int


def examples(guide: str) -> list[Example]:
    """The ``console`` blocks of ``docs/guide/<guide>.md``, one :class:`Example` per ``$`` command."""
    found: list[Example] = []
    for match in _FENCE.finditer((GUIDES / f"{guide}.md").read_text()):
        command: str | None = None
        expected: list[str] = []
        for line in match["body"].splitlines():
            if line.startswith("$ "):
                if command is not None:
                    found.append(Example(guide, command, tuple(expected), 0))
                command, expected = line[2:], []
            elif line.strip():
                expected.append(line.strip())
        assert command is not None, f"docs/guide/{guide}.md: a console block without a '$ ' command"
        found.append(Example(guide, command, tuple(expected), int(match["exit"] or 0)))
    return found


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split("…")))


def check(example: Example, cwd: Path) -> None:
    """Run ``example`` in ``cwd``; its exit code and its expected lines, in order, or a message quoting both."""
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
        "RAY_TMPDIR": ray_tmp,
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
        # cli.md's `dmlstudy up` / `down`: the example's own warm head, never one the user keeps running.
        "DMLSTUDY_HEAD_DIR": str(cwd / "warm_head"),
    }
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            ["bash", "-c", example.command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    output = (done.stdout + done.stderr).splitlines()
    where = f"docs/guide/{example.guide}.md: $ {example.command}\n--- output (exit {done.returncode}) ---\n"
    assert done.returncode == example.exit_code, where + "\n".join(output[-40:])
    at = 0
    for line in example.expected:
        pattern = _pattern(line)
        hits = [i for i in range(at, len(output)) if pattern.search(output[i])]
        assert hits, where + "\n".join(output[-40:]) + f"\n--- not found after line {at}: {line!r}"
        at = hits[0] + 1


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "search_spaces").symlink_to(REPO / "search_spaces")
    return tmp_path


def all_guides() -> list[str]:
    return sorted(path.stem for path in GUIDES.glob("*.md"))


def test_every_guide_has_a_checked_example() -> None:
    assert all_guides(), "no guides in docs/guide/"
    for guide in all_guides():
        assert examples(guide), f"docs/guide/{guide}.md has no ```console example (see this file's docstring)"


@pytest.mark.parametrize("guide", [g for g in all_guides() if g not in WITH_A_STUDY])
def test_guide_example(guide: str, workdir: Path) -> None:
    for example in examples(guide):
        check(example, workdir)


@pytest.mark.e2e
def test_quickstart_then_results(workdir: Path) -> None:
    """The quickstart's study (the file's one real study), then the results guide reading its directory."""
    for guide in WITH_A_STUDY:
        for example in examples(guide):
            check(example, workdir)


def test_docs_build_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (about 3 s): a broken link, anchor or nav entry in docs/ fails it. Not ``-q``: in
    mkdocs 1.6 ``--quiet`` hides the warnings that ``--strict`` counts, and a broken link then passes."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra: pip install -e '.[dev]'")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is in the dev extra: pip install -e '.[dev]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
