"""``python -m dashboards.compare`` on synthetic MLflow stores with hand-set final runs: the CSV's columns, a paired
difference and a recovered share checked by hand, Welch for unpaired cells, claimed vs honest, exit-2 errors."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from mlflow import MlflowClient
from scipy import stats as sps

from dashboards.compare import cells, render
from dashboards.compare import cli as compare
from dashboards.compare import rows as compare_rows
from dashboards.load import DashboardData
from dashboards.panels import NoteBlock, TableBlock, robustness
from tests.dashboards.synthetic import _params, _run, _tags

REPO = Path(__file__).resolve().parents[3]
SPEC = REPO / "search_spaces" / "bspml_compare_glyphs_reduced.yaml"

#: (family, p, subset) → final seed → test Recall@1 of the honest study.
HONEST = {
    ("ms", 0.0, "all"): {0: 0.70, 1: 0.74, 2: 0.66},
    ("ms", 0.2, "all"): {0: 0.60, 1: 0.58, 2: 0.53},
    ("bspml", 0.0, "all"): {0: 0.71, 1: 0.73, 2: 0.68},
    ("bspml", 0.2, "all"): {0: 0.64, 1: 0.61, 2: 0.56},
    ("ms", 0.2, "clean_only"): {0: 0.65, 1: 0.66, 2: 0.62},
    # Seeds 3-5: nothing to pair with ms at p = 0.4 (seeds 0-2) → Welch.
    ("ms", 0.4, "all"): {0: 0.50, 1: 0.47, 2: 0.45},
    ("bspml", 0.4, "all"): {3: 0.52, 4: 0.49, 5: 0.50},
}
#: The validation.kind: none twin: its selection flatters ms at p = 0.2 by 0.02, 0.03, 0.01.
CLAIMED = {
    ("ms", 0.0, "all"): HONEST[("ms", 0.0, "all")],
    ("ms", 0.2, "all"): {0: 0.62, 1: 0.61, 2: 0.54},
}


def make_study(root: Path, name: str, finals: dict, *, selection: str = "validation", spms: bool = False) -> Path:
    """A study directory ``root/name`` (spec.yaml + mlflow.db) whose final stage holds ``finals``; ``spms`` adds a
    search run of a family that never reached the final stage."""
    study_dir = root / name
    study_dir.mkdir(parents=True)
    (study_dir / "spec.yaml").write_text(
        SPEC.read_text().replace("name: bspml_compare_glyphs_reduced", f"name: {name}")
    )
    client = MlflowClient(f"sqlite:///{study_dir / 'mlflow.db'}")
    exp = client.create_experiment(name, artifact_location=(study_dir / "artifacts").as_uri())
    parent = client.create_run(exp, run_name=name, tags={"dmlstudy.role": "study", "selection": selection})
    pid = parent.info.run_id
    for (family, p, subset), per_seed in finals.items():
        for seed, value in per_seed.items():
            tags = _tags(family, p, seed, subset, kind="per_class", stage="final", group=f"{family} {p} {subset}")
            tags["selection"] = selection
            lr = 1e-3 if selection == "validation" or p == 0.0 else 3e-3
            params = _params(family, p, seed, subset, **{"train.optimizer.lr": lr})
            _run(client, exp, pid, f"{family}_{p}_{subset}_{seed}", tags, params, {"test/recall_at_1": value})
    if spms:
        _run(client, exp, pid, "spms_search", _tags("spms", 0.2, 0), _params("spms", 0.2, 0), {"val/recall_at_1": 0.5})
    client.set_terminated(pid, "FINISHED")
    return study_dir


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    return make_study(root, "honest", HONEST, spms=True), make_study(root, "twin", CLAIMED, selection="test")


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _row(rows: list[dict[str, str]], family: str, p: str, subset: str = "all") -> dict[str, str]:
    return next(r for r in rows if (r["family"], r["noise_ratio"], r["subset"]) == (family, p, subset))


def test_csv_columns_and_a_hand_checked_paired_difference_and_recovered_share(studies, tmp_path, capsys):
    honest, _ = studies
    out = tmp_path / "table.csv"
    assert compare.main([str(honest), "--reference", "ms", "--format", "csv", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.splitlines()[0] == (
        "family,noise_kind,noise_ratio,subset,metric,n_seeds,mean,std,ci95_low,ci95_high,delta,delta_ci95_low,"
        "delta_ci95_high,delta_significant,recovered_share,recovered_ci95_low,recovered_ci95_high"
    )
    rows = _csv(text)
    assert len(rows) == len(HONEST)
    # The reference comes first; p = 0 has no noise kind whatever the tag said.
    assert rows[0]["family"] == "ms" and _row(rows, "ms", "0")["noise_kind"] == "none"
    b = _row(rows, "bspml", "0.2")
    assert b["noise_kind"] == "per_class" and b["metric"] == "test/recall_at_1" and b["n_seeds"] == "3"
    # By hand: bspml − ms per seed at p = 0.2: 0.04, 0.03, 0.03 → mean 0.033333, sd 0.005774, se 0.003333,
    # t₀.₉₇₅,₂ = 4.302653 → [0.018991, 0.047676].
    assert float(b["delta"]) == pytest.approx(0.033333, abs=1e-6)
    assert float(b["delta_ci95_low"]) == pytest.approx(0.018991, abs=1e-5)
    assert float(b["delta_ci95_high"]) == pytest.approx(0.047676, abs=1e-5)
    # Recovered share by hand: means bspml 0.603333, ms_p 0.57, ms_0 0.70 → 0.033333 / 0.13 = 0.256410.
    assert float(b["recovered_share"]) == pytest.approx(0.256410, abs=1e-6)
    assert float(b["recovered_ci95_low"]) <= 0.256410 <= float(b["recovered_ci95_high"])
    # The cell's own interval is the t-interval of its three values.
    x = np.array([0.64, 0.61, 0.56])
    half = sps.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert float(b["ci95_low"]) == pytest.approx(x.mean() - half, abs=1e-6)
    # The topline row is compared with ms on the noisy labels: 0.05, 0.08, 0.09.
    top = _row(rows, "ms", "0.2", "clean_only")
    assert float(top["delta"]) == pytest.approx(0.073333, abs=1e-6)
    # The reference's own rows have no difference or share.
    assert _row(rows, "ms", "0.2")["delta"] == "" and _row(rows, "ms", "0.2")["recovered_share"] == ""
    # Holm over the 4 comparisons: the paired p-values, adjusted, decide the marks.
    pvalues = {
        key: sps.ttest_rel(
            [HONEST[key][s] for s in range(3)], [HONEST[(("ms",) + key[1:2] + ("all",))][s] for s in range(3)]
        ).pvalue
        for key in [("bspml", 0.0, "all"), ("bspml", 0.2, "all"), ("ms", 0.2, "clean_only")]
    }
    welch = sps.ttest_ind([0.52, 0.49, 0.50], [0.50, 0.47, 0.45], equal_var=False).pvalue
    ordered = sorted([*pvalues.values(), welch])
    adjusted = np.maximum.accumulate([min(1.0, (4 - i) * p) for i, p in enumerate(ordered)])
    expected = dict(zip(ordered, adjusted))
    assert b["delta_significant"] == str(expected[pvalues[("bspml", 0.2, "all")]] < 0.05).lower()
    assert top["delta_significant"] == str(expected[pvalues[("ms", 0.2, "clean_only")]] < 0.05).lower()
    # Unpaired cell: Welch's interval, and the command says so.
    w = _row(rows, "bspml", "0.4")
    low, high = sps.ttest_ind([0.52, 0.49, 0.50], [0.50, 0.47, 0.45], equal_var=False).confidence_interval()
    assert (float(w["delta_ci95_low"]), float(w["delta_ci95_high"])) == (
        pytest.approx(low, abs=1e-6),
        pytest.approx(high, abs=1e-6),
    )
    assert "bspml per_class p=0.4: no matching seeds with ms: Welch interval" in capsys.readouterr().err


def test_markdown_layout_aggregates_and_claimed_vs_honest(studies, tmp_path):
    honest, twin = studies
    out = tmp_path / "table.md"
    assert compare.main([str(honest), "--reference", "ms", "--claimed", str(twin), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| family | p=0 | p=0.2 | p=0.4 |" in text
    assert "| bspml | 0.7067 ± 0.0252 [0.6442, 0.7692] (n=3)" in text and "†" in text and "Legend:" in text
    assert "Δ +0.0333 [+0.0190, +0.0477]" in text and "share +0.26" in text
    # IQM of bspml's 9 scores / ms's clean mean 0.70 (cut 2 from each end), by hand.
    scores = sorted(v / 0.70 for k, vals in HONEST.items() if k[0] == "bspml" for v in vals.values())
    assert f"| bspml | 3 | {np.mean(scores[2:7]):.4f} [" in text
    # The verdicts open the output. P(bspml > ms) pairs by seed: at p = 0.2 bspml wins seeds 0, 1, 2 (.64 > .60,
    # .61 > .58, .56 > .53): 3 of 3, Clopper–Pearson [0.025^(1/3), 1]; at p = 0, seeds 0 and 1 of 3 (.71 > .70,
    # .73 < .74, .68 > .66: seeds 0 and 2). Unpaired p = 0.4 (Welch) has no P.
    assert text.index("Verdicts on test/recall_at_1") < text.index("mean ± std [95 % t-CI]")
    assert "| bspml | per_class p=0.2 | better | +0.0333 [+0.0190, +0.0477] |" in text
    assert f"| 1.00 [{0.025 ** (1 / 3):.2f}, 1.00] |" in text and "| 0.67 [" in text
    assert "| bspml | per_class p=0.4 | not detectable at this budget |" in text and "| — |" in text
    # Claimed vs honest: ms at p = 0.2 flattered by 0.02, 0.03, 0.01 → +0.020 with a paired t interval.
    d = sps.ttest_rel([0.62, 0.61, 0.54], [0.60, 0.58, 0.53]).confidence_interval()
    assert f"| ms | per_class p=0.2 | 0.5700 | 0.5900 | +0.0200 [{d.low:+.4f}, {d.high:+.4f}]" in text
    assert "| different |" in text and "| ms | p=0 | 0.7000 | 0.7000 | +0.0000" in text
    claimed = tmp_path / "table.csv"
    assert (
        compare.main(
            [str(honest), "--reference", "ms", "--claimed", str(twin), "--format", "csv", "--out", str(claimed)]
        )
        == 0
    )
    rows = _csv((tmp_path / "table.claimed.csv").read_text())
    assert [r["optimism"] for r in rows] == ["0", "0.02"] and rows[1]["paired"] == "true"
    tex = tmp_path / "table.tex"
    assert compare.main([str(honest), "--reference", "ms", "--format", "tex", "--out", str(tex)]) == 0
    latex = tex.read_text()
    assert r"\begin{tabular}{lccc}" in latex and r"0.7067 $\pm$ 0.0252 [0.6442, 0.7692] (n=3)" in latex
    assert r"$\Delta$ +0.0333 [+0.0190, +0.0477]$^{*}$" in latex and latex.count(r"\begin{table}") == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reference", "prism"], "--reference: unknown family 'prism'; families with final runs: bspml, ms"),
        (["--reference", "ms", "--metric", "test/nmi"], "--metric: no final run logged 'test/nmi'"),
    ],
)
def test_bad_reference_or_metric_exit_2_with_one_line(studies, tmp_path, capsys, args, message):
    honest, _ = studies
    out = tmp_path / "never.csv"
    assert compare.main([str(honest), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists()


def test_a_study_without_final_stage_or_a_missing_path_exit_2(tmp_path, capsys):
    bare = make_study(tmp_path, "bare", {}, spms=True)
    capsys.readouterr()  # MLflow's own lines on creating the store
    assert compare.main([str(bare), "--reference", "ms"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no finished final-stage runs" in err and str(bare) in err
    assert compare.main([str(tmp_path / "nowhere"), "--reference", "ms"]) == 2
    assert "no such spec file or study directory" in capsys.readouterr().err
    # A spec file whose study never ran: no store.
    assert compare.main([str(SPEC), "--reference", "ms"]) == 2
    assert capsys.readouterr().err.startswith("error: STUDY: ")


def test_the_robustness_panel_renders_the_commands_tables(studies):
    honest, twin = (compare.read_study(str(s)) for s in studies)
    runs = pl.concat([honest.runs, twin.runs], how="diagonal_relaxed")
    data = DashboardData(
        "sqlite://", honest.studies + twin.studies, runs, pl.DataFrame(), pl.DataFrame(), pl.DataFrame()
    )
    assert [s.selection for s in data.studies] == ["validation", "test"]
    panel = robustness.build(data)
    shown = [
        (b.caption, b.table.columns, [list(r) for r in b.table.iter_rows()])
        for b in panel.blocks
        if isinstance(b, TableBlock) and b.name.startswith("robustness_compare_")
    ]
    expected = compare_rows.build_comparison(
        honest.runs, "ms", "test/recall_at_1", claimed_runs=twin.runs, studies=["honest"], claimed_studies=["twin"]
    )
    assert shown == render.text_tables(expected)
    assert shown[-1][0].startswith("Claimed (selected on the test classes: twin)")
    assert any(isinstance(b, NoteBlock) and b.text.startswith("Legend:") for b in panel.blocks)


def test_a_reference_that_did_not_drop_is_noted():
    cell = cells.Cell
    values = {
        cell("ms", "none", 0.0, "all"): {0: 0.50, 1: 0.50},
        cell("ms", "per_class", 0.2, "all"): {0: 0.55, 1: 0.53},
        cell("bspml", "per_class", 0.2, "all"): {0: 0.52, 1: 0.50},
    }
    rows, notes = compare_rows.compare(values, "ms", "test/recall_at_1")
    assert notes == ["ms did not drop from p=0 to per_class p=0.2 (-0.040): the recovered share there has no meaning"]
    # (0.51 − 0.54) / (0.50 − 0.54) = 0.75, printed but flagged.
    assert rows[-1].share is not None and rows[-1].share[0] == pytest.approx(0.75)


def test_study_labels_drop_the_common_prefix_at_a_word_boundary():
    names = ["noise_grid_glyphs_ms", "noise_grid_glyphs_prism_given", "noise_grid_glyphs_prism_estimated"]
    assert cells.study_labels(names) == {n: n.removeprefix("noise_grid_glyphs_") for n in names}
    # The shared "prism_g" of the two PRISM arms is cut back to "prism_", never inside a word.
    assert cells.study_labels(["grid_prism_given", "grid_prism_grid"]) == {
        "grid_prism_given": "given",
        "grid_prism_grid": "grid",
    }
    assert cells.study_labels(["only"]) == {"only": "only"}


def test_two_studies_of_one_family_keep_a_row_each(tmp_path, capsys):
    """PRISM run twice (rate given / estimated) as two studies beside an ms study: both PRISM rows are kept, each
    labelled by its study and compared with the one ms reference; a family only one study holds keeps its name."""
    ms = {("ms", 0.0, "all"): {0: 0.70, 1: 0.72}, ("ms", 0.2, "all"): {0: 0.60, 1: 0.58}}
    given = {("prism", 0.0, "all"): {0: 0.71, 1: 0.69}, ("prism", 0.2, "all"): {0: 0.66, 1: 0.65}}
    estimated = {("prism", 0.2, "all"): {0: 0.63, 1: 0.61}, ("bspml", 0.2, "all"): {0: 0.62, 1: 0.60}}
    dirs = [
        make_study(tmp_path, f"grid_{name}", finals)
        for name, finals in (("ms", ms), ("prism_given", given), ("prism_estimated", estimated))
    ]
    capsys.readouterr()
    out = tmp_path / "table.csv"
    assert compare.main([*map(str, dirs), "--reference", "ms", "--format", "csv", "--out", str(out)]) == 0
    rows = _csv(out.read_text())
    assert sorted((r["family"], r["noise_ratio"]) for r in rows) == [
        ("bspml", "0.2"),
        ("ms", "0"),
        ("ms", "0.2"),
        ("prism [prism_estimated]", "0.2"),
        ("prism [prism_given]", "0"),
        ("prism [prism_given]", "0.2"),
    ]
    # Each row holds its own study's seeds: Δ against ms at p = 0.2, by hand.
    assert float(_row(rows, "prism [prism_given]", "0.2")["delta"]) == pytest.approx(0.065)
    assert float(_row(rows, "prism [prism_estimated]", "0.2")["delta"]) == pytest.approx(0.03)
    assert float(_row(rows, "bspml", "0.2")["delta"]) == pytest.approx(0.02)
    # Markdown: one table row per study's PRISM.
    text = render.render_markdown(
        compare_rows.build_comparison(compare._runs(map(compare.read_study, map(str, dirs))), "ms", "test/recall_at_1")
    )
    assert "| prism [prism_given] |" in text and "| prism [prism_estimated] |" in text
