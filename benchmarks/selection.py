"""Which selection rule picks, among a cell's candidates, the one that is best on the test classes? (The replay of the
rules that need no retraining.)

Runs (or reuses) the glyphs table reduced to ms and bspml at 20 % per-class noise, FIFO, once per search seed
(``search.sampler.seed``; nothing else changes), and replays each rule of :data:`RULES` offline on the same candidates:
every search trial of a cell, which all trained every epoch (FIFO). A rule scores each candidate from its validation
history (MLflow's per-epoch ``val/`` metrics) and picks the best score, ties to the earliest trial, as the final stage
picks (:func:`study.final.best.pick_best`). ``search.select_on`` and ``search.metric`` rank by exactly these scores
(``last`` / ``{mean_last: k}`` of ``val/recall_at_1`` or ``val/map_at_r``), so a rule's pick here is what the product
would retrain, on the same trials.

**An audit, in this benchmark only**: every search trial reports its test Recall@1 once, at its last epoch (the
holdout model on the test classes), and nothing in the product ever selects on it. Printed per rule, over cells and
seeds:

- the selection **regret**: the best candidate's test Recall@1 minus the chosen one's (mean over cells);
- **Kendall τ** between the candidates' scores and their test Recall@1 (mean over cells);
- the **overtuning** share: cells whose pick is worse on test than the cell's median candidate;
- per seed, **Δ bspml − ms** of the two picks' test Recall@1 (one model each, not the final stage's seeds), and
  whether the seeds agree in sign;
- the **cost** as model-epochs over today's rule's: 1.00 for every replayed rule (they read the same trials).

Each rule is replayed, not rerun: a search ranked by another rule would ask TPE for other trials after its start-up
ones, so this isolates the choice among a fixed population. Every table also races its finalists (``final.race``
K 3, S 2, by today's rule; it does not change the search): the race's pick is one more row, its cost the race's runs
over the search's model-epochs (and over the whole table's with its 7 final seeds). A training variant
(:data:`VARIANTS`: the learning rate annealed by ``train.lr_schedule: cosine``) is a rerun of the tables. Not measured
here: a reshuffled holdout, and the final stage's Δ on 7 seeds (Δ here is of the picks' own test scores).

    PYTHONPATH=$PWD python -m benchmarks.selection --out /tmp/bench-selection --seeds 0 1 2 --variants today cosine
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import kendalltau

from study.final.best import pick_best
from trainables.schema import record as R
from trainables.schema.metric_names import MAP_AT_R, on_test, on_val, recall_at

__all__ = ["RULES", "Candidate", "Pick", "replay", "reduced_table", "main"]

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "search_spaces" / "table_glyphs.yaml"
ARMS = ("ms", "bspml")
NOISE = 0.2
#: The training variants the tables are run under (a rerun each; the rules are replayed within each): today's specs,
#: and the learning rate annealed to 0 over the epochs (``train.lr_schedule``), which the issue expects to cut the
#: epoch-to-epoch wobble that the last epoch's value carries.
VARIANTS: dict[str, dict[str, dict]] = {
    "today": {},
    "cosine": {"train": {"lr_schedule": {"type": "cosine"}}},
}
#: Every table also races its finalists (``final.race``, the issue's K 3, S 2): the race does not change the search
#: (the same seeded trials), so the replayed rules read the same candidates, and the race's pick is one more rule.
RACE = {"finalists": 3, "seeds": 2}
RACE_RULE = f"race K{RACE['finalists']} S{RACE['seeds']}"
#: The full glyphs table's final seeds (the whole-table cost ratio counts them; the reduced tables run one).
TABLE_FINAL_SEEDS = 7
TEST = on_test(recall_at(1))


@dataclass(frozen=True)
class Candidate:
    """One search trial of a cell: its creation order, per validation metric its value per epoch, its test score."""

    order: int
    history: dict[str, dict[int, float]]
    test: float
    #: Its Ray trial id (the race's standings name finalists by it).
    trial_id: str = ""


def _mean_last(metric: str, k: int) -> Callable[[Candidate], float]:
    def score(c: Candidate) -> float:
        values = [v for _, v in sorted(c.history[metric].items())][-k:]
        return float(np.mean(values))

    return score


#: Rule name → a candidate's score (higher ranks first). "last R@1" is today's default.
RULES: dict[str, Callable[[Candidate], float]] = {
    "last R@1": _mean_last(on_val(recall_at(1)), 1),
    "mean_last 2 R@1": _mean_last(on_val(recall_at(1)), 2),
    "mean_last 3 R@1": _mean_last(on_val(recall_at(1)), 3),
    "last MAP@R": _mean_last(on_val(MAP_AT_R), 1),
    "mean_last 3 MAP@R": _mean_last(on_val(MAP_AT_R), 3),
}


@dataclass(frozen=True)
class Pick:
    """One cell (variant, seed, arm) under one rule: the pick's test score and the audit's numbers."""

    variant: str
    seed: int
    arm: str
    rule: str
    test: float
    regret: float
    tau: float
    overtuned: bool


def replay(
    seed: int, arm: str, candidates: Sequence[Candidate], variant: str = "today", raced: dict[str, float] | None = None
) -> list[Pick]:
    """Every rule's pick among ``candidates`` (one cell), with its regret, τ and overtuning; with ``raced`` (the race's
    mean per finalist's trial id, the winner's the best) the race's pick as :data:`RACE_RULE` (its τ over the
    finalists)."""
    tests = np.array([c.test for c in candidates])
    picks = []
    rules = dict(RULES)
    if raced:
        rules[RACE_RULE] = lambda c: raced.get(c.trial_id, -math.inf)
    for rule, score in rules.items():
        scores = [score(c) for c in candidates]
        best = pick_best(range(len(candidates)), lambda i: scores[i], lambda i: candidates[i].order, "max")
        assert best is not None, "a cell without candidates"
        scored = [i for i, v in enumerate(scores) if math.isfinite(v)]
        tau = float(kendalltau([scores[i] for i in scored], tests[scored]).statistic) if len(scored) > 1 else math.nan
        chosen = float(tests[best])
        picks.append(
            Pick(variant, seed, arm, rule, chosen, float(tests.max()) - chosen, tau, chosen < float(np.median(tests)))
        )
    return picks


def table_name(variant: str, seed: int) -> str:
    return f"sel_{variant}_s{seed}"


def reduced_table(seed: int, out: Path, variant: str = "today") -> Path:
    """The glyphs table with arms ms and bspml at 20 % noise, FIFO, searched with sampler seed ``seed``, under
    ``variant`` (:data:`VARIANTS`); one final seed (the replay reads the search only). Written as
    ``out/<name>.yaml``."""
    raw = yaml.safe_load(TABLE.read_text())
    raw["name"] = table_name(variant, seed)
    for section, values in VARIANTS[variant].items():
        raw[section] = {**raw[section], **values}
    raw["final"]["race"] = RACE
    raw["arms"] = {a: raw["arms"][a] for a in ARMS}
    raw["cells"] = {"dataset.noise.ratio": [NOISE]}
    raw["search"]["sampler"]["seed"] = seed
    raw["search"]["scheduler"] = {"type": "fifo"}
    raw["final"]["seeds"] = 1
    raw["storage"] = str(out / "runs")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _run(spec: Path, study_dir: Path) -> None:
    """Run the table (resume it when its directory exists; a finished one only prints its report)."""
    args = [sys.executable, "-m", "study.run", str(spec), *(["--resume"] if study_dir.exists() else [])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"{spec.name}: the table exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def _candidates(study_dir: Path) -> dict[str, list[Candidate]]:
    """Per arm (family), its cell's search trials with their validation histories and test score, from MLflow."""
    from mlflow import MlflowClient

    client = MlflowClient(R.sqlite_uri(study_dir / R.MLFLOW_DB))
    experiment = client.get_experiment_by_name(study_dir.name)
    assert experiment is not None, f"no MLflow experiment {study_dir.name}"
    runs = client.search_runs([experiment.experiment_id], max_results=10_000)
    out: dict[str, list[Candidate]] = {}
    search = [
        r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_TRIAL and r.data.tags.get(R.STAGE) == R.STAGE_SEARCH
    ]
    for run in sorted(search, key=lambda r: r.info.start_time):
        history = {
            m: {x.step: x.value for x in client.get_metric_history(run.info.run_id, m)}
            for m in (on_val(recall_at(1)), on_val(MAP_AT_R))
        }
        arm, trial = run.data.tags[R.FAMILY], run.data.tags[R.TRIAL_ID]
        out.setdefault(arm, []).append(Candidate(len(out.get(arm, [])), history, run.data.metrics[TEST], trial))
    return out


