"""``dmlstudy slurm SPEC.yaml`` (``python -m study.deploy.slurm``): run a study or a table as a Slurm job with a Ray
cluster of its own, through the job's time limit and preemption by requeueing and resuming.

The command writes an sbatch script into the study directory (:data:`~trainables.schema.record.SLURM_SCRIPT_FILE`)
and submits it (``sbatch --parsable``; ``--dry-run`` prints it instead). The script is a real shell file,
``study/deploy/templates/slurm.sbatch.sh``, not made through a Slurm or Ray library, because it has to be the script a
user could have written: readable, editable (its marked sections), resubmittable with plain ``sbatch``, and debuggable
from its own log; :func:`study.deploy.render.fill` writes each value into it, quoted for where it lands. What it does,
and why (docs/cluster.md "Deploy on Slurm"):

- one ``srun`` step per node: ``ray start --head`` on the first, ``ray start --address`` on every other one, at the
  address Slurm itself reaches the node at (its ``NodeAddr``), on ports and a ``RAY_TMPDIR`` derived from the job
  id (two jobs on one node never collide on Ray's default ports: ray #10154, #59551);
- a fresh token from ``/dev/urandom`` each run, exported (``RAY_AUTH_MODE=token``): every step and the driver inherit
  it; it is in no file, not even this script;
- credentials from ``--env-file`` files (readable by their owner only), sourced with their variables exported; a
  tracking URL with a password in it is refused, and sbatch gets no credential of the submitting shell (slurmctld
  keeps a job's environment on disk);
- the driver with an explicit ``--address`` (``address="auto"`` could attach to another user's cluster), with
  ``--resume`` once the study exists;
- ``--signal=B:USR1@LEAD``: the script forwards ``USR1`` (and ``TERM``, preemption) to the driver, which stops for
  ``--resume`` (exit 3, :mod:`study.runtime.stopping`); the script then ends its own Ray nodes by the PIDs of its own
  ``srun`` steps (never ``ray stop``: it ends every user's Ray on the node) and requeues the job
  (``scontrol requeue``), at most ``--max-requeues`` times; the requeued run resumes.

``dmlstudy status`` shows the job's id, state and restart count (:func:`study.runtime.slurm_status.job_line`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from study.arguments import ArgumentParser, one_line
from study.deploy.checks import credential_variables, max_failures, refuse_written_passwords
from study.deploy.job import slurm_seconds
from study.deploy.render import fill, load_template
from study.deploy.sbatch_options import EARLY_PASS, SbatchReadError, read_options
from study.runtime.slurm_status import live_job
from study.table.bill import study_bill, study_priced
from study.table.spec import load_run
from trainables.schema import record as R
from trainables.schema.errors import SpecError, StudyError
from trainables.schema.plain_text import control_character

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = [
    "SlurmJob",
    "main",
    "parse_time",
    "render_script",
]

#: Most nodes a job may have (a bound of the command's, kept from when each node took one of the job's 100 ports).
MAX_NODES = 90
#: sbatch options the command sets itself, by their long names (a short form, an abbreviation or an alias is read as
#: its option: :func:`study.deploy.sbatch_options.read_options`): an ``--sbatch`` line setting one is refused.
_MANAGED = {
    "--nodes": "--nodes",
    "--ntasks-per-node": "--nodes",
    "--ntasks": "--nodes",
    "--cpus-per-task": "--cpus-per-node",
    "--gpus-per-node": "--gpus-per-node",
    "--gpus": "--gpus-per-node",
    "--time": "--time",
    "--partition": "--partition",
    "--account": "--account",
    "--signal": "--signal-lead",
    "--requeue": "--max-requeues",
    "--output": "(the study directory)",
    "--error": "(the study directory)",
    "--open-mode": "(append)",
    "--chdir": "(the current directory)",
    "--job-name": "--job-name",
}
_ENVIRONMENT = (
    "the job's environment is the submitting shell's without its credentials; give those with --env-file FILE"
)
_NO_JOB = "sbatch would submit no job, and the study would record none"
#: sbatch options that would break the job's chain of runs (or the submission itself): why each is refused.
#: ``--dependency`` is allowed: it holds the first run until it is met, and a requeued run has nothing left to wait for.
_BREAKING = {
    "--no-requeue": "the job requeues itself at its time limit; --max-requeues 0 stops after the first run",
    "--array": "every task of an array would run the same study, and two drivers must never run one study",
    "--export": _ENVIRONMENT,
    "--export-file": _ENVIRONMENT,
    "--get-user-env": _ENVIRONMENT,
    "--wait": "dmlstudy slurm would wait for the whole chain of runs (days) instead of submitting it",
    "--test-only": _NO_JOB,
}


def parse_time(text: str) -> int:
    """A Slurm ``--time`` in seconds (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``)."""
    seconds = slurm_seconds(text)
    if seconds is None:
        raise SpecError(f"--time {text!r} is not a Slurm time (MM, HH:MM:SS, D-HH, D-HH:MM:SS)")
    if seconds <= 0:
        raise SpecError(f"--time {text!r} must be positive")
    return seconds


@dataclass(frozen=True)
class SlurmJob:
    """Everything the script says, checked (:func:`_job_from_args`)."""

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


def _check_options(args: argparse.Namespace) -> None:
    a = args
    if not 1 <= a.nodes <= MAX_NODES:
        raise SpecError(f"--nodes must be in [1, {MAX_NODES}], but got {a.nodes}")
    for opt in ("gpus_per_node", "cpus_per_node"):
        v = getattr(a, opt)
        if v is not None and v < (0 if opt == "gpus_per_node" else 1):
            raise SpecError(
                f"--{opt.replace('_', '-')} must be {'>= 0' if opt == 'gpus_per_node' else '>= 1'}, got {v}"
            )
    limit = parse_time(a.time)
    if a.signal_lead is None:
        a.signal_lead = min(300, max(10, limit // 2))
    lead = a.signal_lead
    if not 10 <= lead < limit or lead > 65535:
        raise SpecError(
            f"--signal-lead must be at least 10 s, at most 65535 s and below --time ({limit} s), but got {lead}"
        )
    if a.max_requeues < 0:
        raise SpecError(f"--max-requeues must be >= 0, but got {a.max_requeues}")
    # Every text that lands in the script is one line (the renderer refuses again; here the option is named).
    texts = [("spec", a.spec), ("--job-name", a.job_name), ("--partition", a.partition), ("--account", a.account)]
    texts += [("--python", a.python), ("the current directory", str(Path.cwd()))]
    texts += [("--sbatch", line) for line in a.sbatch_lines] + [("--setup", line) for line in a.setup_lines]
    texts += [("--env-file", path) for path in a.env_file_lines]
    for what, text in texts:
        if text is not None and (bad := control_character(text)) is not None:
            raise SpecError(f"{what} {text!r} holds the control character {bad}: every value of the script is one line")
    for opt in ("partition", "account"):
        value = getattr(a, opt)
        if value is not None and (not value or any(c.isspace() for c in value)):
            raise SpecError(f"--{opt} {value!r}: a Slurm {opt} name holds no white space (sbatch would refuse it)")
    _check_sbatch_lines(a.sbatch_lines)
    a.env_files = [_check_env_file(f) for f in a.env_file_lines]


def _extra_line(line: str) -> str:
    """An ``--sbatch`` line as the script holds it, after ``#SBATCH `` (the guard reads this text, as sbatch will)."""
    return line.removeprefix("#SBATCH").strip()


