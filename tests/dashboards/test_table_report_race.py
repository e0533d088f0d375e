"""The report's race lines (:func:`study.final.race.standing_lines`) when race runs failed: each finalist's
missing runs are counted, the seeds are the planned ones, and a group the race did not decide says so."""

from __future__ import annotations

from study.final.race import Standing, standing_lines, undecided_note


def test_failed_race_runs_are_said_per_finalist_and_an_undecided_group_says_why():
    table = [
        Standing("ms.p0.2", "a", 3, 0.70, (), winner=False, missing=2),  # both its race runs failed
        Standing("ms.p0.2", "b", 5, 0.66, (0.65,), winner=True, missing=1),  # the fewest missing: it wins
        Standing("bspml.p0.2", "c", 1, 0.60, (0.61, 0.59), winner=True),
    ]
    head, ms, bspml = standing_lines(table, "t")
    assert head.startswith("race: each group's finalists retrained on 2 more seeds (validation only)")
    assert head.endswith("among the finalists whose race runs all trained every epoch:")
    assert ms.startswith("  ms.p0.2: trial 3 0.7000 [search 0.7000; race none finished; 2 of 2 failed or short]")
    assert "; trial 5 0.6550 (retrained) [search 0.6600; race 0.6500; 1 of 2 failed or short]" in ms
    assert ms.endswith(f" ({undecided_note(table[:2])})") and "trial 5, with the fewest missing (1 of 2)" in ms
    assert bspml == "  bspml.p0.2: trial 1 0.6000 (retrained) [search 0.6000; race 0.6100, 0.5900]"
