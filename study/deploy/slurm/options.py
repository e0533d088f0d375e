"""``dmlstudy slurm``'s options, checked before anything is written: ranges, one-line values, ``--time``
(:func:`parse_time`), the ``--sbatch`` lines (read as sbatch reads them, :mod:`study.deploy.slurm.sbatch_reader`: none
may set an option the command sets itself, nor break the job's chain of runs) and the ``--env-file`` files (readable
by their owner only). Each refusal is a :class:`~trainables.schema.errors.SpecError` that names the option."""

from __future__ import annotations

import argparse
import shlex
import stat
from pathlib import Path

from study.deploy.slurm.sbatch_reader import EARLY_PASS, SbatchReadError, read_options
from study.deploy.slurm.scontrol import slurm_seconds
from trainables.schema.errors import SpecError
from trainables.schema.plain_text import control_character

__all__ = ["check_options", "extra_line", "parse_time"]

#: Most nodes a job may have (a bound of the command's, kept from when each node took one of the job's 100 ports).
MAX_NODES = 90
#: sbatch options the command sets itself, by their long names (a short form, an abbreviation or an alias is read as
#: its option: :func:`study.deploy.slurm.sbatch_reader.read_options`): an ``--sbatch`` line setting one is refused.
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


def check_options(args: argparse.Namespace) -> None:
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


def extra_line(line: str) -> str:
    """An ``--sbatch`` line as the script holds it, after ``#SBATCH `` (the guard reads this text, as sbatch will)."""
    return line.removeprefix("#SBATCH").strip()


def _check_sbatch_lines(lines: list[str]) -> None:
    """Refuse ``--sbatch`` lines that set an option the command sets itself, or one that breaks the job's chain, as
    sbatch reads them (its quotes and backslashes, short options clustered, abbreviations, aliases, one line's option
    taking the next line's word), or that sbatch would refuse or ignore."""
    read = [extra_line(line) for line in lines]
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
