"""Every ``docs/<page>`` the code, the specs, the tests and the docs cite exists: the notebook moved under
``docs/notebook/`` and its hundred citations moved with it; a page renamed or moved again without its citations
fails here, as a broken link between pages fails ``mkdocs build --strict``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: A repository-relative citation of a docs file: ``docs/notebook/tables.md``, ``docs/guide/spec.md``, an image.
CITATION = re.compile(r"(?<![\w./-])docs/[\w./-]+?\.(?:md|png)\b")

TEXT = (".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".cfg", ".txt")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / f for f in out.split() if f.endswith(TEXT)]


def test_every_cited_docs_file_exists():
    missing = set()
    cited = 0
    for path in _tracked():
        for found in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited += 1
            if not (REPO / found).is_file():
                missing.add(f"{path.relative_to(REPO)}: {found}")
    assert cited > 100  # the notebook's citations are read, not skipped
    assert not missing, sorted(missing)
