"""benchmarks.verdicts' constants, the pure counting (agreement, false verdicts, cost), a master seed's overrides and
the size of a run: what the table runs and the designs share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "search_spaces" / "table_glyphs.yaml"
REFERENCE = "ms"
ARMS = (REFERENCE, "bspml")
TWIN = "ms_twin"
#: The small effect (its verdict flipped with the search seed) and the large one (decided at 7 seeds).
NOISES = (0.2, 0.4)
MASTER_SEEDS = (0, 1, 2)
#: Master seed k searches at sampler seed k × this (replicate r at + r): no two master seeds share a search.
SEARCH_STRIDE = 1000
#: The twin ms table's sampler seed is the master's + this (above any replicate's).
TWIN_SHIFT = 500
#: Master seed k's final seeds start at k × this (above any table's final.seeds).
FINAL_STRIDE = 100
OPEN = "not detectable at this budget"
DECIDED = ("better", "worse")


# ---------------------------------------------------------------------------------------------------------- pure parts


def agreement(verdicts: Mapping[int, Mapping[str, str]]) -> tuple[int, int]:
    """Over master seed → (comparison → verdict label): the comparisons whose verdict is identical under every master
    seed, and all comparisons any seed has. A comparison missing under one seed does not agree; ``not detectable``
    agrees only with itself (labels are compared as they are)."""
    names = sorted({name for labels in verdicts.values() for name in labels})
    same = sum(len({labels.get(name) for labels in verdicts.values()}) == 1 for name in names)
    return same, len(names)


def false_verdicts(verdicts: Mapping[int, Mapping[str, str]]) -> tuple[int, int]:
    """On A-vs-A (two arms that are the same): verdicts ``better`` or ``worse``, and all verdicts, over every seed."""
    labels = [label for run in verdicts.values() for label in run.values()]
    return sum(label in DECIDED for label in labels), len(labels)


def cost_ratio(cost: float, baseline: float) -> float:
    """A design's model-epochs over design (a)'s (NaN without a baseline)."""
    return cost / baseline if baseline > 0 else math.nan


def cells_used(rounds: Mapping[str, tuple[str, str, int]], replicates: int) -> dict[str, int]:
    """Per cell, the replicates an adaptive design ran: the most any of its comparisons needed. ``rounds``: comparison
    → (arm's cell, reference's cell, replicates when it was decided or ``replicates`` when open at the end). The
    reference's cell serves every comparison of its noise level, so it runs while any of them is open."""
    used: dict[str, int] = {}
    for cell, ref, r in rounds.values():
        for key in (cell, ref):
            used[key] = max(used.get(key, 0), min(r, replicates))
    return used


def master_overrides(master: int, twin: bool = False) -> list[str]:
    """``--set`` overrides of master seed ``master``: sampler seed, holdout split, final seeds."""
    sampler = master * SEARCH_STRIDE + (TWIN_SHIFT if twin else 0)
    overrides = [f"search.sampler.seed={sampler}", f"validation.seed={master}"]
    if master:  # an unset offset keeps master seed 0's table.yaml what the table was before the key existed
        overrides.append(f"final.seed_offset={master * FINAL_STRIDE}")
    return overrides


@dataclass(frozen=True)
class Size:
    """What a run of the benchmark trains: the shipped table's budget, or the smoke's tiny one."""

    trials: int | None = None
    epochs: int | None = None
    final_seeds: int | None = None
    noises: tuple[float, ...] = NOISES

    def apply(self, raw: dict[str, Any]) -> None:
        if self.trials is not None:
            raw["search"]["num_trials"] = self.trials
        if self.epochs is not None:
            raw["train"]["epochs"] = self.epochs
        if self.final_seeds is not None:
            raw["final"]["seeds"] = self.final_seeds


SMOKE = Size(trials=2, epochs=1, final_seeds=2, noises=(0.4,))


@dataclass(frozen=True)
class Job:
    """One table of the plan: the main table or the twin at one master seed."""

    twin: bool
    master: int
    spec: Path
    study_dir: Path

    @property
    def overrides(self) -> list[str]:
        return master_overrides(self.master, self.twin)
