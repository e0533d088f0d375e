"""A verdict per comparison: an arm against the reference on one cell, on one metric, says ``better``, ``worse`` or
``not detectable at this budget`` (or ``equivalent within ±δ`` with a margin), with its Δ, P(A > B) and the minimum
detectable effect. The table's headline (table.md, the report, the comparison command, the dashboard), its parent
run's tags and metrics and ``--status`` all show these, and nothing else decides a comparison.

How a verdict is decided:

- **The interval that holds for the design.** One search per cell: the paired t-interval over the final seeds
  (Welch's where the seeds do not pair). ``search.replicates`` R ≥ 2: the crossed replicates × seeds interval of
  :func:`study.final.intervals.replicated_delta` (each side's searches add their own variance). Both are sums of
  variance parts (:func:`dashboards.stats.delta_parts`), each at its own t quantile.
- **Holm over the table's comparisons.** Each comparison's p-value is the one its interval implies
  (:func:`dashboards.stats.p_value`: the smallest α whose 1 − α interval excludes 0); Holm's step-down adjusts them
  over the table's m comparisons of the metric (:func:`dashboards.stats.holm`). A comparison is ``better`` or
  ``worse`` (by Δ's sign and the metric's direction) where its adjusted p-value is below 0.05. Equivalently, with the
  comparisons ranked by p-value, the one at rank k (from 0) is decided when its interval at level 1 − 0.05 / (m − k)
  excludes 0 and so does every one ranked before it: that interval is printed as the Holm interval.
- **The margin.** With ``verdict.margin`` δ, a comparison not decided whose Holm interval lies inside (−δ, +δ) is
  ``equivalent within ±δ``; a decided one whose Holm interval lies inside says so too (``better, within ±δ``).
- **The minimum detectable effect**: the |Δ| this design detects with 80 % power at two-sided α 0.05, before Holm,
  from the same parts (:func:`dashboards.stats.min_detectable_effect`: about 2.8 standard errors at many degrees of
  freedom, more at few). "Not detectable" then has a size: an effect smaller than it would often go unseen.
- **P(A > B)** (:func:`dashboards.stats.probability_of_improvement`): the probability that the arm's final run beats
  the reference's on the same seed, averaged over the replicate pairs; its interval is over the seeds, given the
  searches that ran. It describes; the verdict decides.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dashboards import stats
from dashboards.compare.cells import Cell, noise_text, reference_cell
from dashboards.compare.replicates import ReplicateRow
from trainables.schema import record as R

__all__ = [
    "BETTER",
    "WORSE",
    "OPEN",
    "Evidence",
    "Verdict",
    "row_evidence",
    "replicate_evidence",
    "judge",
    "comparison_name",
    "verdict_header",
    "verdict_body",
    "verdict_caption",
    "headline",
    "record",
    "status_lines",
]

BETTER = "better"
WORSE = "worse"
OPEN = "not detectable at this budget"


def equivalent_label(margin: float) -> str:
    return f"equivalent within ±{margin:g}"


@dataclass(frozen=True)
class Evidence:
    """What one comparison's verdict is decided from: ``cell`` − ``reference``'s Δ, its variance parts and P(A > B)."""

    cell: Cell
    reference: Cell
    delta: float
    parts: tuple[stats.Part, ...]
    improvement: stats.Improvement | None
    seeds: int
    #: Replicates pooled: the arm's, the reference's (1, 1 for a table of one search per cell).
    replicates: tuple[int, int] = (1, 1)
    #: Whether the seeds pair the sides (else Welch's interval, and no P(A > B)).
    paired: bool = True

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % interval (unadjusted)."""
        half = stats.half_width(self.parts)
        return self.delta - half, self.delta + half


