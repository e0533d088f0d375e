"""Component costs, each against its reference: evaluation vs the faiss floor and vs pytorch-metric-learning's
``AccuracyCalculator``; every loss family's forward+backward vs its PML counterpart; the BSPML w-step as a share
of a θ-epoch and its growth in N (the real :func:`trainables.families.self_paced.ms_terms`).

Every figure is the median [min-max] of ``repeats`` timings after one warm-up, with the torch threads a trial
gets (``--threads``, default 1). Functions return rows; :mod:`benchmarks.__main__` prints them.

    PYTHONPATH=$PWD python -m benchmarks.components [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["timed", "evaluation", "losses", "bspml_share", "bspml_growth", "Row"]

#: (label, median, min, max, note): one printed line.
Row = tuple[str, float, float, float, str]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, float, float]:
    """(median, min, max) seconds of ``fn()`` over ``repeats`` runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), min(times), max(times)


def _clustered(n: int, dim: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalised embeddings with class structure (class centre + noise), as a trained model gives."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, dim)).astype(np.float32)
    emb = centres[labels] + 1.5 * rng.standard_normal((n, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return emb.astype(np.float32), labels.astype(np.int64)


def _faiss_floor(emb: np.ndarray, labels: np.ndarray, k: int, seed: int) -> None:
    """The raw faiss work our evaluation cannot avoid: one exact kNN search (k neighbours + self) and the k-means
    (with the restarts) that NMI needs."""
    import faiss

    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    index.search(emb, k + 1)
    classes = int(np.unique(labels).size)
    nredo = 5 if classes <= 1000 else 1  # the restarts trainables.metrics.retrieval.nmi runs
    km = faiss.Kmeans(emb.shape[1], classes, niter=20, nredo=nredo, seed=seed, verbose=False, min_points_per_centroid=1)
    km.train(emb)
    km.index.search(emb, 1)


def evaluation(sizes: list[int], dim: int, per_class: int, repeats: int, with_pml: bool = True) -> list[Row]:
    """Our :func:`~trainables.metrics.retrieval.retrieval_metrics` (Recall@1/2/4/8, MAP@R, R-precision, NMI, spectral
    decay) vs the faiss floor (kNN with k = the largest class size, + k-means) and vs PML's ``AccuracyCalculator``
    (precision@1, R-precision, MAP@R, NMI) on the same embeddings."""
    from trainables.metrics.retrieval import retrieval_metrics

    rows: list[Row] = []
    for n in sizes:
        emb, labels = _clustered(n, dim, max(2, n // per_class))
        k = int(np.bincount(labels).max())
        ours = timed(lambda: retrieval_metrics(emb, labels, (1, 2, 4, 8), seed=0), repeats)
        floor = timed(lambda: _faiss_floor(emb, labels, k, 0), repeats)
        rows.append((f"eval N={n} x {dim}: ours (R@k, MAP@R, NMI)", *ours, ""))
        rows.append(
            (f"eval N={n} x {dim}: faiss floor (kNN + k-means)", *floor, f"ours/floor {ours[0] / floor[0]:.2f}x")
        )
        if with_pml:
            from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

            calc = AccuracyCalculator(
                include=("precision_at_1", "r_precision", "mean_average_precision_at_r", "NMI"), k="max_bin_count"
            )
            t_emb, t_labels = torch.from_numpy(emb), torch.from_numpy(labels)
            pml = timed(lambda: calc.get_accuracy(t_emb, t_labels), repeats)
            rows.append((f"eval N={n} x {dim}: PML AccuracyCalculator", *pml, f"PML/ours {pml[0] / ours[0]:.2f}x"))
    return rows


def _pml_counterpart(name: str, family: Any) -> tuple[Any, Any] | None:
    """(loss, miner) of PML for family ``name``: a PML-served family's own modules used raw; the weighted MS
    families (bspml, spms) against PML's MS loss + miner with their α, β, ρ, ε; ``None`` if PML has none."""
    from pytorch_metric_learning import losses as pml_losses
    from pytorch_metric_learning import miners as pml_miners

    from trainables.families.base import PmlLossFamily

    if isinstance(family, PmlLossFamily):
        return family.build_criterion(family.params), family.build_miner(family.params)
    if name in ("bspml", "spms"):
        p = family.params
        return (
            pml_losses.MultiSimilarityLoss(alpha=p.ms_alpha, beta=p.ms_beta, base=p.ms_base),
            pml_miners.MultiSimilarityMiner(epsilon=p.ms_epsilon),
        )
    return None


def losses(batch: int, dim: int, classes_per_batch: int, repeats: int, names: list[str] | None = None) -> list[Row]:
    """Forward+backward of each family's ``compute_loss`` on one P x K batch of ``dim``-d embeddings, vs PML."""
    from trainables.families.base import Batch, FamilyContext
    from trainables.families.registry import FAMILY_NAMES, get_family

    rows: list[Row] = []
    g = torch.Generator().manual_seed(0)
    num_train = 10 * batch
    train_labels = torch.arange(num_train) % (2 * classes_per_batch)
    for name in names or list(FAMILY_NAMES):
        try:
            cls = get_family(name)
            ctx = FamilyContext(
                num_train=num_train,
                num_classes=2 * classes_per_batch,
                train_labels=train_labels,
                embedding_dim=dim,
                device=torch.device("cpu"),
                seed=0,
            )
            family = cls(cls.parse_params({}), ctx)
            # The trial's network, for the families that keep a copy of it (DiVA's momentum key encoder): a linear
            # map of the dummy 1-d inputs, so its own cost is negligible next to the loss.
            family.bind_model(torch.nn.Linear(1, dim))
            views = family.num_views
            labels = torch.arange(batch) % classes_per_batch
            base = torch.randn(batch * views, dim, generator=g)
            indices = torch.arange(batch)
            inputs = torch.zeros(batch * views, 1)

            def ours(fam: Any = family, base: torch.Tensor = base, labels: torch.Tensor = labels) -> None:
                x = base.clone().requires_grad_(True)
                terms = fam.compute_loss(F.normalize(x, dim=1), Batch(inputs, labels, indices))
                torch.stack(list(terms.values())).sum().backward()

            t_ours = timed(ours, repeats)
        except Exception as e:  # noqa: BLE001 - a family that needs more context is reported, not fatal
            rows.append((f"loss {name}", float("nan"), float("nan"), float("nan"), f"skipped: {type(e).__name__}"))
            continue
        counterpart = _pml_counterpart(name, family) if views == 1 else None
        if counterpart is None:
            rows.append((f"loss {name} (ours, {batch}x{dim})", *t_ours, "no PML counterpart"))
            continue
        loss_fn, miner = counterpart

        def pml(base: torch.Tensor = base, labels: torch.Tensor = labels) -> None:
            x = F.normalize(base.clone().requires_grad_(True), dim=1)
            pairs = miner(x, labels) if miner is not None else None
            loss_fn(x, labels, pairs).backward()

        t_pml = timed(pml, repeats)
        rows.append((f"loss {name} (ours, {batch}x{dim})", *t_ours, f"PML/ours {t_pml[0] / t_ours[0]:.2f}x"))
        rows.append((f"loss {name} (PML loss+miner)", *t_pml, ""))
    return rows


def bspml_share(repeats: int, batches_per_epoch: int | None = None) -> list[Row]:
    """The BSPML w-step (ξ terms + solver, :meth:`BSPMLFamily.weight_step`) and the train-set embedding pass it
    needs, as a share of one θ-epoch on noisy digits."""
    from study.intake.spec_reader import parse_spec
    from trainables.loop import TrialRun

    train: dict[str, Any] = {"epochs": 3, "classes_per_batch": 5, "samples_per_class": 8}
    if batches_per_epoch:
        train["batches_per_epoch"] = batches_per_epoch
    spec = parse_spec(
        {
            "name": "bench",
            "family": "bspml",
            "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
            "model": {"backbone": "small_cnn", "embedding_dim": 64},
            "train": train,
        }
    )
    trial = TrialRun.single(spec).member  # the member: θ-epoch, embedding pass and w-step timed apart
    epoch = timed(trial.train_epoch, repeats)
    emb = trial.embed(trial.data.train)
    embed = timed(lambda: trial.embed(trial.data.train), repeats)
    step = timed(lambda: trial.family.weight_step(emb), repeats)  # type: ignore[operator]
    n = len(trial.data.train)
    return [
        (f"bspml digits N={n}: θ-epoch", *epoch, ""),
        (f"bspml digits N={n}: embed train split", *embed, ""),
        (
            f"bspml digits N={n}: w-step",
            *step,
            f"{100 * step[0] / epoch[0]:.1f}% of the θ-epoch ({100 * (step[0] + embed[0]) / epoch[0]:.1f}% with embed)",
        ),
    ]


def bspml_growth(sizes: list[int], dim: int, classes: int, repeats: int) -> list[Row]:
    """The real ``ms_terms`` (Eq. 3's ξ⁺/ξ⁻, one chunked N x N pass) at growing N; O(N²) expected."""
    from trainables.families.bspml.loss import BSPMLParams
    from trainables.families.self_paced import ms_terms

    prm = BSPMLParams()
    rows: list[Row] = []
    first: tuple[int, float] | None = None
    for n in sizes:
        g = torch.Generator().manual_seed(0)
        emb = F.normalize(torch.randn(n, dim, generator=g), dim=1)
        labels = torch.randint(0, min(classes, n // 2), (n,), generator=g)
        t = timed(lambda: ms_terms(emb, labels, prm.ms_alpha, prm.ms_beta, prm.ms_base, prm.chunk_size), repeats)
        note = ""
        if first is None:
            first = (n, t[0])
        else:
            note = f"x{t[0] / first[1]:.2f} for N x{n / first[0]:.1f} (O(N^2): x{(n / first[0]) ** 2:.1f})"
        rows.append((f"bspml ms_terms N={n} x {dim}", *t, note))
    return rows


def format_rows(rows: list[Row]) -> list[str]:
    return [f"  {label:<52} {med:8.4f} s [{lo:.4f}-{hi:.4f}]  {note}".rstrip() for label, med, lo, hi, note in rows]


def run(quick: bool, repeats: int, emit: Callable[[str], None] = print) -> None:
    """Every component section, each ``emit``-ted (printed) as soon as it is measured; ``quick`` shrinks sizes to a
    smoke test."""
    emit(f"components (torch threads {torch.get_num_threads()}; median [min-max] of {repeats})")
    if quick:
        sections = [
            lambda: evaluation([1000], 128, 10, repeats),
            lambda: losses(32, 64, 4, repeats, names=["ms", "bspml", "contrastive"]),
            lambda: bspml_share(repeats, batches_per_epoch=2),
            lambda: bspml_growth([500, 1000], 64, 100, repeats),
        ]
    else:
        sections = [
            *(lambda n=n: evaluation([n], 512, 50, repeats) for n in (5900, 20000, 60000)),
            lambda: losses(64, 512, 8, repeats),
            lambda: bspml_share(repeats),
            lambda: bspml_growth([2000, 4000, 8000], 512, 1000, repeats),
        ]
    for section in sections:
        for line in format_rows(section()):
            emit(line)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run(args.quick, args.repeats if not args.quick else 2, emit=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
