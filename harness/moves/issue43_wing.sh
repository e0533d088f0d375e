#!/usr/bin/env bash
# Issue 43 item 1, the pure moves: the search engine gets a wing (study/search/, after Ray Tune's search/ and
# schedulers/), the final stage's statistics a small home (study/final/), and every importer and reference follows.
# No behaviour changes. Replayable from any checkout after merging other work: a step already done is skipped, and
# a file that a merge added is rewritten too (every tracked *.py, *.md, *.toml, *.sh, *.yaml).
#
#   bash harness/moves/issue43_wing.sh          (RUFF=path/to/ruff to sort the rewritten imports with another ruff)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

move() {  # move FROM TO: git mv, unless it is done already
  if [ -e "$1" ]; then mkdir -p "$(dirname "$2")"; git mv "$1" "$2"; fi
}

# 1. The wing and the home, each with a one-line face for now (importing a module of the wing must not import Ray
#    or Optuna through its __init__; what is where is written there by hand after the moves).
mkdir -p study/search study/final
[ -e study/search/__init__.py ] || printf '%s\n' \
  '"""The search engine: Ray Tune drives Optuna'"'"'s sampler, one study from its checks to its final stage."""' \
  > study/search/__init__.py
[ -e study/final/__init__.py ] || printf '%s\n' \
  '"""The final stage'"'"'s statistics: the one best rule, the final stage'"'"'s summary, the one confidence interval."""' \
  > study/final/__init__.py

# 2. The moves.
move study/search_space.py study/search/space.py
move study/ordered_search.py study/search/ordered_sampler.py
move study/stage_tuners.py study/search/tuners.py
move study/tuner.py study/search/driver.py
move study/resume.py study/search/resume.py
move study/environment.py study/search/environment.py
move study/bookkeeping.py study/search/study_search.py
move study/final_stage.py study/final/stage.py
move study/best.py study/final/best.py
move study/intervals.py study/final/intervals.py

# 3. bookkeeping.py held two Ray extension points: PersistentASHA goes to a module of its own.
python3 - <<'EOF'
from pathlib import Path

src = Path("study/search/study_search.py")
text = src.read_text()
if "class PersistentASHA" in text:
    head, cls = text.split("\n\nclass PersistentASHA", 1)
    def swap(old: str, new: str) -> None:
        global head
        assert old in head, f"study/search/study_search.py: expected {old!r}"
        head = head.replace(old, new, 1)
    start, end = head.index('"""'), head.index('"""', 3) + 3
    head = head[:start] + (
        '"""The study\'s Ray searcher, :class:`StudySearch`: what Ray Tune\'s ``OptunaSearch`` does not keep for us,\n'
        "Optuna trial states that match Ray's decisions, asks in an order timing cannot change\n"
        "(:mod:`study.search.ordered_sampler`), and the Optuna trials a killed driver left behind. ASHA's rungs across a\n"
        "driver restart are :mod:`study.search.persistent_asha`; the Optuna↔MLflow link is\n"
        ":mod:`study.tracking.optuna_link`. Used by :mod:`study.search.tuners` and :mod:`study.table.search`.\"\"\""
    ) + head[end:]
    swap("import pickle\n", "")
    swap("from ray.tune.schedulers import ASHAScheduler\n", "")
    swap("    asha_trial_info,\n", "")
    swap("from study.runtime.storage import read_bytes, write_bytes\n", "")
    swap('__all__ = ["StudySearch", "PersistentASHA"]', '__all__ = ["StudySearch"]')
    src.write_text(head.rstrip("\n") + "\n")
    Path("study/search/persistent_asha.py").write_text(
        '"""ASHA whose rungs survive a driver restart: Ray Tune restores a scheduler from the pickle taken at the\n'
        'study\'s start, so this one keeps its state in the study directory. Used by :mod:`study.search.tuners`."""\n\n'
        "from __future__ import annotations\n\n"
        "import pickle\n"
        "from typing import Any\n\n"
        "from ray.tune.schedulers import ASHAScheduler\n\n"
        "from study.runtime.compat import asha_trial_info\n"
        "from study.runtime.storage import read_bytes, write_bytes\n\n"
        '__all__ = ["PersistentASHA"]\n\n\n'
        "class PersistentASHA" + cls
    )