def _raced(study_dir: Path) -> dict[str, float]:
    """The race's mean per finalist (Ray trial id), from the parent run's standings (every cell's)."""
    import csv
    import io
    import tempfile

    from mlflow import MlflowClient

    client = MlflowClient(R.sqlite_uri(study_dir / R.MLFLOW_DB))
    experiment = client.get_experiment_by_name(study_dir.name)
    assert experiment is not None, f"no MLflow experiment {study_dir.name}"
    (parent,) = client.search_runs([experiment.experiment_id], f"tags.`{R.ROLE_TAG}` = '{R.ROLE_STUDY}'")
    with tempfile.TemporaryDirectory() as scratch:
        text = Path(client.download_artifacts(parent.info.run_id, R.RACE_FILE, scratch)).read_text()
    return {row[R.SOURCE_TRIAL]: float(row[R.RACE_MEAN]) for row in csv.DictReader(io.StringIO(text))}


def cost_ratios(trials: int, epochs: int, search_cost: float) -> tuple[float, float]:
    """The race's model-epochs as a ratio to today's selection: of the search alone, and of the whole table with its
    :data:`TABLE_FINAL_SEEDS` final seeds (a race run is a search trial: ``search_cost`` models an epoch)."""
    race = RACE["finalists"] * RACE["seeds"] * search_cost * epochs
    search = trials * search_cost * epochs
    whole = search + TABLE_FINAL_SEEDS * epochs
    return (search + race) / search, (whole + race) / whole


