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
