"""``dmlstudy slurm SPEC.yaml`` (``python -m study.deploy.slurm``): the command line. It checks the options
(:mod:`study.deploy.slurm.options`) and the spec, makes the job and its script (:mod:`study.deploy.slurm.script`),
then prints the script (``--dry-run``) or submits it (:mod:`study.deploy.slurm.submit`). Exit 0 submitted or printed,
2 bad input (one line on stderr)."""

from __future__ import annotations

import shutil
import sys

from study.arguments import ArgumentParser, one_line
from study.deploy.checks import max_failures
from study.deploy.slurm.script import job_from_args, render_script
from study.deploy.slurm.submit import submit
from study.runtime.slurm_queue import live_job
from trainables.schema.errors import SpecError, StudyError

__all__ = ["main"]


def _parser(prog: str) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Run a study (or a table) as a Slurm job with its own Ray cluster.")
    p.add_argument("spec", help="YAML study or table spec")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="nodes (one Ray node each; default 1)")
    p.add_argument("--gpus-per-node", type=int, default=None, metavar="G", help="default: resources.gpu")
    p.add_argument("--cpus-per-node", type=int, default=None, metavar="C", help="default: resources.cpu per GPU trial")
    p.add_argument("--time", required=True, help="the job's time limit (Slurm's format: 1-00:00:00, 23:30:00, 90)")
    p.add_argument("--partition", default=None)
    p.add_argument("--account", default=None)
    p.add_argument("--job-name", default=None, help="default: dml-<study name>")
    p.add_argument(
        "--signal-lead",
        type=int,
        default=None,
        metavar="SECONDS",
        help="USR1 this long before the time limit: stop, save, requeue (default 300, at most half of --time)",
    )
    p.add_argument("--max-requeues", type=int, default=20, metavar="K", help="stop after K requeues (default 20)")
    p.add_argument(
        "--max-failures",
        type=max_failures,
        default=3,
        metavar="N",
        help="study.run --max-failures (default 3; -1 always)",
    )
    p.add_argument(
        "--sbatch",
        dest="sbatch_lines",
        action="append",
        default=[],
        metavar="OPTION",
        help="an extra #SBATCH line, e.g. --sbatch=--mem=64G (repeatable)",
    )
    p.add_argument(
        "--setup",
        dest="setup_lines",
        action="append",
        default=[],
        metavar="LINE",
        help="a shell line run on the job's first node before Ray starts, e.g. 'module load cuda' (repeatable)",
    )
    p.add_argument(
        "--env-file",
        dest="env_file_lines",
        action="append",
        default=[],
        metavar="FILE",
        help="a file of VAR=value lines (credentials: PGPASSWORD, MLFLOW_TRACKING_PASSWORD, the ${VAR}s the tracking "
        "URLs name) the job sources, exported, before Ray starts; readable by you only (chmod 600); repeatable",
    )
    p.add_argument("--python", default=sys.executable, help="the Python on the nodes (default: this one)")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch script; write and submit nothing")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m study.deploy.slurm") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(argv)
    try:
        job = job_from_args(args, argv, prog)
        script = render_script(job)
        if not args.dry_run and shutil.which("sbatch") is None:
            raise SpecError("sbatch not found on PATH: run dmlstudy slurm on a Slurm login node (or use --dry-run)")
        if not args.dry_run and (running := live_job(job.study_dir)) is not None:
            raise SpecError(
                f"study {job.name!r} already has Slurm job {running}; it resumes the study by itself "
                f"(scancel {running.split()[0]} first to submit a new one)"
            )
    except StudyError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(script, end="")
        return 0
    return submit(job, script)


if __name__ == "__main__":
    sys.exit(main())
