"""What a run has left, stage by stage (:class:`~study.runtime.driver_run.StageCounts`): ``--status`` offers
``--resume`` after a driver that stopped in any stage (the search, the finalist race, a grouped study's final runs),
and not after one that ended every stage.

The states are simulated: a driver runs its stages' runs one after another (the search trials of every cell, then
each group's race runs, then each group's final seeds) and stops after any number of them, its stores then holding
what had ended and the tags of the stages that had started. Whether anything is left is then known without the rule:
the driver stopped before its last run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from study.runtime.driver_run import StageCounts


@dataclass(frozen=True)
class Design:
    """A run's shape: cells × search trials, then per group finalists × race seeds, then final seeds per group."""

    cells: int
    trials: int
    groups: int
    race_runs_per_group: int  # finalists × race seeds (0: no race)
    final_seeds: int

    def events(self) -> list[tuple[str, int]]:
        """Every run of the run, in the driver's order, as ``(stage, cell)``; the race and final runs have no cell."""
        search = [("search", c) for _ in range(self.trials) for c in range(self.cells)]
        race = [("race", -1)] * (self.groups * self.race_runs_per_group)
        final = [("final", -1)] * (self.groups * self.final_seeds)
        return search + race + final

    def counts(self, ended: int, started_next: bool) -> StageCounts:
        """What the stores say after the driver's first ``ended`` runs ended; ``started_next``: the stage of the next
        run had started (its planned runs tagged) when the driver stopped."""
        events = self.events()
        done = events[:ended]
        started = {stage for stage, _ in done} | ({events[ended][0]} if started_next and ended < len(events) else set())

        planned = {"race": self.groups * self.race_runs_per_group, "final": self.groups * self.final_seeds}
        return StageCounts(
            searched=tuple(sum(e == ("search", c) for e in done) for c in range(self.cells)),
            trials_per_cell=self.trials,
            later=tuple(
                (name, sum(s == name for s, _ in done), runs if name in started else None)
                for name, runs in planned.items()
                if runs
            ),
        )


DESIGNS = [
    Design(cells=1, trials=3, groups=1, race_runs_per_group=4, final_seeds=2),  # a study with a race
    Design(cells=1, trials=4, groups=3, race_runs_per_group=0, final_seeds=2),  # final.group_by: 3 groups
    Design(cells=1, trials=4, groups=3, race_runs_per_group=2, final_seeds=1),  # both
    Design(cells=3, trials=2, groups=3, race_runs_per_group=2, final_seeds=2),  # replicates or a table: group = cell
    Design(cells=2, trials=2, groups=2, race_runs_per_group=0, final_seeds=0),  # no final stage
]


@pytest.mark.parametrize("design", DESIGNS)
def test_a_run_stopped_before_its_last_run_is_resumable_in_every_stage(design):
    total = len(design.events())
    for ended, started_next in itertools.product(range(total + 1), (False, True)):
        counts = design.counts(ended, started_next)
        left = ended < total
        assert bool(counts.left()) == left, (design, ended, started_next, counts)
        # A driver that failed (or died) offers --resume exactly while runs are left; a stopped one always; one
        # that ended every stage (FINISHED) never.
        assert counts.resumable("FAILED") == left
        assert counts.resumable("KILLED")
        assert not counts.resumable("FINISHED")


def test_the_cases_status_printed_wrong():
    """Stopped mid-race; a grouped study stopped after some groups' final runs; every stage finished."""
    mid_race = StageCounts(searched=(8,), trials_per_cell=8, later=(("race", 3, 8), ("final", 0, None)))
    assert mid_race.left() == ["race: 3 of 8 runs", "final: not started"]
    grouped = StageCounts(searched=(8,), trials_per_cell=8, later=(("final", 4, 6),))  # 3 groups × 2 seeds, 2 done
    assert grouped.left() == ["final: 4 of 6 runs"]
    done = StageCounts(searched=(8,), trials_per_cell=8, later=(("race", 8, 8), ("final", 6, 6)))
    assert done.left() == [] and not done.resumable("FAILED")
    assert all(c.resumable("KILLED") and c.resumable("FAILED") for c in (mid_race, grouped))


def test_a_search_whose_every_trial_failed_has_no_later_stage_to_wait_for():
    """The driver fails at the search when no trial finished: its race and final stage never start, and a resume
    would do the same again."""
    failed = StageCounts(
        searched=(4,), trials_per_cell=4, searched_ok=False, later=(("race", 0, None), ("final", 0, None))
    )
    assert failed.left() == [] and not failed.resumable("FAILED")
    assert StageCounts(searched=(4, 1), trials_per_cell=4).left() == ["search: 5 of 8 trials"]
