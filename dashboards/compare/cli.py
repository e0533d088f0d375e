"""Command line: ``python -m dashboards.compare STUDY [STUDY ...] --reference FAMILY [--metric test/recall_at_1]
[--claimed TWIN ...] [--format md|tex|csv] [--out FILE]``.

The papers' comparison tables (BSPML's Table 2 layout: families × noise ratios) from the final stage's runs, with
paired statistics against a reference family: per family and noise cell (kind, ratio, subset) the mean, std and
95 % t-interval over the final seeds; the difference to the reference over matching seeds (Welch where no seeds
match) with a Holm-corrected significance mark; the share of the reference's noise drop the family recovers with a
bootstrap interval; across cells, IQM (Agarwal et al. 2021). First, the verdicts (:mod:`dashboards.compare.verdicts`):
per comparison ``better``, ``worse`` or ``not detectable at this budget`` (``--margin δ``: or ``equivalent within
±δ``), with P(family > reference) and the minimum detectable effect; the metric is taken as higher-is-better (every
``test/`` metric the study logs is). With ``--claimed`` (the same grid run with ``validation.kind: none``), the
optimism of selecting on the test classes per cell.

A STUDY is a spec file or a study directory (``storage/<name>/``, which holds ``spec.yaml``); several studies are
merged by cell (a cell in two studies is taken from the first). The numbers are the final runs' last ``test/``
values as MLflow holds them — what the study stored, never recomputed from models. Statistics: ``dashboards.stats``.
Exit 2 with one line for an unknown study, reference family or metric, or a study without a final stage.

A table run with ``search.replicates`` R > 1 (its saved ``table.yaml`` says so) has R searched winners per cell, each
retrained on the same seeds: they are not more seeds of one configuration, so the tables read replicate 0, the table
exactly as it would have run without replicates (as its report does, whose own section covers all R), and say so.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from dashboards.compare.cells import (
    DEFAULT_METRIC,
)
from dashboards.compare.render import render_claimed_csv, render_csv, render_latex, render_markdown
from dashboards.compare.rows import build_comparison
from dashboards.load import DashboardData, DashboardError
from dashboards.select import final_runs
from study.arguments import ArgumentParser, one_line
from trainables.schema import record as R

if TYPE_CHECKING:
    from study.intake.layout import StudyLayout  # at run time imported where used (after the spec)
    from trainables.schema.spec import StudySpec

__all__ = ["locate", "read_study", "main"]


def _spec(study: str) -> StudySpec:
    """The study's spec, of a spec file or a study directory (:func:`study.intake.spec_reader.load_study`)."""
    from study.intake.spec_reader import load_study
    from trainables.schema.errors import StudyError

    try:
        return load_study(study, family_rules=False)  # the stores' locations only: no trainer (torch) imported
    except StudyError as e:
        raise DashboardError(f"STUDY: {e}") from e


def _layout(study: str) -> tuple[StudyLayout, str]:
    """The study's layout and name, of a spec file or a study directory."""
    from study.intake.layout import StudyLayout

    spec = _spec(study)
    return StudyLayout.for_spec(spec), spec.name


def locate(study: str) -> tuple[str, str]:
    """``(tracking URI, experiment name)`` of a spec file or a study directory (:func:`study.intake.spec_reader.load_study`)."""
    layout, name = _layout(study)
    return layout.tracking_uri, name


def first_replicates(study: str) -> tuple[list[str], int] | None:
    """A table's final groups of replicate 0 and its R, when STUDY was started as a table with ``search.replicates``
    R > 1 (its saved ``table.yaml``); ``None`` for a study or a table of one replicate."""
    from study.intake.load import kept_table

    plan = kept_table(_spec(study))
    if plan is None or plan.replicates <= 1:
        return None
    return [c.label for c in plan.cells if c.replicate == 0], plan.replicates


