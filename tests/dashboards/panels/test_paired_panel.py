"""The paired panel: the recovered 2-D distribution of the thesis' §4.1 runs and Table 1's metrics per loss."""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboards.load import METRIC, PARAM, DashboardData
from dashboards.panels import FigureBlock, TableBlock, paired
from trainables.schema.metric_names import PAIRED_COSINE, PAIRED_MAE
from trainables.schema.record import PAIRED_EMBEDDINGS_FILE


def test_the_dashboard_panel_draws_the_recovered_distribution():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((50, 2))
    runs = pl.DataFrame(
        {
            "run_id": ["r0", "r1", "r2"],
            "stage": ["final"] * 3,
            "status": ["FINISHED"] * 3,
            "family": ["kl_contrastive"] * 3,
            "seed": ["0", "1", "0"],
            PARAM + "params.loss": ["npair", "npair", "debiased_pos"],
            METRIC + "test/" + PAIRED_MAE: [0.6, 0.7, 0.5],
            METRIC + "test/" + PAIRED_COSINE: [0.9, 0.8, 0.95],
        }
    )
    arrays = {"view0": z + 0.1, "view1": z - 0.1, "latent": z}
    data = DashboardData(
        "sqlite://",
        [],
        runs,
        pl.DataFrame(),
        pl.DataFrame(),
        pl.DataFrame(),
        paired=dict.fromkeys(["r0", "r1", "r2"], arrays),
    )
    panel = paired.build(data)
    assert panel.drawn and any(isinstance(b, FigureBlock) for b in panel.blocks)
    table = next(b for b in panel.blocks if isinstance(b, TableBlock)).table
    assert table["loss"].to_list() == ["debiased_pos", "npair"] and table["runs"].to_list() == ["1", "2"]
    assert table["test/" + PAIRED_MAE][1].startswith("0.6500 [")
    assert not paired.build(DashboardData("sqlite://", [], runs, pl.DataFrame(), pl.DataFrame(), pl.DataFrame())).drawn


def test_the_artifact_name_is_the_one_the_loop_writes():
    assert PAIRED_EMBEDDINGS_FILE.endswith(".npz")
    colours = paired.latent_colours(np.array([[1.0, 0.0], [0.0, 2.0], [-0.1, 0.0]]))
    assert colours.shape == (3, 3) and colours[2].max() < colours[1].max()  # near the origin: darker
