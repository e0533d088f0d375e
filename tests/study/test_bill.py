"""The measured bill (issue 50 item 3): the calibration's parts on the tiny data, the size line's arithmetic against a
hand computation with injected numbers (no timing asserts), halving's share, the max_hours refusal naming both bills,
and ``--plan`` starting nothing."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
import yaml

from harness.driver import tiny_table
from study.bill import bill_of, calibrate_plan, check_budget, estimated_hours, priced, size_line
from study.intake.cells import parse_table
from study.search.calibration import ArmCalibration, Calibration
from trainables.schema.errors import SpecError

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
QUICK = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())


def _arm(family: str, batch_s: float) -> ArmCalibration:
    """startup 2 s; a search epoch 4 × batch_s + 0.25 + 1 s; a final epoch the same with twice the evaluation."""
    return ArmCalibration(
        family=family,
        device="cpu",
        data_s=1.0,
        build_s=1.0,
        batch_s=batch_s,
        epoch_end_s=0.25,
        eval_s=1.0,
        eval_samples=100,
        search_batches=4,
        models=1,
        final_batches=4,
        final_eval_samples=200,
    )


CALIBRATION = Calibration({"ms": _arm("ms", 0.5), "spl": _arm("spl", 1.0)}, wall_s=1.0)


def test_calibration_measures_startup_batches_and_evaluation_apart_on_the_tiny_data():
    table = parse_table(tiny_table("t_cal", epochs=2, batches_per_epoch=4, num_trials=2, seeds=1))
    cal = calibrate_plan(table)
    assert set(cal.arms) == {"ms", "spl"} and cal.device == "cpu"
    for arm in cal.arms.values():
        parts = (arm.data_s, arm.build_s, arm.batch_s, arm.eval_s)
        assert all(math.isfinite(x) and x > 0 for x in parts), arm
        assert math.isfinite(arm.epoch_end_s) and arm.epoch_end_s >= 0
        assert arm.search_batches == arm.final_batches == 4 and arm.models == 1  # batches_per_epoch, no folds
        assert arm.search_epoch_s == pytest.approx(4 * arm.batch_s + arm.epoch_end_s + arm.eval_s)


def test_the_size_line_is_priced_per_arm_from_the_calibration():
    table = parse_table(tiny_table("t_price", epochs=3, batches_per_epoch=4, num_trials=2, seeds=1))
    bill = bill_of(table, CALIBRATION)
    assert bill is not None and bill.measured
    # ms: search epoch 2 + 0.25 + 1 = 3.25 s, final epoch 2 + 0.25 + 2 = 4.25 s, start-up 2 s; spl: 5.25 s, 6.25 s.
    ms = 2 * (2 + 3 * 3.25) + 1 * (2 + 3 * 4.25)
    spl = 2 * (2 + 3 * 5.25) + 1 * (2 + 3 * 6.25)
    assert estimated_hours(table, False, bill) == pytest.approx((ms + spl) / 1 / 3600)
    line = size_line(table, bill)
    assert "≈ 0.0 h on 1 slots measured on cpu: ms 3.25 s, spl 5.25 s per model-epoch" in line
    assert "start-up 2, 2 s a trial" in line
    assert size_line(table, bill_of(table)) == size_line(table)  # no epoch_seconds: unpriced
    assumed = parse_table(tiny_table("t_a", 3, 4, 2, 1, search={"num_trials": 2, "epoch_seconds": 10}))
    # The assumed constant keeps the old arithmetic: (search trials × search cost + final runs) × epochs × s.
    assert estimated_hours(assumed) == pytest.approx((4 * 1 + 2) * 3 * 10 / 3600)
    assert "at 10 s per model-epoch (assumed" in size_line(assumed)


def _halving_quick(**search):
    raw = copy.deepcopy(QUICK)
    raw["search"] = {
        **raw["search"],
        "reproducible": False,
        "scheduler": {"type": "halving", "first_rung": 1, "reduction_factor": 2},
        **search,
    }
    return parse_table(raw, "quick.yaml")


def test_halving_prices_its_exact_share_in_the_size_line():
    table = _halving_quick()
    # 4 trials, 4 epochs, rungs 1 and 2 at η 2: 2 stop at 1, 1 at 2, 1 runs 4: 8 of 16 epochs.
    assert table.scheduled and table.search_share == pytest.approx(0.5)
    cal = Calibration({"ms": _arm("ms", 0.5), "bspml": _arm("bspml", 1.0)}, wall_s=1.0)
    bill = bill_of(table, cal)
    line = size_line(table, bill)
    assert "with halving per cell (first rung 1, η 2, hedge 0, rungs at epoch 1, 2 of 4): the search = 50%" in line
    search, final = priced(table).stage_hours(bill)
    slots = table.base.search.max_concurrent
    hand = sum(4 * (2 + 0.5 * 4 * e) for e in (3.25, 3.25, 5.25, 5.25)) / slots / 3600
    assert search == pytest.approx(hand)
    assert f"≈ {search + final:.1f} h" in line


def test_max_hours_refuses_on_the_measured_bill_naming_fifo_and_the_scheduled_one():
    slow = Calibration({"ms": _arm("ms", 500.0), "bspml": _arm("bspml", 500.0)}, wall_s=1.0)
    raw = copy.deepcopy(QUICK)
    raw["search"] = {**raw["search"], "max_hours": 1}
    fifo = parse_table(raw, "quick.yaml")
    with pytest.raises(SpecError) as e:
        check_budget(fifo, bill_of(fifo, slow))
    assert "measured on cpu" in str(e.value) and "FIFO ≈" in str(e.value) and "with halving (" in str(e.value)
    halving = _halving_quick(max_hours=1)
    with pytest.raises(SpecError) as e:
        check_budget(halving, bill_of(halving, slow))
    hours = estimated_hours(halving, True, bill_of(halving, slow))
    assert (
        f"FIFO ≈ {estimated_hours(halving, False, bill_of(halving, slow)):.1f} h; with halving ≈ {hours:.1f} h"
        in str(e.value)
    )
    fast = Calibration({"ms": _arm("ms", 0.01), "bspml": _arm("bspml", 0.01)}, wall_s=1.0)
    check_budget(fifo, bill_of(fifo, fast))  # under the limit: nothing said


def test_plan_prints_the_priced_size_line_and_starts_nothing(tmp_path, write_spec, monkeypatch, capsys):
    from study.run import main

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    spec = write_spec(tiny_table("t_plan", epochs=2, batches_per_epoch=2, num_trials=2, seeds=1))
    assert main([str(spec), "--plan", "--set", f"storage={tmp_path / 'runs'}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Table t_plan:") and "measured on cpu: ms " in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ray").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    assert main([str(tmp_path / "missing.yaml"), "--plan"]) == 2