EOF

# 4. Every importer and reference, dotted and as a path.
python3 - <<'EOF'
import re
import subprocess
from pathlib import Path

MOVES = {  # old module -> new module
    "study.search_space": "study.search.space",
    "study.ordered_search": "study.search.ordered_sampler",
    "study.stage_tuners": "study.search.tuners",
    "study.tuner": "study.search.driver",
    "study.resume": "study.search.resume",
    "study.environment": "study.search.environment",
    "study.final_stage": "study.final.stage",
    "study.best": "study.final.best",
    "study.intervals": "study.final.intervals",
}
RULES: list[tuple[str, str]] = [
    (r"from study\.bookkeeping import PersistentASHA, StudySearch",
     "from study.search.persistent_asha import PersistentASHA\nfrom study.search.study_search import StudySearch"),
    (r"from study\.bookkeeping import PersistentASHA\b", "from study.search.persistent_asha import PersistentASHA"),
    (r"(?<![\w.])study\.bookkeeping\.PersistentASHA\b", "study.search.persistent_asha.PersistentASHA"),
    (r"(?<![\w.])study\.bookkeeping\b", "study.search.study_search"),
    (r"(?<![\w/])study/bookkeeping\.py", "study/search/study_search.py"),
    (r"from study import final_stage\b", "from study.final import stage as final_stage"),
]
for old, new in MOVES.items():
    RULES.append((r"(?<![\w.])" + re.escape(old) + r"(?![\w])", new))
    RULES.append((r"(?<![\w/])" + re.escape(old.replace(".", "/")) + r"\.py", new.replace(".", "/") + ".py"))
SELF = "harness/moves/issue43_wing.sh"
# These name the old modules on purpose (old pickles resolve through them): never rewritten.
OLD_NAMES = {"study/search/old_names.py", "tests/study/test_old_names.py"}
files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.toml", "*.sh", "*.yaml", "*.yml", "*.cfg"],
                       capture_output=True, text=True, check=True).stdout.split()
for name in files:
    path = Path(name)
    if name == SELF or name.startswith("harness/moves/") or name in OLD_NAMES or not path.is_file():
        continue
    text = path.read_text()
    new = text
    for pattern, repl in RULES:
        new = re.sub(pattern, repl, new)
    if new != text:
        path.write_text(new)
        print("rewrote", name)
EOF

# 5. README's floor plan of study/ (skipped when a merge changed those lines: then edit them by hand).
python3 - <<'EOF'
from pathlib import Path

readme = Path("docs/architecture.md") if Path("docs/architecture.md").exists() else Path("README.md")
old = """  loading.py validation.py layout.py resume.py search_space.py tuner.py stage_tuners.py final_stage.py best.py
  intervals.py bookkeeping.py progress.py console.py
  ordered_search.py    trial i sampled from a history fixed by i (search.reproducible)
  environment.py       what decides a study's numerics, as env.* tags on the parent run
"""
new = """  console.py progress.py                  what the terminal shows while a study runs (the quiet log, the live table)
  loading.py validation.py layout.py      the spec's intake and where a study's files live
  search/              the engine (after Ray Tune's search/ and schedulers/): driver.py (run_study), resume.py,
                       tuners.py (each stage's Tuner), space.py, ordered_sampler.py (trial i sampled from a history
                       fixed by i), study_search.py (StudySearch), persistent_asha.py (PersistentASHA), environment.py
                       (what decides a study's numerics, as env.* tags on the parent run)
  final/               the final stage's statistics: best.py (the one best rule), stage.py, intervals.py
"""
text = readme.read_text()
if old in text:
    readme.write_text(text.replace(old, new))
EOF

# 6. Import blocks sorted again, and lines the longer names pushed past the limit wrapped.
git add -A study
RUFF="${RUFF:-ruff}"
"$RUFF" check --select I --fix -q . || true
"$RUFF" format -q .
