"""The benchmark suite stays runnable: its component sections at smoke sizes, its CLI, and the GPU script's
one-line exit without CUDA. (The study section starts Ray; ``python -m benchmarks --quick`` runs it by hand.)"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import components, study_overhead
from benchmarks.__main__ import main as suite_main


def test_components_measure_at_smoke_sizes() -> None:
    rows = [
        *components.evaluation([300], 16, 10, repeats=1),
        *components.losses(16, 16, 4, repeats=1, names=["ms", "bspml"]),
        *components.bspml_growth([100, 200], 16, 20, repeats=1),
    ]
    assert [r[0] for r in rows][:3] == [
        "eval N=300 x 16: ours (R@k, MAP@R, NMI)",
        "eval N=300 x 16: faiss floor (kNN + k-means)",
        "eval N=300 x 16: PML AccuracyCalculator",
    ]
    assert all(math.isfinite(r[1]) and r[2] <= r[1] <= r[3] for r in rows)
    assert "PML/ours" in rows[3][4] and "PML/ours" in rows[5][4]  # ms and bspml have PML counterparts
    assert "O(N^2)" in rows[-1][4]


def test_suite_cli_prints_a_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert suite_main(["--quick", "--skip", "study", "--skip", "components"]) == 0
    out = capsys.readouterr().out
    assert "benchmarks:" in out and "command: python -m benchmarks --quick" in out


def test_study_overrides_name_the_4x4_study() -> None:
    assert study_overhead.study_overrides(4, 4, 2) == [
        "search.num_trials=4",
        "train.epochs=4",
        "search.max_concurrent=2",
        "final.seeds=0",
        "validation.kind=none",
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_gpu_script_exits_cleanly_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import gpu

    assert gpu.main([]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "benchmarks.gpu: no CUDA device (torch.cuda.is_available() is False); nothing measured"
    ]


def test_driver_timeline_phases_from_events() -> None:
    """The timeline's arithmetic on a hand-made event list: two trials of two epochs, one at a time."""
    from benchmarks.driver_timeline import _phases

    t0 = 100.0
    marks = {
        "child:imports:end": 2.0,
        "load_spec:begin": 2.0,
        "load_spec:end": 2.5,
        "run_study:begin": 2.5,
        "ray_init:begin": 2.6,
        "ray_init:end": 5.6,
        "mlflow_store:begin": 5.6,
        "mlflow_store:end": 6.6,
        "build_tuner:begin": 6.6,
        "build_tuner:end": 7.0,
        "summarize:begin": 20.1,
        "ray_shutdown:begin": 20.2,
        "ray_shutdown:end": 21.2,
        "child:main:end": 21.3,
    }
    events = [(k, t0 + v) for k, v in marks.items()]
    # trial a: starts at 11, results at 13 and 14 (1 s of work each), completes at 14; b: 14.5 -> 16, 17, 17.
    events += [("on_trial_start:a", t0 + 11), ("on_trial_result:a", t0 + 13), ("work:a", 1.0)]
    events += [("on_trial_result:a", t0 + 14), ("work:a", 1.0), ("on_trial_complete:a", t0 + 14)]
    events += [("on_trial_start:b", t0 + 14.5), ("on_trial_result:b", t0 + 16), ("work:b", 1.0)]
    events += [("on_trial_result:b", t0 + 17), ("work:b", 1.0), ("on_trial_complete:b", t0 + 17)]
    phases = _phases(events, t0, t0 + 21.5)
    assert phases["to the first trial (total)"] == pytest.approx(11.0)
    assert phases["Tuner.fit to 1st trial start"] == pytest.approx(4.0)
    assert phases["1st trial: start to 1st result, less its epoch"] == pytest.approx(1.0)
    assert phases["later trials: start to 1st result, less its epoch (mean)"] == pytest.approx(0.5)
    assert phases["gap between trials (mean)"] == pytest.approx(0.5)
    assert phases["platform per trial"] == pytest.approx((6.0 - 4.0) / 2)
    assert phases["main() return to exit (interpreter teardown)"] == pytest.approx(0.2)
    assert phases["total"] == pytest.approx(21.5)


