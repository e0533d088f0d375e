"""``python -m study.status SPEC.yaml|TABLE.yaml|STUDY_DIR [--set key=value ...]`` (``dmlstudy status``, and
``python -m study.run ... --status``): where a study or a table stands, without starting it. One entry,
:func:`print_run_status`, for what :func:`study.table.spec.load_run` read: a study's screen (its trials), or a table's
(per cell: :mod:`study.table.status`).

Reads the study's Optuna storage (trial states, best value so far) and its MLflow parent run (whether a
driver is running it); starts no Ray and writes nothing. Exit 0 when the study exists, 2 when it does not.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from study.arguments import ArgumentParser, one_line
from study.final.best import pick_best
from study.layout import StudyLayout
from study.plan import StudyPlan
from study.runtime.lock import driver_text
from study.runtime.slurm_status import print_job_line, print_unstarted
from study.runtime.storage import read_bytes
from study.table.spec import RunSpec, load_run
from study.table.status import print_table_status
from study.tracking import peek as tracking_peek  # not study.tracking.callback: that imports Ray
from study.tracking.stores import load_optuna_study, optuna_study_names
from trainables.schema import record as R
from trainables.schema.errors import StudyError
from trainables.schema.spec import StudySpec

__all__ = ["study_status", "print_status", "print_run_status", "main"]

_STATES = ("COMPLETE", "PRUNED", "RUNNING", "FAIL", "WAITING")


def study_status(spec: StudySpec) -> dict:
    """Counts of Optuna trial states, the best finished trial and the study's locations.

    Raises :class:`StudyError` when the study has never been started.
    """
    layout = StudyLayout.for_spec(spec)
    if read_bytes(layout.spec_file) is None:
        raise StudyError(f"there is no study {spec.name!r} in {layout.root}")
    # A replicated study's replicates are Optuna studies of their own (its plan's cells): counted together. Replicate 0,
    # the study's own, is loaded always (its absence is the store's error to raise); a later one once it exists.
    stored = set(optuna_study_names(layout.optuna_url, spec.name)) | {spec.name}
    names = [c.study_name for c in StudyPlan.of_study(spec).cells if c.study_name in stored]
    trials = [t for name in names for t in load_optuna_study(name, layout.optuna_url).get_trials(deepcopy=False)]
    counts = Counter(t.state.name for t in trials)
    # study.final.best's rule, as the final stage applies it: best value, ties to the earliest (smallest-numbered) trial.
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    best = pick_best(finished, lambda t: t.value, lambda t: t.number, spec.search.mode)
    driver = tracking_peek.parent_status(layout.tracking_uri, spec.name)
    tags = tracking_peek.parent_tags(layout.tracking_uri, spec.name)
    return {
        "stage": tags.get(R.STAGE, R.STAGE_SEARCH),
        R.FINAL_PLANNED: int(tags.get(R.FINAL_PLANNED, 0)),
        "selection": tags.get(R.SELECTION, R.SELECTION_VALIDATION if spec.validation.enabled else R.SELECTION_TEST),
        "name": spec.name,
        "root": layout.root,
        "tracking_uri": layout.tracking_uri,
        "optuna_url": layout.optuna_url,
        "num_trials": spec.search.num_trials * spec.search.replicates,
        "counts": {state: counts.get(state, 0) for state in _STATES},
        "best": None if best is None else {"number": best.number, "value": best.value, "params": best.params},
        "parent_status": driver,
        "failures": tracking_peek.failures(layout.tracking_uri, spec.name),
    }


def print_run_status(target: RunSpec) -> int:
    """The run's screen, as its plan's view says: a table's per cell, a study's per trial; returns the exit code."""
    if target.table is not None:
        return print_table_status(target.table)
    return print_status(target.base)


def print_status(spec: StudySpec) -> int:
    """Print :func:`study_status` for people; returns the exit code."""
    try:
        st = study_status(spec)
    except StudyError as e:
        # Submitted by dmlstudy slurm, its job still pending: the study's spec file comes when the driver starts.
        if (code := print_unstarted(StudyLayout.for_spec(spec).root)) is not None:
            return code
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    c = st["counts"]
    done = c["COMPLETE"] + c["PRUNED"]
    print(f"Study {st['name']!r} in {st['root']}")
    print(
        f"  trials: {done} done ({c['COMPLETE']} complete, {c['PRUNED']} pruned), {c['RUNNING']} running, "
        f"{c['FAIL']} failed, of {st['num_trials']}"
    )
    for trial_id, stage_name, reason in st["failures"]:
        print(f"    failed ({stage_name}): trial {trial_id}: {reason}")
    stage = st["stage"]
    if stage == R.STAGE_FINAL:
        stage += f" (retraining the best configuration: {st[R.FINAL_PLANNED]} runs planned)"
    print(f"  stage: {stage}; hyperparameters selected on the {st['selection']} classes")
    if st["best"] is not None:
        b = st["best"]
        print(f"  best so far: Optuna trial {b['number']}: {spec.search.metric} = {b['value']:.4f}")
        for name, value in b["params"].items():
            print(f"    {name} = {value}")
    driver = driver_text(st["root"], st["parent_status"], complete=done + c["FAIL"] >= st["num_trials"])
    if driver is not None:
        print(f"  driver: {driver}")
    print_job_line(st["root"], indent="  ")  # launched by dmlstudy slurm: what Slurm says of its job
    print(f"  tracking: {st['tracking_uri']}")
    print(f"  optuna:   {st['optuna_url']}")
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m study.status") -> int:
    p = ArgumentParser(prog=prog, description="Show where a study stands.")
    p.add_argument("study", help="YAML study spec, or the study's directory (storage/<name>/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    try:
        folder = Path(args.study)
        # A job's directory (dmlstudy slurm), its study not started yet?
        unstarted = folder.is_dir() and not (folder / R.SPEC_FILE).exists()
        if unstarted and (code := print_unstarted(str(folder))) is not None:
            return code
        target = load_run(args.study, args.overrides, family_rules=False)  # reads the stores: no trainer (torch)
    except StudyError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    return print_run_status(target)


if __name__ == "__main__":
    sys.exit(main())
