"""Every shipped spec under ``search_spaces/`` plans: ``--plan`` exits 0 and prints its size line, or 2 with one line
where the spec needs data that is absent. ``--plan`` prices its bill by a calibration that trains each arm (10-20 s a
spec); here the calibration is replaced by a constant price, after the check that decides whether a calibration can
build the arm's trial at all: its family takes the params the trial is built with (a family-searching study holds
every family's params, and a trial keeps its own family's)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from study.intake.load import load_plan
from study.search.calibration import ArmCalibration, Calibration, trial_of_family
from trainables.families.registry import get_rules
from trainables.schema.spec import StudySpec

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
SHIPPED = sorted(p.relative_to(SPACES).as_posix() for p in SPACES.rglob("*.yaml"))


def _assumed(specs: Mapping[str, StudySpec]) -> Calibration:
    """A calibration at 1 s per batch, evaluation and start-up, once each arm's trial spec builds its family's params
    (what the real calibration builds first; a wrong param is the family's ``ValueError``, a traceback)."""
    arms = {}
    for arm, spec in specs.items():
        trial = trial_of_family(spec)
        get_rules(trial.family).parse_params(trial.params)
        arms[arm] = ArmCalibration(trial.family, "cpu", 1.0, 1.0, 1.0, 0.0, 1.0, 1, 1, 1, 1, 1)
    return Calibration(arms, wall_s=0.0)


def test_the_shipped_specs_are_all_found():
    assert len(SHIPPED) > 40 and "robust_glyphs.yaml" in SHIPPED and "noise_grid_glyphs/ms.yaml" in SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_plans(name, tmp_path, monkeypatch, capsys):
    from study.commands.run import main

    monkeypatch.setattr("study.bill.calibrate", _assumed)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    code = main([str(SPACES / name), "--plan", "--set", f"storage={tmp_path / 'runs'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = load_plan(SPACES / name)
    first = out.splitlines()[0]
    assert first.startswith(f"{plan.noun.capitalize()} {plan.name}: ") and f"= {plan.final_runs} final runs" in first
    assert "measured on cpu" in first and not (tmp_path / "runs").exists()


def test_a_spec_whose_data_is_absent_plans_to_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from study.commands.run import main

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    code = main([str(SPACES / "ms_cub.yaml"), "--plan", "--set", f"dataset.root={tmp_path / 'nothing'}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("error: dataset 'cub200': no such directory") and err.count("\n") == 1