def test_input_pipeline_prints_both_rates_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from benchmarks import input_pipeline

    assert input_pipeline.main(["--images", "40", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    last = re.fullmatch(r"input pipeline: .* pil=(\d+) img/s cached=(\d+) img/s ratio=([\d.]+)x", lines[-1])
    assert last is not None, lines[-1]
    pil, cached, ratio = int(last[1]), int(last[2]), float(last[3])
    assert pil > 0 and cached > 0 and ratio == pytest.approx(cached / pil, rel=0.05, abs=0.06)
    assert any(line.startswith("cache build") for line in lines) and any("peak RSS" in line for line in lines)


def test_gpu_cached_trial_runs_its_plumbing_on_the_cpu() -> None:
    """The GPU script's cache-fed trial, on the CPU with a small network: builds the cache, trains, measures."""
    from benchmarks import gpu

    out = gpu.cached_trial(
        False, backbone="small_cnn", classes=4, per_class=4, batch=16, workers=0, batches=2, image_size=32
    )
    assert out["img_s"] > 0 and out["build_s"] > 0 and out["images"] == 32


def test_table_cost_conclusions_agree_unless_a_significant_difference_flips() -> None:
    """benchmarks.table_cost's rule on hand-made rows: a difference significant under either run must keep its sign
    under the other; a sign change of a difference significant under neither is no different conclusion."""
    from benchmarks.table_cost import conclusions
    from dashboards.compare.cells import Cell, Row
    from dashboards.stats import Difference

    def row(family: str, ratio: float, delta: float, significant: bool) -> Row:
        diff = Difference(delta, delta - 0.01, delta + 0.01, 0.01 if significant else 0.5, 7, True)
        cell = Cell(family, "per_class", ratio, "all")
        return Row(cell, "test/recall_at_1", {}, 0.5, 0.01, 0.49, 0.51, diff, significant)

    fifo = [row("bspml", 0.2, 0.03, True), row("spl", 0.2, -0.004, False)]
    assert conclusions(fifo, [row("bspml", 0.2, 0.01, False), row("spl", 0.2, 0.002, False)])[0]
    same, lines = conclusions(fifo, [row("bspml", 0.2, -0.01, False), row("spl", 0.2, 0.002, False)])
    assert not same and "DIFFERS" in lines[0] and lines[1].endswith("same")
    assert not conclusions(fifo, [row("bspml", 0.2, 0.03, True), row("spl", 0.2, 0.02, True)])[0]


def test_table_cost_agreement_over_replicate_pairs() -> None:
    """benchmarks.table_cost's two rules on hand-made conclusions: match (same sign, significant under both or
    neither) and no flip; a scheduler's replicates against each other (pairs i < j) and against FIFO's (all pairs)."""
    from benchmarks.table_cost import Conclusion, agreement, agrees, billed_hours

    assert agrees(Conclusion(0.02, True), Conclusion(0.01, True)) == (True, True)
    assert agrees(Conclusion(0.02, True), Conclusion(0.01, False)) == (False, True)  # weaker, same direction
    assert agrees(Conclusion(0.02, True), Conclusion(-0.01, False)) == (False, False)  # the flip of issue 42
    assert agrees(Conclusion(0.004, False), Conclusion(-0.002, False)) == (False, True)  # noise either way
    assert agrees(Conclusion(0.0, False), Conclusion(0.0, False)) == (True, True)
    key = ("bspml", "per_class", 0.2, "all")
    fifo = [{key: Conclusion(0.019, True)}, {key: Conclusion(0.007, False)}]
    halving = [{key: Conclusion(0.012, True)}, {}]  # replicate 1 has no comparison: its pairs are left out
    assert agreement(fifo, None, key) == [(False, True)]
    assert agreement(halving, fifo, key) == [(True, True), (False, True)]
    line = "Table t: ...; every trial to the end (FIFO): 1365 model-epochs, ≈ 0.9 h on 2 slots ...; with halving per"
    assert billed_hours(line + " cell (...): the search = 34% ..., 700 model-epochs in all, ≈ 0.45 h") == (0.9, 0.45)
    assert billed_hours("Table t: ... (FIFO): 1365 model-epochs") == (None, None)