def _table(picks: list[Pick], seeds: Sequence[int], race_cost: tuple[float, float]) -> str:
    lines = [
        f"{'variant':<8} {'rule':<18} {'regret':>7} {'tau':>6} {'overtuned':>9}  "
        + " ".join(f"{'Δ s' + str(s):>8}" for s in seeds)
        + "  agree  cost"
    ]
    for variant, rule in dict.fromkeys((p.variant, p.rule) for p in picks):
        mine = [p for p in picks if p.rule == rule and p.variant == variant]
        deltas = []
        for s in seeds:
            by_arm = {p.arm: p.test for p in mine if p.seed == s}
            deltas.append(by_arm["bspml"] - by_arm["ms"])
        agree = "yes" if len({math.copysign(1, d) for d in deltas if d != 0}) <= 1 else "no"
        lines.append(
            f"{variant:<8} {rule:<18} {np.mean([p.regret for p in mine]):>7.4f} {np.nanmean([p.tau for p in mine]):>6.2f} "
            f"{sum(p.overtuned for p in mine):>4}/{len(mine):<4}  "
            + " ".join(f"{d:>+8.4f}" for d in deltas)
            + f"  {agree:>5}  "
            + ("1.00" if rule != RACE_RULE else f"{race_cost[0]:.2f} of the search, {race_cost[1]:.2f} of the table")
        )
    return "\n".join(lines)


def _replayed(variant: str, seed: int, out: Path) -> list[Pick]:
    """Run (or reuse) one table and replay every rule on its cells; prints each candidate's scores."""
    spec = reduced_table(seed, out, variant)
    study_dir = out / "runs" / table_name(variant, seed)
    started = time.perf_counter()
    _run(spec, study_dir)
    print(f"{study_dir.name}: {time.perf_counter() - started:.0f} s", flush=True)
    picks = []
    raced = _raced(study_dir)
    for arm, candidates in sorted(_candidates(study_dir).items()):
        picks += replay(seed, arm, candidates, variant, raced)
        for c in candidates:
            scores = "  ".join(f"{rule} {score(c):.4f}" for rule, score in RULES.items())
            print(f"  {arm:<6} trial {c.order}: test {c.test:.4f}  {scores}")
    return picks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-selection"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    picks: list[Pick] = []
    for variant in args.variants:
        for seed in args.seeds:
            picks += _replayed(variant, seed, args.out)
    print()
    print(f"The glyphs table, ms and bspml at {NOISE:.0%} noise, 8 trials per cell, search seeds {args.seeds}:")
    table = yaml.safe_load(TABLE.read_text())
    search_cost = 1.0 - table["validation"]["fraction"]  # a holdout trial trains one model on the rest
    print(_table(picks, args.seeds, cost_ratios(table["search"]["num_trials"], table["train"]["epochs"], search_cost)))


if __name__ == "__main__":
    main()
