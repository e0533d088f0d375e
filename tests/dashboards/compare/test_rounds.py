"""A ``{min, max}`` table's report shows the verdicts its rounds froze (dashboards/compare/rounds.py), not a fixed-design
verdict over every replicate present: the frozen label, Δ and interval replace the judged ones, comparison by
comparison, matched to the plan's cells; a comparison without a state keeps its judged verdict."""

from __future__ import annotations

import numpy as np

from dashboards import stats
from dashboards.compare.cells import Cell
from dashboards.compare.rounds import round_verdicts
from dashboards.compare.verdicts import BETTER, OPEN, Evidence, equivalent_label, judge
from harness.driver import tiny_table
from study.final import sequential as S
from study.intake.cells import parse_table

REF = Cell("ms", "per_class", 0.2, "all")


def _verdicts(families: list[str]) -> list:
    """Judged verdicts, each arm well above the reference (so that the judged label is ``better``)."""
    evidence = [
        Evidence(Cell(f, "per_class", 0.2, "all"), REF, 0.05, (stats.Part(np.asarray(1e-5), 4.0),), None, 5)
        for f in families
    ]
    return judge(evidence, "test/recall_at_1")


def _plan():
    table = tiny_table("t_report_rounds", 1, 1, 1, 2)
    table["arms"]["pa"] = {"family": "proxy_anchor", "space": {}}
    table["search"]["replicates"] = {"min": 2, "max": 3}
    return parse_table(table)


def _decision(state: S.State, delta: float, low: float, high: float) -> S.Decision:
    return S.Decision(state, None if state == S.OPEN else 2, delta, low, high, 0.99, 0.031, 3)


def test_the_frozen_decision_replaces_the_judged_verdict_and_an_unjudged_one_stays():
    plan = _plan()
    keys = {c.spec.family: c.key for c in plan.every_cell if c.replicate == 0}
    judged = _verdicts(["spl", "proxy_anchor"])
    assert [v.label for v in judged] == [BETTER, BETTER]
    states = {keys["spl"]: _decision(S.NOT_DETECTABLE, 0.004, -0.01, 0.018)}
    shown = round_verdicts(judged, states, plan.every_cell, margin=None)
    spl, pa = shown
    assert (spl.label, spl.evidence.delta, spl.holm_low, spl.holm_high, spl.mde) == (OPEN, 0.004, -0.01, 0.018, 0.031)
    assert pa == judged[1]  # no state for it: the judged verdict


def test_equivalence_carries_the_margin_and_better_its_interval():
    plan = _plan()
    keys = {c.spec.family: c.key for c in plan.every_cell if c.replicate == 0}
    states = {
        keys["spl"]: _decision(S.EQUIVALENT, 0.001, -0.004, 0.006),
        keys["proxy_anchor"]: _decision(S.BETTER, 0.04, 0.02, 0.06),
    }
    spl, pa = round_verdicts(_verdicts(["spl", "proxy_anchor"]), states, plan.every_cell, margin=0.01)
    assert spl.label == equivalent_label(0.01) and spl.within
    assert (pa.label, pa.holm_low, pa.holm_high) == (BETTER, 0.02, 0.06) and not pa.within
