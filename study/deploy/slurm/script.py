"""The job a ``dmlstudy slurm`` command line asks for, and its sbatch script: :func:`job_from_args` checks the options
and the spec (a study or a table, priced against its budget), finds the study directory and each node's share, and
makes the :class:`SlurmJob`; :func:`render_script` fills the template ``study/deploy/templates/slurm.sbatch.sh`` with
it (:func:`study.deploy.render.fill`)."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from study.bill import run_bill
from study.deploy.checks import refuse_written_passwords
from study.deploy.render import fill, load_template
from study.deploy.slurm.options import check_options, extra_line
from study.intake.load import load_plan
from trainables.schema import record as R
from trainables.schema.errors import SpecError

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["SlurmJob", "job_from_args", "render_script"]


@dataclass(frozen=True)
class SlurmJob:
    """Everything the script says, checked (:func:`job_from_args`)."""

    name: str
    spec_path: Path
    overrides: tuple[str, ...]
    study_dir: Path
    workdir: Path
    python: str
    nodes: int
    cpus_per_node: int
    gpus_per_node: int
    time: str
    signal_lead_s: int
    drain_timeout_s: int
    max_requeues: int
    max_failures: int
    partition: str | None = None
    account: str | None = None
    job_name: str = ""
    sbatch_lines: tuple[str, ...] = ()
    setup_lines: tuple[str, ...] = ()
    command_line: str = ""
    env_files: tuple[Path, ...] = ()
    #: The study's spec (and a table's cells'): their tracking URLs name the ``${VAR}``s kept from sbatch.
    specs: tuple[StudySpec, ...] = ()


#: The sbatch script's template (package data: study/deploy/templates/), filled by :func:`study.deploy.render.fill`.
TEMPLATE = "slurm.sbatch.sh"


def render_script(job: SlurmJob) -> str:
    """The sbatch script (no secret in it: the token is made inside the job): :data:`TEMPLATE`, every value quoted
    for where it lands (:mod:`study.deploy.render`)."""
    sets = [word for o in job.overrides for word in ("--set", o)]
    values = {
        "name": job.name,
        "written_at": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}",
        "command_line": job.command_line,
        "job_name": job.job_name,
        "nodes": job.nodes,
        "cpus_per_node": job.cpus_per_node,
        "gpus_per_node": job.gpus_per_node,
        "gpus_option": job.gpus_per_node or None,  # no --gpus-per-node line without GPUs
        "time": job.time,
        "partition": job.partition or None,
        "account": job.account or None,
        "signal_lead_s": job.signal_lead_s,
        "drain_timeout_s": job.drain_timeout_s,
        # Slurm expands %j and the like in --output: a % of the directory's own is written %%.
        "output": f"{str(job.study_dir).replace('%', '%%')}/{R.SLURM_LOG_FILE}",
        "workdir": str(job.workdir),
        "sbatch_lines": list(job.sbatch_lines),
        "study_dir": str(job.study_dir),
        "study_spec": str(job.study_dir / R.SPEC_FILE),
        "study_log": str(job.study_dir / R.STUDY_LOG_FILE),
        "python": job.python,
        "ray": str(Path(job.python).with_name("ray")),
        "spec": str(job.spec_path),
        "sets": sets,
        "max_requeues": job.max_requeues,
        "max_failures": job.max_failures,
        "continue_command": job.command_line,
        "gres": [f"--gres=gpu:{job.gpus_per_node}"] if job.gpus_per_node else [],
        "setup": list(job.setup_lines) or ["# (no --setup lines)"],
        "env_files": [str(f) for f in job.env_files],
    }
    return fill(load_template(TEMPLATE), values)


def _specs(args: argparse.Namespace) -> tuple[StudySpec, list[StudySpec]]:
    """The spec the job runs (a table's base) and every spec it holds (a table's cells too), validated."""
    plan = load_plan(args.spec, args.overrides)
    run_bill(plan, None)  # on its assumed bill (the job measures a measured one where it runs)
    return plan.base, plan.specs


def _study_dir(spec: StudySpec) -> Path:
    """The study's directory, which the script and its log live in: a shared path Slurm can name in ``--output``."""
    from study.intake.layout import StudyLayout  # defers Optuna (study.tracking.credentials imports its storages)

    layout = StudyLayout.for_spec(spec)
    if layout.remote:
        raise SpecError(
            f"dmlstudy slurm: storage {spec.storage!r} is an object store; the job's script and log need a directory "
            "every node mounts (storage: a shared path)"
        )
    study_dir = Path(layout.root).resolve()
    if "\\" in str(study_dir):
        raise SpecError(
            f"the study directory {str(study_dir)!r} holds a backslash, which Slurm reads as an escape in --output",
            "storage",
        )
    return study_dir


def _node_share(args: argparse.Namespace, spec: StudySpec) -> tuple[int, int]:
    """``(cpus, gpus)`` per node: the options', else as many trials' resources as the node's GPUs hold."""
    gpu, cpu = spec.resources.gpu, spec.resources.cpu
    gpus = args.gpus_per_node if args.gpus_per_node is not None else int(gpu)
    per_node = max(1, int(gpus // gpu)) if gpu else 1
    cpus = args.cpus_per_node if args.cpus_per_node is not None else max(1, int(cpu * per_node))
    if gpu > gpus:
        raise SpecError(f"a trial needs resources.gpu = {gpu} GPUs but --gpus-per-node is {gpus}")
    if cpu > cpus:
        raise SpecError(f"a trial needs resources.cpu = {cpu} CPUs but --cpus-per-node is {cpus}")
    return cpus, gpus


def job_from_args(args: argparse.Namespace, argv: list[str], prog: str) -> SlurmJob:
    """Validate the options and the spec (a study or a table) and build the job; raises :class:`SpecError`."""
    a = args
    check_options(a)
    spec, specs = _specs(a)
    refuse_written_passwords(
        specs,
        "the job script, its log and `ps` would show it: name a variable instead (user:${OPTUNA_DB_PASSWORD}@host) "
        "and give it in an --env-file, or use ~/.pgpass or MLFLOW_TRACKING_PASSWORD (docs/notebook/cluster.md)",
    )
    study_dir = _study_dir(spec)
    cpus, gpus = _node_share(a, spec)
    lead = a.signal_lead
    return SlurmJob(
        name=spec.name,
        spec_path=Path(a.spec).resolve(),
        overrides=tuple(a.overrides),
        study_dir=study_dir,
        workdir=Path.cwd(),
        python=a.python,
        nodes=a.nodes,
        cpus_per_node=cpus,
        gpus_per_node=gpus,
        time=a.time.strip(),
        signal_lead_s=lead,
        drain_timeout_s=max(5, lead // 2),  # the other half: Tune's snapshot, the stores, stopping Ray, requeueing
        max_requeues=a.max_requeues,
        max_failures=a.max_failures,
        partition=a.partition,
        account=a.account,
        job_name=a.job_name or f"dml-{spec.name}",
        sbatch_lines=tuple(extra_line(line) for line in a.sbatch_lines),
        setup_lines=tuple(a.setup_lines),
        command_line=shlex.join([*prog.split(), *[x for x in argv if x != "--dry-run"]]),
        env_files=tuple(a.env_files),
        specs=tuple(specs),
    )
