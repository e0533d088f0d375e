"""``load_plan`` on a run's directory: a study's gives the study's plan, a table's (``table.yaml`` beside its
``spec.yaml``) the table's plan again, found where the directory lies now (so ``dmlstudy status runs/<table>/`` shows
its cells, not its base as a study of none)."""

from __future__ import annotations

from pathlib import Path

import yaml

from study.intake.layout import StudyLayout
from study.intake.load import load_plan
from study.search.resume import written_text
from study.tracking.credentials import redacted_spec

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def _keep(plan, moved_to: Path) -> Path:
    """The files a driver keeps in the run's directory, as if it ran under ``moved_to`` (then was moved there)."""
    root = moved_to / plan.name
    root.mkdir(parents=True)
    (root / Path(StudyLayout.for_spec(plan.base).spec_file).name).write_text(
        yaml.safe_dump(redacted_spec(plan.base), sort_keys=False)
    )
    if plan.written:
        (root / Path(StudyLayout.for_spec(plan.base).table_file).name).write_bytes(written_text(plan))
    return root


def test_a_tables_directory_loads_as_the_table_and_a_studys_as_the_study(tmp_path):
    table = load_plan(SPACES / "table_glyphs_quick.yaml", ["search.num_trials=3"])
    again = load_plan(_keep(table, tmp_path / "elsewhere"))
    assert again.noun == "table" and [c.label for c in again.cells] == [c.label for c in table.cells]
    assert again.trials_per_cell == 3 and again.base.storage == str((tmp_path / "elsewhere").resolve())
    assert {k: v for k, v in again.written.items() if k != "storage"} == {
        k: v for k, v in table.written.items() if k != "storage"
    }
    study = load_plan(SPACES / "bspml_glyphs.yaml")
    found = load_plan(_keep(study, tmp_path / "studies"))
    assert found.noun == "study" and [c.label for c in found.cells] == ["bspml_glyphs"]
