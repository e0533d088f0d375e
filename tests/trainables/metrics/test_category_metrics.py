"""Per-category Recall@1 and MAP@R (a CSV dataset's ``category`` column) against a brute-force numpy reference; the
overall metrics are the means over every query of the same per-query values, so they are unchanged."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from harness.fake_data import write_cub
from study.data._export import export_csv
from study.intake.spec_reader import parse_spec
from trainables.metrics.categories import per_category_metrics
from trainables.metrics.retrieval import retrieval_metrics
from trainables.schema.metric_names import MAP_AT_R, OBJECTIVE, on_test, per_category, split_per_category


def brute_force(query, labels, categories, gallery=None):
    """Per category: the mean over its queries of Recall@1 and of AP@R, by sorting every similarity in loops."""
    base, base_labels = (query, labels) if gallery is None else gallery
    per_query: dict[str, list[tuple[float, float | None]]] = {}
    for i in range(len(query)):
        sims = [(float(query[i] @ base[j]), j) for j in range(len(base)) if gallery is not None or j != i]
        order = [j for _, j in sorted(sims, key=lambda t: -t[0])]
        same = [base_labels[j] == labels[i] for j in order]
        r = sum(same)
        ap = None
        if r:
            hits, total = 0, 0.0
            for rank, s in enumerate(same[:r], start=1):
                if s:
                    hits += 1
                    total += hits / rank
            ap = total / r
        per_query.setdefault(str(categories[i]), []).append((float(same[0]), ap))
    out = {}
    for category, rows in per_query.items():
        aps = [ap for _, ap in rows if ap is not None]
        out[per_category(category, OBJECTIVE)] = float(np.mean([hit for hit, _ in rows]))
        out[per_category(category, MAP_AT_R)] = float(np.mean(aps)) if aps else float("nan")
    return out


def _embeddings(rng, n, dim=8):
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_two_categories_match_the_brute_force_reference_and_average_to_the_overall_metrics():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 5)
    categories = np.where(labels < 2, "shoes", "bags")  # 10 queries vs 20
    x = _embeddings(rng, len(labels))
    x[labels == 0] += 0.8 * x[labels == 0][0]  # one tight class, so the two categories score differently
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = per_category_metrics(x, labels, categories)
    want = brute_force(x, labels, categories)
    assert (
        got.keys()
        == want.keys()
        == {
            "category/bags/recall_at_1",
            "category/bags/map_at_r",
            "category/shoes/recall_at_1",
            "category/shoes/map_at_r",
        }
    )
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-6), name
    assert got["category/shoes/map_at_r"] != pytest.approx(got["category/bags/map_at_r"], abs=0.05)
    # Query-weighted, the categories give back the overall numbers, which per-category reporting leaves as they were.
    overall = retrieval_metrics(x, labels, (1,))
    shares = {"shoes": 10 / 30, "bags": 20 / 30}
    for metric in (OBJECTIVE, MAP_AT_R):
        mixed = sum(share * got[per_category(c, metric)] for c, share in shares.items())
        assert mixed == pytest.approx(overall[metric], abs=1e-6)


def test_queries_against_a_gallery_and_a_category_without_relevant_items():
    rng = np.random.default_rng(1)
    q_labels = np.array([0, 0, 1, 1, 2, 2, 9])  # class 9 is not in the gallery: R = 0, left out of MAP@R
    g_labels = np.repeat(np.arange(3), 4)
    categories = np.array(["a", "a", "a", "b", "b", "b", "c"])
    q, g = _embeddings(rng, len(q_labels)), _embeddings(rng, len(g_labels))
    got = per_category_metrics(q, q_labels, categories, gallery=(g, g_labels))
    want = brute_force(q, q_labels, categories, gallery=(g, g_labels))
    assert np.isnan(got["category/c/map_at_r"]) and np.isnan(want["category/c/map_at_r"])
    assert got["category/c/recall_at_1"] == 0.0
    for name in want:
        if not np.isnan(want[name]):
            assert got[name] == pytest.approx(want[name], abs=1e-6), name


def test_metric_names_keep_mlflow_characters_and_split_back():
    assert per_category("Men/Shoes & Bags", MAP_AT_R) == "category/Men_Shoes _ Bags/map_at_r"
    assert split_per_category("test/category/Men_Shoes _ Bags/map_at_r") == ("Men_Shoes _ Bags", MAP_AT_R)
    assert per_category("", OBJECTIVE) == "category/none/recall_at_1"
    assert split_per_category(on_test(OBJECTIVE)) is None


def _cub_csv_with_categories(tmp_path):
    """Fake CUB exported as OML's CSV, with a category column: odd classes are ``small``, even ones ``large``."""
    write_cub(tmp_path, n_classes=8, per_class=4, size=(24, 20))
    path, _ = export_csv("cub200", tmp_path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[0], "category"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "category": "small" if int(row["label"]) % 2 else "large"})
    return path


def test_a_csv_trial_reports_each_category_at_its_last_epoch_as_the_reference_computes_it(tmp_path):
    from trainables.data import load_dataset
    from trainables.loop import TrialRun

    path = _cub_csv_with_categories(tmp_path)
    spec = parse_spec(
        {
            "name": "csv_categories",
            "family": "ms",
            "dataset": {"name": "csv", "root": str(tmp_path), "annotations": path.name, "image_size": 16},
            "model": {"backbone": "resnet18", "pretrained": False, "embedding_dim": 16},
            "train": {"epochs": 1, "classes_per_batch": 2, "samples_per_class": 2, "num_workers": 0},
            "validation": {"kind": "none"},
        }
    )
    data = load_dataset(spec.dataset, seed=0)
    test = data.test
    assert test.categories is not None
    labels_in_file = {row["path"]: row for row in csv.DictReader(path.open())}
    assert [labels_in_file[p]["category"] for p in test.items] == list(test.categories)
    assert set(test.categories) == {"small", "large"}
    run = TrialRun.single(spec, data)
    metrics = run.run_epoch()
    embeddings = run.member.embed(test).cpu().numpy()
    want = brute_force(embeddings, test.labels, test.categories)
    assert {k for k in metrics if "category/" in k} == {on_test(k) for k in want}
    for name, value in want.items():
        assert metrics[on_test(name)] == pytest.approx(value, abs=1e-6), name
    assert metrics[on_test(OBJECTIVE)] == pytest.approx(retrieval_metrics(embeddings, test.labels, (1,))[OBJECTIVE])
