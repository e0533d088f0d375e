"""A ``dmlstudy slurm`` job handed to Slurm: its script written into the study directory
(:data:`~trainables.schema.record.SLURM_SCRIPT_FILE`) and submitted with ``sbatch --parsable``, in the submitting
shell's environment less its credentials and the ``SBATCH_*`` variables that would override the script's lines; on
any failure nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

from study.arguments import one_line
from study.deploy.checks import credential_variables
from study.deploy.slurm.script import SlurmJob
from trainables.schema import record as R

__all__ = ["submit"]

#: What ``sbatch`` must not pass on from the submitting shell (it exports the whole environment, and slurmctld keeps a
#: copy in its state directory while the job is known): a Ray token the user has for another cluster (the job makes
#: its own each run) and a Ray address (the job's driver is given its own, explicitly); and every credential
#: (:func:`study.deploy.checks.credential_variables`), which the job reads from its ``--env-file`` instead.
_NOT_EXPORTED = ("RAY_AUTH_TOKEN", "RAY_ADDRESS")


#: sbatch's input variables for the options the script sets, or that its ``--sbatch`` guard refuses: sbatch reads
#: them before the script's ``#SBATCH`` lines, which they would override (checked on Slurm 22.05: ``SBATCH_NO_REQUEUE=1``
#: in a researcher's shell turns the requeue chain off, ``SBATCH_TIMELIMIT`` replaces ``--time``).
_SBATCH_OVERRIDES = (
    "SBATCH_TIMELIMIT", "SBATCH_SIGNAL", "SBATCH_REQUEUE", "SBATCH_NO_REQUEUE", "SBATCH_OPEN_MODE", "SBATCH_JOB_NAME",
    "SBATCH_GPUS", "SBATCH_GPUS_PER_NODE", "SBATCH_ARRAY_INX", "SBATCH_EXPORT", "SBATCH_GET_USER_ENV", "SBATCH_WAIT",
    "SBATCH_OUTPUT", "SBATCH_ERROR",
)  # fmt: skip


def _submit_env(job: SlurmJob) -> tuple[dict[str, str], list[str], list[str]]:
    """sbatch's environment; the credentials and the overriding ``SBATCH_*`` variables left out of it (to say so).
    A site's ``SBATCH_PARTITION``/``SBATCH_ACCOUNT`` stay unless ``--partition``/``--account`` was given."""
    withheld = [k for k in credential_variables(os.environ, job.specs) if k not in _NOT_EXPORTED]
    overriding = [*_SBATCH_OVERRIDES]
    overriding += ["SBATCH_PARTITION"] if job.partition else []
    overriding += ["SBATCH_ACCOUNT"] if job.account else []
    overridden = sorted(k for k in overriding if k in os.environ)
    dropped = {*_NOT_EXPORTED, *withheld, *overridden}
    return {k: v for k, v in os.environ.items() if k not in dropped}, withheld, overridden


def _run(
    argv: list[str], timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def submit(job: SlurmJob, script: str) -> int:
    """Write the script into the study directory and ``sbatch`` it; on any failure leave nothing behind (not even
    the directories made for it)."""
    made = [d for d in (job.study_dir, *job.study_dir.parents) if not d.exists()]  # deepest first
    script_path = job.study_dir / R.SLURM_SCRIPT_FILE
    try:
        job.study_dir.mkdir(parents=True, exist_ok=True)
        script_path.write_text(script, encoding="utf-8")
    except OSError as e:
        _remove(script_path, made)
        print(f"error: cannot write {script_path} ({e.strerror or type(e).__name__})", file=sys.stderr)
        return 2
    env, withheld, overridden = _submit_env(job)
    if withheld:
        print(
            f"note: not passed to sbatch (slurmctld keeps a job's environment on disk): {', '.join(withheld)}; "
            "the job reads credentials from --env-file",
            file=sys.stderr,
        )
    if overridden:
        print(
            f"note: not passed to sbatch (they would override the script's #SBATCH lines): {', '.join(overridden)}",
            file=sys.stderr,
        )
    submitted = _run(["sbatch", "--parsable", str(script_path)], timeout=120, env=env)
    if submitted is None or submitted.returncode != 0:
        why = "no answer" if submitted is None else (submitted.stderr.strip() or f"exit {submitted.returncode}")
        _remove(script_path, made)
        print(f"error: sbatch refused the job: {one_line(why)}", file=sys.stderr)
        return 2
    job_id = submitted.stdout.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
    (job.study_dir / R.SLURM_JOB_FILE).write_text(job_id + "\n")
    print(f"Submitted Slurm job {job_id} for study {job.name!r}: {script_path}")
    print(f"  log:    {job.study_dir / R.SLURM_LOG_FILE.replace('%j', job_id)}")
    sets = [word for o in job.overrides for word in ("--set", o)]
    print(f"  status: {shlex.join(['dmlstudy', 'status', str(job.spec_path), *sets])}")
    return 0


def _remove(script: Path, made: list[Path]) -> None:
    """Undo :func:`submit`'s writes: the script, then each directory it made (deepest first) if it is empty."""
    script.unlink(missing_ok=True)
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()
