#!/usr/bin/env bash
# Issue 49 item 5: tests/study/ mirrors the wings of study/ (search/, table/, deploy/, tracking/, runtime/, final/,
# data/); the tests of the command lines and the intake (run, cli, status, spec, validation, the end-to-end studies)
# stay in tests/study/. A moved test that finds the repository by its own path goes one level deeper; every reference
# to a moved test follows (docstrings, docs). Replayable from any checkout after merging other work: a move already done
# is skipped, and a file a merge added is rewritten too (every tracked *.py, *.md, *.toml, *.sh, *.yaml).
#
#   bash harness/moves/issue49_tests.sh          (RUFF=path/to/ruff to sort the rewritten imports with another ruff)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

python3 - <<'EOF'
import re
import subprocess
from pathlib import Path

WINGS = {
    "search": ["test_search_space", "test_ordered_search", "test_sampler_settings", "test_grid_and_family_search",
               "test_halving", "test_old_names", "test_table_search", "test_table_scheduler"],
    "table": ["test_table_spec", "test_table_e2e", "test_table_failures", "test_table_resume", "test_table_s3",
              "test_table_asha_resume", "test_bill"],
    "deploy": ["test_slurm", "test_slurm_faults", "test_slurm_job", "test_slurm_script", "test_kuberay",
               "test_deploy_render"],
    "tracking": ["test_outage", "test_outage_e2e", "test_outage_moments", "test_mlflow_server", "test_reaper",
                 "test_exactly_once", "test_preflight", "test_url_secrets"],
    "runtime": ["test_cluster", "test_cluster_connect", "test_compat", "test_stop_rules", "test_stop_signal",
                "test_loopback", "test_ray_cli_cluster", "test_store_errors", "test_full_disk", "test_deployment"],
    "final": ["test_best"],
    "data": ["test_data_fetch", "test_data_weights"],
}
#: Fixture folders that go with their tests.
FIXTURES = {"tests/study/data/kuberay": "tests/study/deploy/data/kuberay"}


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


moved: dict[str, str] = {}
for old, new in FIXTURES.items():
    if Path(old).exists():
        Path(new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
    moved[old + "/"] = new + "/"
for wing, names in WINGS.items():
    folder = Path("tests/study") / wing
    folder.mkdir(parents=True, exist_ok=True)
    init = folder / "__init__.py"
    if not init.exists():
        init.write_text("")
        git("add", str(init))
    for name in names:
        old, new = Path(f"tests/study/{name}.py"), folder / f"{name}.py"
        if old.exists():
            git("mv", str(old), str(new))
        moved[str(old)] = str(new)
        if new.exists():  # one level deeper: the repository is one parent further up
            text = new.read_text()
            fixed = text.replace("Path(__file__).resolve().parents[2]", "Path(__file__).resolve().parents[3]")
            if fixed != text:
                new.write_text(fixed)

files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.toml", "*.sh", "*.yaml", "*.yml", "*.cfg"],
                       capture_output=True, text=True, check=True).stdout.split()
rules = [(re.compile(r"(?<![\w/])" + re.escape(old) + (r"(?![\w])" if not old.endswith("/") else "")), new)
         for old, new in sorted(moved.items(), key=lambda kv: -len(kv[0]))]
for name in files:
    path = Path(name)
    if name.startswith("harness/moves/") or not path.is_file():
        continue
    text = path.read_text()
    new = text
    for pattern, repl in rules:
        new = pattern.sub(repl, new)
    # dotted: from tests.study.test_x import ...
    for old, dest in moved.items():
        if old.endswith(".py"):
            new = re.sub(r"\btests\.study\." + Path(old).stem + r"\b", dest[:-3].replace("/", "."), new)
    if new != text:
        path.write_text(new)
        print("rewrote", name)
EOF

git add -A tests
RUFF="${RUFF:-ruff}"
"$RUFF" check --select I --fix -q . || true
"$RUFF" format -q .
