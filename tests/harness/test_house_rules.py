"""The house's rules beside the layering (harness.house_rules, run by ``python -m harness.layering``): no function over
60 lines, no unexplained function-level import of study's modules; the real tree passes, planted violations fail."""

from __future__ import annotations

from pathlib import Path

from harness.house_rules import MAX_FUNCTION_LINES, long_functions, unexplained_imports


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function ``lines`` long, ``def`` line to last line."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_the_tree_keeps_the_house_rules():
    assert long_functions() == []
    assert unexplained_imports() == []


def test_a_function_over_the_limit_fails_wherever_it_stands(tmp_path):
    limit = MAX_FUNCTION_LINES
    _write(
        tmp_path,
        {
            "study/ok.py": _function("fits", limit),
            "trainables/long.py": _function("too_long", limit + 1),
            "dashboards/panels/cls.py": "class Panel:\n" + _function("build", limit + 5, "    "),
            "study/deploy/templates/script.py": _function("generated", limit + 10),  # not measured
            "study/run.py": _function("_run_table", limit + 3),
        },
    )
    assert long_functions(tmp_path) == [
        f"study/run.py:1 _run_table is {limit + 3} lines (more than {limit})",
        f"trainables/long.py:1 too_long is {limit + 1} lines (more than {limit})",
        f"dashboards/panels/cls.py:2 Panel.build is {limit + 5} lines (more than {limit})",
    ]


def test_a_function_level_import_of_study_says_why(tmp_path):
    _write(
        tmp_path,
        {
            "study/cli.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from study.run import Run\n"
                "def entry():\n"
                "    from study.run import _exit\n"  # unexplained
                "    from study.intake.layout import L  # defers Optuna\n"
                "    # defers Ray: --status must not import it\n"
                "    from study.search.driver import run_study\n"
                "    from trainables.loop import train\n"  # another package's: its name says what it defers
                "    import json\n"
            ),
            "study/status.py": "def main():\n    from study.cell_status import show\n",
        },
    )
    assert unexplained_imports(tmp_path) == [
        "study/cli.py:5 imports study.run inside a function without a comment saying why",
        "study/status.py:2 imports study.cell_status inside a function without a comment saying why",
    ]
