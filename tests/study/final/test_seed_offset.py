"""``final.seed_offset``: the final stage retrains with seeds offset … offset + seeds − 1 (every group alike, so the
arms stay paired), the noise reseeded with them; an unset offset is not written, so a spec.yaml or table.yaml from
before the key reads and dumps as it did."""

from __future__ import annotations

from pathlib import Path

from study.final.stage import NOISE_SEED, seed_points
from study.intake.load import load_plan
from trainables.schema.spec import FinalSpec

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def test_the_final_seeds_start_at_the_offset_and_reseed_the_noise_with_them():
    points = seed_points(FinalSpec(seeds=3, seed_offset=100, reseed_noise=True), "g", {"mu": 1.0}, "t0")
    assert [p["params"]["seed"] for p in points] == [100, 101, 102]
    assert [p["params"][NOISE_SEED] for p in points] == [100, 101, 102]
    assert [p["params"]["seed"] for p in seed_points(FinalSpec(seeds=2), "g", {}, "t0")] == [0, 1]


def test_an_unset_offset_is_not_written_and_a_set_one_reaches_every_cell():
    assert "seed_offset" not in FinalSpec(seeds=3).model_dump()
    assert FinalSpec(seeds=3, seed_offset=7).model_dump()["seed_offset"] == 7
    plain = load_plan(SPACES / "table_glyphs_quick.yaml")
    assert "seed_offset" not in plain.written["final"]
    assert all("seed_offset" not in c.spec.final.model_dump() for c in plain.cells)
    offset = load_plan(SPACES / "table_glyphs_quick.yaml", ["final.seed_offset=100"])
    assert {c.spec.final.seed_offset for c in offset.cells} == {100}
