"""The ``--sbatch`` guard reads ``#SBATCH`` lines as real sbatch does (issue 60, item 2).

Each case is a script's extra ``#SBATCH`` lines, hostile where it can be: clustered short options, abbreviations, an
alias, quotes and backslashes in sbatch's rules (not the shell's), ``#``, an empty word, a ``hetjob`` word, a value
taken from the next line. Real sbatch 22.05 (Debian's) reads each script with ``-v``, which prints every option it
set once it has read the whole script, before it checks values against the cluster and tries to reach a controller; no daemon runs (a ``slurm.conf`` naming an unused port, a 1 s message
timeout). What it printed must be what :func:`study.deploy.slurm.sbatch_reader.read_options` reads, and where sbatch refuses
the script, the reader refuses it too.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.driver import tiny_spec
from study.deploy.slurm.__main__ import main
from study.deploy.slurm.sbatch_reader import EARLY_PASS, SbatchReadError, read_options

#: Options whose value sbatch prints as it read it (others it prints converted: ``--time=5`` as ``00:05:00``).
_VERBATIM = {"--comment", "--array", "--constraint", "--dependency", "--mail-user", "--qos"}

CASES = [
    ["-Qa0-3"],  # -Q, then -a with 0-3: an array
    ["-Ht5"],  # hold, and a 5-minute limit
    ["--comment='\\' #' --time=5 --no-requeue --array=0-3"],  # \ escapes ' inside '...': the # is in the comment
    ["--comment='don\\'t requeue'"],
    ["--tasks-per-node=2"],  # an alias of --ntasks-per-node
    ["--arr=1-3 --no-req --partit=debug"],
    ["--gpus-per-n=1"],
    ['--comment "a \\"b\\" #c" -t5'],
    ["--comment=a#b --time=5"],  # an unquoted # ends the line
    ["--comment=x\\ --time=5"],  # an escaped blank still ends the word
    ["--comm\\ent=x '--time'=5"],
    ["--comment=a\u00a0--time=5"],  # U+00A0 is no blank to sbatch
    ["--comment '' --time=5", "--qos=normal"],  # '' ends the line: --comment takes the next line's word
    ["--hold PACKJOB --time=5"],  # a hetjob/packjob word ends the line
    ["--comment", "-t5 --mem=1G"],
    ["--exclusive -t5"],  # an optional value follows = only
    ["--exclusive=user -Hk"],
    ["-d afterany:3 -C 'a|b' --mail-user=a@b"],
    ["-vt5"],  # -v is ignored in a script, -t5 is not
    ["--export=NONE"],
    # sbatch refuses each of these scripts
    ["-- --time=5"],
    ["--expo=NONE"],  # ambiguous: --export or --export-file
    ["--tim=5"],  # ambiguous: --time or --time-min
    ["--comment='open"],
    ["--comment :x"],
    ["-t"],
    ["--hold=1"],
    ["-y"],
    ["mem=1G"],
]

_CONF = "ClusterName=probe\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
_CONF += "AuthType=auth/munge\nNodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=n1 Default=YES\n"


def _script(lines: list[str]) -> str:
    return "#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "true\n"


def _sbatch_read(text: str, tmp_path: Path) -> dict[str, str] | None:
    """The options real sbatch set from the script ``text``; ``None`` if it refused the script."""
    (tmp_path / "slurm.conf").write_text(_CONF)
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin", "SLURM_CONF": str(tmp_path / "slurm.conf")}
    done = subprocess.run(["sbatch", "-v", str(script)], capture_output=True, text=True, env=env, timeout=30)
    said = [line.removeprefix("sbatch: ") for line in done.stderr.splitlines()]
    if "end of defined options" not in said:
        assert done.returncode != 0, done.stderr
        return None
    table = said[said.index("defined options") + 2 : said.index("end of defined options") - 1]
    read = {f"--{name.strip()}": value.strip() for name, _, value in (row.partition(":") for row in table)}
    read.pop("--verbose")  # this test's own -v
    return read


def _read(lines: list[str]) -> dict[str, str] | None:
    """The options the guard's reader found (those sbatch acts on in a script); ``None`` if it refused the lines."""
    try:
        options = read_options(lines)
    except SbatchReadError:
        return None
    return {o.name: o.value or "" for o in options if o.name not in EARLY_PASS}


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch not found (apt-get install slurm-client)")
@pytest.mark.parametrize("lines", CASES, ids=[" / ".join(c) for c in CASES])
def test_the_guard_reads_a_line_as_real_sbatch_does(lines, tmp_path):
    real, guard = _sbatch_read(_script(lines), tmp_path), _read(lines)
    assert (real is None) == (guard is None), f"sbatch read {real}, the guard {guard}"
    if real is not None and guard is not None:
        assert sorted(real) == sorted(guard), f"sbatch read {real}, the guard {guard}"
        for name in _VERBATIM & set(real):
            assert real[name] == guard[name], f"{name}: sbatch read {real[name]!r}, the guard {guard[name]!r}"


#: Lines the guard lets through, hostile in sbatch's reading: the script ``dmlstudy slurm`` writes holds them as given.
ACCEPTED = [
    "--comment='don\\'t requeue'",
    "  --comment=a\u00a0--time=5  ",  # the script holds the line stripped, and the guard reads it so
    "-Hk --comment='a # b' #--time=5",
    "--exclusive --comment",  # --exclusive takes no word; --comment takes the next line's first word
    "-t5 --mem=1G",
]


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch not found (apt-get install slurm-client)")
def test_the_written_script_is_read_by_sbatch_as_the_guard_read_it(tmp_path, monkeypatch, capsys):
    spec = tiny_spec("t_sbatch_read", epochs=2)
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    argv = [str(tmp_path / "spec.yaml"), "--time", "10", *[f"--sbatch={line}" for line in ACCEPTED], "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err
    script = capsys.readouterr().out
    real = _sbatch_read(script, tmp_path)
    header = [line.removeprefix("#SBATCH") for line in script.splitlines() if line.startswith("#SBATCH")]
    assert real is not None and sorted(real) == sorted(_read(header))
    extra = _read([line.strip() for line in ACCEPTED])
    assert sorted(extra) == ["--comment", "--exclusive", "--hold", "--mem", "--no-kill"]
    assert real["--comment"] == extra["--comment"] == "-t5"  # the last --comment's, from the next line
    assert real["--time"] == "00:10:00" and real["--mem"] == extra["--mem"] == "1G"