@dataclass(frozen=True)
class Verdict:
    """One comparison's verdict (:func:`judge`)."""

    evidence: Evidence
    metric: str
    #: ``better``, ``worse``, ``not detectable at this budget`` or ``equivalent within ±δ``.
    label: str
    p_value: float
    p_holm: float
    #: The interval at Holm's level for the comparison's rank (1 − 0.05 / (m − k)).
    holm_low: float
    holm_high: float
    mde: float
    #: The Holm interval lies inside ±``margin`` (``None``: no margin set).
    within: bool = False
    margin: float | None = None

    @property
    def decided(self) -> bool:
        return self.label in (BETTER, WORSE)

    @property
    def sign(self) -> int:
        """+1 better, −1 worse, 0 otherwise (equivalent or open)."""
        return {BETTER: 1, WORSE: -1}.get(self.label, 0)

    @property
    def name(self) -> str:
        """The comparison's name in the parent run's tags and metrics (:func:`comparison_name`)."""
        return comparison_name(self.evidence.cell)

    def text(self) -> str:
        """``better, within ±0.01``: the label, with the margin where a decided comparison is also inside it."""
        return self.label + (f", within ±{self.margin:g}" if self.decided and self.within else "")

    def line(self) -> str:
        """One line: ``bspml vs ms (per_class p=0.2): better: Δ +0.0111 [+0.0010, +0.0208] (Holm [+0.0004, +0.0215]);
        P(bspml > ms) 0.71 [0.55, 0.84]; detectable from 0.0150; 3×3 replicates × 7 seeds``."""
        e = self.evidence
        low, high = e.interval
        poi = e.improvement
        p_text = "—" if poi is None else f"{poi.value:.2f} [{poi.low:.2f}, {poi.high:.2f}]"
        return (
            f"{e.cell.row} vs {e.reference.name} ({noise_text(e.cell)}): {self.text()}: Δ {_f(e.delta)} "
            f"[{_f(low)}, {_f(high)}] (Holm [{_f(self.holm_low)}, {_f(self.holm_high)}]); "
            f"P({e.cell.row} > {e.reference.name}) {p_text}; detectable from {_f(self.mde, sign=False)}; "
            f"{_size(e)}"
        )

    def metrics(self) -> dict[str, float]:
        """The numbers, for the parent run (:func:`trainables.schema.record.verdict_metric`): finite ones only."""
        e = self.evidence
        low, high = e.interval
        values = {
            "sign": float(self.sign),
            "delta": e.delta,
            "low": low,
            "high": high,
            "holm_low": self.holm_low,
            "holm_high": self.holm_high,
            "p_holm": self.p_holm,
            "mde": self.mde,
            **({} if e.improvement is None else {"poi": e.improvement.value}),
            **({} if e.improvement is None else {"poi_low": e.improvement.low, "poi_high": e.improvement.high}),
        }
        return {R.verdict_metric(self.name, k): float(v) for k, v in values.items() if math.isfinite(v)}


def _f(value: float, sign: bool = True) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:+.4f}" if sign else f"{value:.4f}"


def _size(e: Evidence) -> str:
    if e.replicates == (1, 1):
        return f"{e.seeds} seeds" + ("" if e.paired else " (unpaired: Welch)")
    return f"{e.replicates[0]}×{e.replicates[1]} replicates × {e.seeds} seeds"


def comparison_name(cell: Cell) -> str:
    """A comparison's name as MLflow keys allow it: the arm's family (and subset) and the cell's noise
    (``bspml.per_class_p0.2``, ``ms.clean_only.per_class_p0.3``, ``bspml.p0``)."""
    noise = "p0" if cell.noise_ratio == 0.0 else f"{cell.noise_kind}_p{cell.noise_ratio:g}"
    parts = [cell.name, *([] if cell.subset == "all" else [cell.subset]), noise]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", ".".join(parts))


def row_evidence(values: dict[Cell, dict[int, float]], reference: str) -> list[Evidence]:
    """One search per cell: every cell against the reference's cell for its noise setting, the seeds paired (the
    paired t-interval's one part), else unpaired (Welch's part, no P(A > B)). Cells in the comparison's row order."""
    out = []
    for cell in sorted(values, key=lambda c: (c.name != reference, c.row, c.noise_kind, c.noise_ratio)):
        ref = reference_cell(values, reference, cell)
        if ref is None or ref == cell:
            continue
        x, y = values[cell], values[ref]
        paired = stats.replicated_difference([x], [y])
        if paired is not None:
            poi = stats.probability_of_improvement([x], [y])
            out.append(Evidence(cell, ref, paired.delta, paired.parts, poi, paired.seeds))
            continue
        a, b = list(x.values()), list(y.values())
        delta = sum(a) / len(a) - sum(b) / len(b)
        out.append(Evidence(cell, ref, delta, stats.welch_parts(a, b), None, min(len(a), len(b)), paired=False))
    return out


def replicate_evidence(rows: Sequence[ReplicateRow]) -> list[Evidence]:
    """Over ``search.replicates``: one evidence per comparison's replicates (:func:`replicate_rows`)."""
    return [
        Evidence(
            r.cell, r.reference, r.difference.delta, r.difference.parts, r.improvement, r.difference.seeds, r.replicates
        )
        for r in rows
    ]


def _label(delta: float, p_holm: float, higher_is_better: bool) -> str:
    if math.isnan(p_holm) or p_holm >= stats.ALPHA:
        return OPEN
    return BETTER if (delta > 0.0) == higher_is_better else WORSE


