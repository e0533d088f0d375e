"""Learning curves of the best trials: the objective, NMI, spectral decay and the training loss per epoch."""

from __future__ import annotations

from matplotlib.ticker import MaxNLocator

from dashboards.load import DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import best_configs
from study.metric_names import NMI, SPECTRAL_DECAY, TRAIN_LOSS

__all__ = ["build"]

_MAX_RUNS = 10


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "curves", "Learning curves of the best trials",
        "Per epoch, the best run of each family × dataset × noise group (at most ten).",
    )
    best = best_configs(data)
    if best.is_empty() or data.history.is_empty():
        panel.skipped = f"no run reported {data.metric} per epoch"
        return panel
    keys = [k for k in dict.fromkeys((data.metric, NMI, SPECTRAL_DECAY, TRAIN_LOSS)) if not data.history_of(best["best_run_id"].to_list(), k).is_empty()]
    if not keys:
        panel.skipped = f"no best run logged {data.metric} per epoch"
        return panel
    fig, axes = new_figure(len(keys), height=3.2 + 0.18 * min(len(best), _MAX_RUNS))
    for i, r in enumerate(best.head(_MAX_RUNS).iter_rows(named=True)):
        noise = f"p={r['noise_ratio']:g}" + (" topline" if r["subset"] == "clean_only" else "")
        label = f"{r['family']} {r['dataset']} {noise} ({r['best_trial_id']})"
        for ax, key in zip(axes, keys):
            h = data.history_of([r["best_run_id"]], key)
            ax.plot(h["step"], h["value"], "-o", ms=3, color=f"C{i % 10}", label=label)
    for ax, key in zip(axes, keys):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)), fontsize=7)
    panel.figure("best", "Best trial of each group, per epoch", fig)
    return panel
