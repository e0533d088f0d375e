"""Learning curves: per epoch, the search metric, NMI, spectral decay and the training loss of each group's best
search run (on the split the search saw: ``val/`` names with validation, ``test/`` without), and the final
stage's runs on the test classes."""

from __future__ import annotations

from matplotlib.ticker import MaxNLocator

from dashboards.load import DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import as_test, base_name, best_configs, final_runs, split_of
from trainables.schema import record as R
from trainables.schema.metric_names import NMI, OBJECTIVE, SPECTRAL_DECAY, TRAIN_LOSS

__all__ = ["build", "search_keys"]

_MAX_RUNS = 10


def search_keys(data: DashboardData) -> list[str]:
    """The search metric, then NMI and spectral decay on the split the search metric comes from, the loss."""
    split = split_of(data.metric)
    return list(dict.fromkeys((data.metric, split + NMI, split + SPECTRAL_DECAY, TRAIN_LOSS)))


def _draw(
    panel: Panel, data: DashboardData, name: str, caption: str, lines: list[tuple[str, str]], keys: list[str]
) -> bool:
    """One axis per key that some of ``lines`` (``(run_id, label)``) logged per epoch; False if none did."""
    run_ids = [run_id for run_id, _ in lines]
    keys = [k for k in keys if not data.history_of(run_ids, k).is_empty()]
    if not keys:
        return False
    fig, axes = new_figure(len(keys), height=3.2 + 0.18 * len(lines))
    for i, (run_id, label) in enumerate(lines):
        for ax, key in zip(axes, keys):
            h = data.history_of([run_id], key)
            ax.plot(h["step"], h["value"], "-o", ms=3, color=f"C{i % 10}", label=label)
    for ax, key in zip(axes, keys):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)), fontsize=7)
    panel.figure(name, caption, fig)
    return True


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "curves",
        "Learning curves",
        "Per epoch, the best search run of each family × dataset × noise group (at most ten) on the split the "
        "search saw (<code>val/</code> names: validation classes; <code>test/</code>: a study selecting on the "
        "test classes), and the final stage's runs on the test classes.",
    )
    best = best_configs(data)
    if best.is_empty() or data.history.is_empty():
        panel.skipped = f"no search run reported {data.metric} per epoch"
        return panel
    lines = []
    for r in best.head(_MAX_RUNS).iter_rows(named=True):
        noise = f"p={r[R.NOISE_RATIO]:g}" + (" topline" if r[R.SUBSET] == "clean_only" else "")
        lines.append((r["best_run_id"], f"{r[R.FAMILY]} {r[R.DATASET]} {noise} ({r[R.BEST_TRIAL_ID]})"))
    drawn = _draw(panel, data, "best", "Best search run of each group, per epoch", lines, search_keys(data))

    final = final_runs(data).sort(R.GROUP, "start_time").head(_MAX_RUNS)
    if not final.is_empty():
        primary = as_test(data, data.metric if split_of(data.metric) else OBJECTIVE)
        keys = list(dict.fromkeys((primary, as_test(data, NMI), as_test(data, SPECTRAL_DECAY), TRAIN_LOSS)))
        lines = [(r["run_id"], f"{r[R.GROUP] or 'final'} seed {r[R.SEED]}") for r in final.iter_rows(named=True)]
        drawn |= _draw(
            panel,
            data,
            "final",
            f"Final stage: each seed's {base_name(primary)} on the test classes, per epoch",
            lines,
            keys,
        )
    if not drawn:
        panel.skipped = f"no best run logged {data.metric} per epoch"
    return panel