def _check_sbatch_lines(lines: list[str]) -> None:
    """Refuse ``--sbatch`` lines that set an option the command sets itself, or one that breaks the job's chain, as
    sbatch reads them (its quotes and backslashes, short options clustered, abbreviations, aliases, one line's option
    taking the next line's word), or that sbatch would refuse or ignore."""
    read = [_extra_line(line) for line in lines]
    given = dict(zip(read, lines))  # the line as read -> as the user wrote it, for the message
    try:
        options = read_options(read)
    except SbatchReadError as e:
        raise SpecError(f"--sbatch {given[e.line]!r}: {e.why}") from None
    for line, original in given.items():
        if not any(o.line == line for o in options):
            raise SpecError(f"--sbatch {original!r} sets no option (write e.g. --sbatch=--mem=64G)")
    refused = [(why, o) for o in options if (why := _sbatch_refusal(o.name)) is not None]
    if refused:  # what the job would do otherwise first; an option sbatch ignores last
        why, o = min(refused, key=lambda r: r[1].name in EARLY_PASS)
        named = o.written if o.written == o.name or not o.written.startswith("--") else f"{o.written} ({o.name})"
        raise SpecError(f"--sbatch {given[o.line]!r}: {named} {why}")


def _sbatch_refusal(name: str) -> str | None:
    """Why the option ``name`` (its long name) is refused in an ``--sbatch`` line; ``None`` if it is not."""
    if name in _MANAGED:
        return f"is set by dmlstudy slurm itself; use {_MANAGED[name]}"
    if name in _BREAKING:
        return f"is refused: {_BREAKING[name]}"
    if name in EARLY_PASS:  # refused, so that no one believes it did something
        return "is read by sbatch on its command line only, and ignored in a script"
    return None


