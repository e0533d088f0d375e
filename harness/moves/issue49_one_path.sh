#!/usr/bin/env bash
# Issue 49 item 1, the pure moves: the table's dispatching searcher and its per-cell scheduler move down into the
# search engine's wing (a study is a table of one cell, so the one driver builds both), under names that no longer
# say "table": study/table/search.py (TableSearch) -> study/search/cell_search.py (CellSearch), study/table/scheduler.py
# (CellASHA) -> study/search/cell_asha.py. Every importer and reference follows; a table started before the move still
# resumes (study.search.old_names resolves the old module names its pickles hold). No behaviour changes here: the
# one path itself is the commits after this script's. Replayable from any checkout after merging other work: a step
# already done is skipped, and a file a merge added is rewritten too (every tracked *.py, *.md, *.toml, *.sh, *.yaml).
#
#   bash harness/moves/issue49_one_path.sh          (RUFF=path/to/ruff to sort the rewritten imports with another ruff)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

move() {  # move FROM TO: git mv, unless it is done already
  if [ -e "$1" ]; then mkdir -p "$(dirname "$2")"; git mv "$1" "$2"; fi
}

# 1. The moves.
move study/table/search.py study/search/cell_search.py
move study/table/scheduler.py study/search/cell_asha.py

# 2. Every importer and reference, dotted and as a path; the class name that said "table".
python3 - <<'EOF'
import re
import subprocess
from pathlib import Path

MOVES = {"study.table.search": "study.search.cell_search", "study.table.scheduler": "study.search.cell_asha"}
RULES: list[tuple[str, str]] = [(r"\bTableSearch\b", "CellSearch")]
for old, new in MOVES.items():
    RULES.append((r"(?<![\w.])" + re.escape(old) + r"(?![\w])", new))
    RULES.append((r"(?<![\w/])" + re.escape(old.replace(".", "/")) + r"\.py", new.replace(".", "/") + ".py"))
SELF = "harness/moves/issue49_one_path.sh"
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

# 3. The old names a table's pickles hold (class and modules), resolved where they live now.
python3 - <<'EOF'
from pathlib import Path

p = Path("study/search/old_names.py")
text = p.read_text()
entry = '    "study.tuner": ("study.search.driver",),\n'
add = (
    '    "study.table.search": ("study.search.cell_search",),\n'
    '    "study.table.scheduler": ("study.search.cell_asha",),\n'
)
if add not in text:
    assert entry in text, "study/search/old_names.py: expected the MOVED table"
    p.write_text(text.replace(entry, entry + add, 1))
p = Path("study/search/cell_search.py")
text = p.read_text()
alias = "\n\n#: The class's name before issue 49 (a table's pickles name it so: study.search.old_names).\nTableSearch = CellSearch\n"
if "TableSearch = CellSearch" not in text:
    p.write_text(text.rstrip("\n") + "\n" + alias)
EOF

# 4. Import blocks sorted again, and lines the longer names pushed past the limit wrapped.
git add -A study tests
RUFF="${RUFF:-ruff}"
"$RUFF" check --select I --fix -q . || true
"$RUFF" format -q .