def judge(
    evidence: Sequence[Evidence], metric: str, *, margin: float | None = None, higher_is_better: bool = True
) -> list[Verdict]:
    """Every comparison's verdict, Holm's correction over all of them (the module's docstring)."""
    p = [stats.p_value(e.delta, e.parts) for e in evidence]
    adjusted = stats.holm(p)
    ranked = sorted((v, i) for i, v in enumerate(p) if not math.isnan(v))
    rank = {i: k for k, (_, i) in enumerate(ranked)}
    m = len(ranked)
    out = []
    for i, e in enumerate(evidence):
        level = 1.0 - stats.ALPHA / (m - rank[i]) if i in rank else 1.0 - stats.ALPHA
        half = stats.half_width(e.parts, level)
        low, high = e.delta - half, e.delta + half
        label = _label(e.delta, adjusted[i], higher_is_better)
        within = margin is not None and -margin < low and high < margin
        if label == OPEN and within:
            assert margin is not None
            label = equivalent_label(margin)
        mde = stats.min_detectable_effect(e.parts)
        out.append(Verdict(e, metric, label, p[i], adjusted[i], low, high, mde, within, margin))
    return out


def verdict_header(reference: str) -> list[str]:
    return [
        R.FAMILY,
        "noise",
        "verdict",
        f"Δ = family − {reference} [95 % CI]",
        "Holm interval",
        f"P(family > {reference}) [95 %]",
        "detectable from",
        "n",
    ]


def verdict_body(verdicts: Sequence[Verdict]) -> list[list[str]]:
    """The verdict table's rows, one per comparison."""
    body = []
    for v in verdicts:
        e = v.evidence
        low, high = e.interval
        poi = e.improvement
        body.append(
            [
                e.cell.row,
                noise_text(e.cell),
                v.text(),
                f"{_f(e.delta)} [{_f(low)}, {_f(high)}]",
                f"[{_f(v.holm_low)}, {_f(v.holm_high)}]",
                "—" if poi is None else f"{poi.value:.2f} [{poi.low:.2f}, {poi.high:.2f}]",
                _f(v.mde, sign=False),
                _size(e),
            ]
        )
    return body


def verdict_caption(verdicts: Sequence[Verdict], reference: str) -> str:
    """What the verdict table's columns are, in one caption."""
    m = sum(not math.isnan(v.p_value) for v in verdicts)
    replicated = any(v.evidence.replicates != (1, 1) for v in verdicts)
    interval = (
        "over replicates × seeds (each side's searches add their own variance over their own R)"
        if replicated
        else "paired over the final seeds († Welch where they do not pair)"
    )
    metric = verdicts[0].metric if verdicts else ""
    return (
        f"Verdicts on {metric}: Δ {interval}; better / worse where Holm's correction over the {m} comparisons keeps "
        f"Δ ≠ 0 at 5 % (the Holm interval: 1 − 0.05 / (m − k) at the comparison's rank k by p-value; it and every "
        f"earlier one exclude 0); P(family > {reference}): its run beats {reference}'s on the same seed, averaged over "
        "the replicate pairs, Clopper–Pearson over the seeds; detectable from: the |Δ| found with 80 % power at "
        "α 0.05"
    )


def headline(verdicts: Sequence[Verdict], replicates: int) -> list[str]:
    """The table's headline: one line per comparison, and, for a table of one search per cell, that its verdicts
    ignore the search's own variance (:func:`dashboards.table_report.replicates_cost` says what R would cost)."""
    if not verdicts:
        return ["No comparison has final runs on both sides: no verdict."]
    lines = [f"- {v.line()}" for v in verdicts]
    if replicates > 1:
        return lines
    return [
        *lines,
        "",
        "These verdicts ignore the search's own variance: each cell was searched once, and another search seed can "
        "pick other configurations and change a verdict (on the verdicts benchmark, one search per cell called ms "
        "worse than itself once in 6 comparisons, and bspml's verdict at 20 % noise changed with the seed; "
        'search.replicates: 3 did neither: docs/notebook/selection.md, "The verdicts benchmark").',
    ]


def record(verdicts: Sequence[Verdict]) -> tuple[dict[str, str], dict[str, float]]:
    """The parent run's tags (``verdict/<comparison>``: its line) and metrics (``verdict/<comparison>/<number>``)."""
    tags = {R.verdict_tag(v.name): v.line() for v in verdicts}
    metrics = {k: x for v in verdicts for k, x in v.metrics().items()}
    return tags, metrics


def status_lines(tags: Mapping[str, str]) -> list[str]:
    """``--status``'s lines: each comparison's verdict line as the finished run tagged its parent run (none before
    the table's report was written)."""
    return [f"verdict: {tags[k]}" for k in sorted(tags) if R.is_verdict_tag(k)]