def read_study(study: str) -> DashboardData:
    """The runs of one study (no metric histories, no artifacts: the tables need the last values only)."""
    import tempfile

    from dashboards.load import load, resolve_tracking_uri
    from study.tracking.credentials import remember

    uri, name = locate(study)
    try:
        uri = remember(resolve_tracking_uri(uri, [name]))
    except DashboardError as e:
        raise DashboardError(f"STUDY: {study}: {e}") from e
    with tempfile.TemporaryDirectory(prefix="compare") as scratch:
        data = load(uri, [name], Path(scratch), details=False)
    if final_runs(data).is_empty():
        raise DashboardError(f"STUDY: {study}: study {name!r} has no finished final-stage runs (final.seeds: 0?)")
    return data


def _runs(studies: Iterable[DashboardData]) -> pl.DataFrame:
    return pl.concat([d.runs for d in studies], how="diagonal_relaxed")


def read_compared(study: str, notes: list[str]) -> DashboardData:
    """:func:`read_study`, with a replicated table's final runs narrowed to replicate 0 (noted in ``notes``)."""
    data = read_study(study)
    if (first := first_replicates(study)) is None:
        return data
    groups, replicates = first
    final = pl.col(R.STAGE) == R.STAGE_FINAL
    runs = data.runs.filter(~final | pl.col(R.GROUP).is_in(groups))
    notes.append(
        f"{study}: a table of {replicates} search replicates: replicate 0's final runs (its report's replicates "
        "section covers them all)"
    )
    return dataclasses.replace(data, runs=runs)


# ---------------------------------------------------------------------------------------------------- command line


def _parser(prog: str) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Family × noise comparison tables.")
    p.add_argument("study", nargs="+", metavar="STUDY", help="spec file or study directory (several: merged by cell)")
    p.add_argument("--reference", required=True, help="the family every other is compared with, e.g. ms")
    p.add_argument("--metric", default=DEFAULT_METRIC, help=f"a final-stage test metric (default {DEFAULT_METRIC})")
    p.add_argument(
        "--claimed",
        action="append",
        default=[],
        metavar="TWIN",
        help="the same grid run with validation.kind: none (spec or study dir, repeatable): claimed vs honest table",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="DELTA",
        help="equivalence margin: a comparison whose Holm interval lies inside ±DELTA is 'equivalent within ±DELTA'",
    )
    p.add_argument("--format", choices=("md", "tex", "csv"), default="md")
    p.add_argument(
        "--out",
        default=None,
        help="write here instead of stdout (nothing is written on an error); with --format csv and --claimed the "
        "claimed-vs-honest table goes beside it, to <stem>.claimed.csv",
    )
    return p


def main(argv: list[str] | None = None, prog: str = "python -m dashboards.compare") -> int:
    p = _parser(prog)
    args = p.parse_args(argv)
    if args.margin is not None and not args.margin > 0:
        p.error(f"--margin: {args.margin:g} is not above 0")
    try:
        notes: list[str] = []
        honest = [read_compared(s, notes) for s in args.study]
        twins = [read_compared(s, notes) for s in args.claimed]
        comparison = build_comparison(
            _runs(honest),
            args.reference,
            args.metric,
            claimed_runs=_runs(twins) if twins else None,
            studies=[s.experiment for d in honest for s in d.studies],
            claimed_studies=[s.experiment for d in twins for s in d.studies],
            margin=args.margin,
        )
    except DashboardError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    extra: dict[Path, str] = {}
    if args.format == "csv":
        text = render_csv(comparison)
        if comparison.claimed and args.out:
            extra[Path(args.out).with_suffix(".claimed.csv")] = render_claimed_csv(comparison)
        elif comparison.claimed:
            print("note: --format csv prints the main table only; give --out for the claimed table", file=sys.stderr)
        for note in comparison.notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        text = render_markdown(comparison) if args.format == "md" else render_latex(comparison)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        for path, body in extra.items():
            path.write_text(body, encoding="utf-8")
        print("\n".join([args.out, *map(str, extra)]))
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
