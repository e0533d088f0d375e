"""Every baseline family survives a noisy digits epoch in the shared loop, and one real CLI study mixes them."""

from __future__ import annotations

import math

import pytest
import torch

from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.schema.metric_names import ETA_HAT, NMI, OBJECTIVE, Q_NEG, Q_POS, on_test

BASELINES = ["contrastive", "triplet", "triplet_smooth", "margin", "marginal", "fastap", "proxy_anchor", "snr", "rdml"]
MINING = {"triplet", "triplet_smooth", "margin", "marginal"}
#: The families of the other papers, through the same CLI study (two-view families and DiVA, which mines).
OTHERS = ["npair", "debiased_neg", "debiased_pos", "diva"]


def _spec(family: str, subset: str = "all"):
    return parse_spec(
        {
            "name": "baseline",
            "family": family,
            "dataset": {"name": "digits", "noise": {"kind": "uniform", "ratio": 0.2, "seed": 0}, "subset": subset},
            "train": {"epochs": 2, "classes_per_batch": 5, "samples_per_class": 4, "batches_per_epoch": 4},
        }
    )


@pytest.mark.parametrize("family", BASELINES)
def test_family_trains_an_epoch_on_noisy_digits(family):
    metrics = TrialRun.single(_spec(family)).run_epoch()
    assert 0.0 <= metrics[on_test(OBJECTIVE)] <= 1.0 and 0.0 <= metrics[on_test(NMI)] <= 1.0
    assert math.isfinite(metrics["train/loss"])
    assert metrics[Q_POS] > metrics[Q_NEG] > 0
    assert (ETA_HAT in metrics) == (family in MINING)


def test_topline_arm_reports_no_noise_diagnostics():
    metrics = TrialRun.single(_spec("triplet", subset="clean_only")).run_epoch()
    assert Q_POS not in metrics and on_test(OBJECTIVE) in metrics


@pytest.mark.parametrize("family", ["margin", "proxy_anchor"])
def test_learnable_family_tensors_resume_from_the_checkpoint(family, tmp_path):
    first = TrialRun.single(_spec(family))
    first.run_epoch()
    first.save(tmp_path)
    expected = first.run_epoch()
    resumed = TrialRun.single(_spec(family))
    resumed.restore(tmp_path)
    again = resumed.run_epoch()
    assert again["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-5)
    for a, b in zip(first.member.family.parameters(), resumed.member.family.parameters()):
        torch.testing.assert_close(a, b)
    # β / proxies sit in their own optimiser group with their own learning rate.
    groups = first.member.optimizer.param_groups
    assert len(groups) == 2 and groups[1]["lr"] != groups[0]["lr"]


@pytest.mark.usefixtures("on_warm_head")
@pytest.mark.e2e
def test_every_family_survives_a_cli_study_on_a_conditional_grid(spec_dict, write_spec, run_cli, tmp_path):
    """One ``python -m study.run`` study, one 1-epoch trial per family (two triplet mining rules; BSPML has
    its own), the grid sampler visiting each active combination once."""
    from harness.driver import mlflow_children, optuna_trials

    spec_dict.update(name="baselines", params={})
    spec_dict["dataset"] = {"name": "digits", "noise": {"kind": "uniform", "ratio": 0.3, "seed": 0}}
    spec_dict["train"] = {
        "epochs": 1,
        "classes_per_batch": 5,
        "samples_per_class": 4,
        "batches_per_epoch": 3,
        "recall_at": [1],
    }
    rules = ["random_semihard", "fixed_semihard"]
    spec_dict["search"] = {
        "num_trials": len(BASELINES + OTHERS) + 1,
        "max_concurrent": 2,
        "sampler": {"type": "grid", "seed": 1},
        "space": {
            "family": {"type": "categorical", "choices": BASELINES + OTHERS},
            "mining": {"type": "categorical", "choices": rules, "when": {"family": ["triplet"]}},
        },
    }
    proc = run_cli(str(write_spec(spec_dict)), "--no-dashboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_dir = tmp_path / "runs" / "baselines"
    client, _, trials = mlflow_children(study_dir, "baselines")
    # Optuna holds what the grid chose (only the active parameters); MLflow one finished run per trial.
    arms = sorted((t.params["family"], t.params.get("mining", "")) for t in optuna_trials(study_dir, "baselines"))
    assert arms == sorted(
        [(f, "") for f in BASELINES + OTHERS if f != "triplet"] + [("triplet", rule) for rule in rules]
    )
    assert sorted(r.data.tags["family"] for r in trials) == sorted(a[0] for a in arms)
    for run in trials:
        assert run.info.status == "FINISHED"
        assert {on_test(OBJECTIVE), Q_POS, Q_NEG} <= set(run.data.metrics)
        assert (ETA_HAT in run.data.metrics) == (run.data.tags["family"] in MINING | {"diva"})
