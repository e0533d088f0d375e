"""Every scheduler kind (``search.scheduler.type``) holds to its base: its spec half
(:mod:`trainables.schema.scheduler`) round-trips and says a share in (0, 1], checkpoint epochs within the run that
include the last, a lag, a check and a description; its Ray half (:mod:`study.search.schedulers`) builds a Ray
scheduler that, driven with Ray's call sequence over one cell of trials with random scores, pauses trials only at
the checkpoint epochs and trains the share the spec half says (exactly, or on average where the share is an
expectation). A new kind is one module in each folder and one line in :data:`EXAMPLES`."""

from __future__ import annotations

import pkgutil
import random
from pathlib import Path
from statistics import mean

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

import study.search.schedulers
from study.intake.layout import StudyLayout
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.search.schedulers import builder
from trainables.schema.scheduler import SCHEDULER_NAMES, SchedulerSpec, kind_named
from trainables.schema.trial import CELL_KEY

EPOCHS, TRIALS = 9, 9
#: Each kind with keys away from their defaults (a new kind adds its line).
EXAMPLES: dict[str, dict] = {
    "fifo": {"type": "fifo"},
    "asha": {"type": "asha", "grace_period": 2, "reduction_factor": 2.0},
    "halving": {"type": "halving", "first_rung": 2, "reduction_factor": 2.0, "hedge": 1},
}
#: The measured share's tolerance over :data:`REPEATS` cells where the kind's share is an expectation (ASHA's).
REPEATS, TOLERANCE = 25, 0.04


def test_every_kind_has_a_builder_and_an_example_and_nothing_else_does() -> None:
    builders = {m.name for m in pkgutil.iter_modules(study.search.schedulers.__path__)}
    assert set(SCHEDULER_NAMES) == builders == set(EXAMPLES)
    assert set(SCHEDULER_NAMES) >= {"fifo", "asha", "halving"}


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_a_kind_round_trips_and_its_rules_stay_in_range(name: str) -> None:
    spec = SchedulerSpec(**EXAMPLES[name])
    assert type(spec) is kind_named(name) and spec.type == name
    dumped = spec.model_dump(mode="json")
    assert SchedulerSpec.model_validate(dumped) == spec == type(spec).model_validate(dumped)
    assert SchedulerSpec(**dumped) == spec
    for epochs, trials in [(EPOCHS, TRIALS), (20, 12), (3, 2)]:
        assert 0 < spec.share(epochs, trials) <= 1
        assert 1 <= spec.full_trials(epochs, trials) <= trials
        due = spec.checkpoint_epochs(epochs)
        assert epochs in due and due <= set(range(1, epochs + 1))
        lag = spec.lag(trials)
        assert lag is None or 1 <= lag <= trials
    assert spec.summary() and spec.describe(EPOCHS, TRIALS) and spec.inline().startswith(f"{{type: {name}")
    spec.check(EPOCHS, TRIALS)  # the example fits the run it is driven in
    spec.check_table(EPOCHS, TRIALS, validated=True)
    cheaper = spec.cheaper(EPOCHS, TRIALS)
    assert cheaper is None or cheaper.stops_early
    assert (spec.share(EPOCHS, TRIALS) < 1) == spec.stops_early


class _Runner:
    """Ray's controller as a scheduler sees it: its trials, and stopping one."""

    def __init__(self, scheduler: TrialScheduler, trials: list[_Trial]) -> None:
        self.scheduler, self.trials = scheduler, trials

    def get_trials(self) -> list[_Trial]:
        return list(self.trials)

    def stop_trial(self, trial: _Trial) -> None:
        if trial.status == Trial.RUNNING:
            self.scheduler.on_trial_complete(self, trial, trial.last_result)
        elif trial.status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self, trial)
        trial.status = Trial.TERMINATED


class _Trial:
    def __init__(self, trial_id: str, config: dict) -> None:
        self.trial_id, self.config, self.status = trial_id, config, Trial.PENDING
        self.epoch, self.last_result, self.paused_at = 0, {}, []

    def set_status(self, status: str) -> None:
        self.status = status


def _drive(scheduler: TrialScheduler, plan: StudyPlan, seed: int) -> list[_Trial]:
    """One cell of ``TRIALS`` trials, run one at a time in the order the scheduler picks them (a trial starts again
    where it paused), each reporting a fresh uniform score every epoch."""
    rng, label, metric = random.Random(seed), plan.cells[0].label, plan.base.search.objective
    trials = [_Trial(f"t{i}", {CELL_KEY: label}) for i in range(TRIALS)]
    runner = _Runner(scheduler, trials)
    for trial in trials:
        scheduler.on_trial_add(runner, trial)
    for _ in range(TRIALS * EPOCHS * 4):
        trial = scheduler.choose_trial_to_run(runner)
        if trial is None:
            break
        trial.status = Trial.RUNNING
        while trial.status == Trial.RUNNING:
            trial.epoch += 1
            trial.last_result = {"training_iteration": trial.epoch, metric: rng.random()}
            decision = scheduler.on_trial_result(runner, trial, trial.last_result)
            if decision == TrialScheduler.PAUSE:
                trial.status = Trial.PAUSED
                trial.paused_at.append(trial.epoch)
            elif decision == TrialScheduler.STOP or trial.epoch == EPOCHS:
                runner.stop_trial(trial)
    assert all(t.status == Trial.TERMINATED for t in trials), "the cell did not end"
    return trials


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_a_kinds_ray_scheduler_pauses_at_its_checkpoints_and_trains_its_share(name, tmp_path, spec_dict) -> None:
    spec_dict.update(storage=str(tmp_path), validation={"kind": "holdout"})
    spec_dict["train"]["epochs"] = EPOCHS
    spec_dict["search"].update(num_trials=TRIALS, scheduler=EXAMPLES[name])
    study = parse_spec(spec_dict)
    plan, layout = StudyPlan.of_study(study), StudyLayout.for_spec(study)
    kind = study.search.scheduler
    Path(layout.root).mkdir(parents=True)
    shares = []
    for seed in range(REPEATS):
        Path(layout.scheduler_state).unlink(missing_ok=True)  # each repeat a new study: no rungs read back
        scheduler = builder(name)(kind, plan, layout)
        assert isinstance(scheduler, TrialScheduler)
        trials = _drive(scheduler, plan, seed)
        assert {e for t in trials for e in t.paused_at} <= kind.checkpoint_epochs(EPOCHS)
        assert sum(t.epoch == EPOCHS for t in trials) <= kind.full_trials(EPOCHS, TRIALS)
        shares.append(sum(t.epoch for t in trials) / (TRIALS * EPOCHS))
    assert mean(shares) == pytest.approx(kind.share(EPOCHS, TRIALS), abs=TOLERANCE)