def _check_env_file(text: str) -> Path:
    """An ``--env-file``: a regular file that only its owner can read (the job sources it; it holds credentials)."""
    path = Path(text).expanduser().absolute()
    try:
        st = path.stat()
    except OSError as e:
        raise SpecError(f"--env-file {text}: cannot read it ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"--env-file {text}: not a regular file (a file of VAR=value lines the job sources)")
    if st.st_mode & 0o077:
        raise SpecError(
            f"--env-file {text}: readable by others than its owner (mode {stat.S_IMODE(st.st_mode):04o}); it holds "
            f"credentials: chmod 600 {shlex.quote(str(path))}"
        )
    return path


def _specs(args: argparse.Namespace) -> tuple[StudySpec, list[StudySpec]]:
    """The spec the job runs (a table's base) and every spec it holds (a table's cells too), validated."""
    target = load_run(args.spec, args.overrides)
    if target.table is not None:
        target.table.check_budget()
    else:  # a study over search.max_hours on its assumed bill (the job measures a measured one where it runs)
        study_priced(target.base).check(study_bill(target.base, None), target.base.search.max_hours, "study")
    return target.base, target.specs


def _study_dir(spec: StudySpec) -> Path:
    """The study's directory, which the script and its log live in: a shared path Slurm can name in ``--output``."""
    from study.layout import StudyLayout  # defers Optuna (study.tracking.credentials imports its storages)

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


def _job_from_args(args: argparse.Namespace, argv: list[str], prog: str) -> SlurmJob:
    """Validate the options and the spec (a study or a table) and build the job; raises :class:`SpecError`."""
    a = args
    _check_options(a)
    spec, specs = _specs(a)
    refuse_written_passwords(
        specs,
        "the job script, its log and `ps` would show it: name a variable instead (user:${OPTUNA_DB_PASSWORD}@host) "
        "and give it in an --env-file, or use ~/.pgpass or MLFLOW_TRACKING_PASSWORD (docs/cluster.md)",
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
        sbatch_lines=tuple(_extra_line(line) for line in a.sbatch_lines),
        setup_lines=tuple(a.setup_lines),
        command_line=shlex.join([*prog.split(), *[x for x in argv if x != "--dry-run"]]),
        env_files=tuple(a.env_files),
        specs=tuple(specs),
    )


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


def main(argv: list[str] | None = None, prog: str = "python -m study.deploy.slurm") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(argv)
    try:
        job = _job_from_args(args, argv, prog)
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
    return _submit(job, script)


def _submit(job: SlurmJob, script: str) -> int:
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
    """Undo :func:`_submit`'s writes: the script, then each directory it made (deepest first) if it is empty."""
    script.unlink(missing_ok=True)
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


if __name__ == "__main__":
    sys.exit(main())
