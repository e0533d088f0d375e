"""``dmlstudy slurm`` without a Slurm: the options' checks, the time format, and the script ``--dry-run`` prints
(the real job runs in test_slurm.py)."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
import yaml

from harness.driver import tiny_spec
from study.deploy.slurm.__main__ import main
from study.deploy.slurm.options import parse_time
from study.runtime import slurm_queue
from trainables.schema import record as R
from trainables.schema.errors import SpecError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 5400), ("2:30", 150), ("01:02:03", 3723), ("1-00", 86400), ("2-03:04", 183840), ("1-00:00:05", 86405)],
)
def test_slurm_times(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "1h", "0", "-5"])
def test_bad_slurm_times(text):
    with pytest.raises(SpecError):
        parse_time(text)


@pytest.fixture
def spec_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec("t_sbatch", epochs=2)
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path / "spec.yaml"


def test_the_dry_run_prints_a_valid_script_and_writes_nothing(spec_file, capsys):
    argv = [str(spec_file), "--nodes", "3", "--time", "1-00:00:00", "--sbatch=--mem=8G", "--set", "seed=3", "--dry-run"]
    assert main(argv) == 0
    script = capsys.readouterr().out
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    for line in ("#SBATCH --nodes=3", "#SBATCH --signal=B:USR1@300", "#SBATCH --requeue", "#SBATCH --mem=8G"):
        assert line in script.splitlines()
    assert "--set seed=3" in script and "scontrol requeue" in script and "/dev/urandom" in script
    assert "ray stop" not in script and "auto" not in script  # its own Ray, by address and PID only
    assert not (spec_file.parent / "runs").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--time", "2", "--signal-lead", "120"], "--signal-lead"),
        (["--time", "2", "--nodes", "0"], "--nodes"),
        (["--time", "2", "--sbatch=--signal=USR2@9"], "--signal is set by dmlstudy slurm"),
        (["--time", "2", "--set", "resources.cpu=4", "--cpus-per-node", "2"], "resources.cpu"),
        (["--time", "2", "--set", "search.num_trials=0"], "num_trials"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(spec_file, capsys, args, says):
    assert main([str(spec_file), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (spec_file.parent / "runs").exists()


# --- issue 48: the small ones, the submission, credentials -------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("-t5", "-t is set by dmlstudy slurm itself; use --time"),
        ("-N2", "-N is set by dmlstudy slurm itself; use --nodes"),
        ("-pgpu", "-p is set by dmlstudy slurm itself; use --partition"),
        ("--mem=1G --time=5", "--time is set by dmlstudy slurm itself"),
        ("--partit=gpu", "--partit (--partition) is set by dmlstudy slurm itself"),  # sbatch reads a unique prefix
        ("--tim=5", "--tim abbreviates --time or --time-min: sbatch refuses it"),
        ("--tasks-per-node=2", "--tasks-per-node (--ntasks-per-node) is set by dmlstudy slurm itself; use --nodes"),
        # issue 60: sbatch clusters short options, and a backslash escapes a quote even inside single quotes
        ("-Qa0-3", "-a is refused: every task of an array would run the same study"),
        ("-Ht5", "-t is set by dmlstudy slurm itself; use --time"),
        ("--comment='\\' #' --time=5 --no-requeue --array=0-3", "--time is set by dmlstudy slurm itself"),
        ("--comment=x\\ -t5", "-t is set by dmlstudy slurm itself"),  # an escaped blank still ends sbatch's word
        ("--exclusive -t5", "-t is set by dmlstudy slurm itself"),  # an optional value follows = only
        ("-V", "-V is read by sbatch on its command line only, and ignored in a script"),
        ("--gpus=2", "use --gpus-per-node"),
        ("--no-requeue", "--no-requeue is refused: the job requeues itself"),
        ("--array=1-3", "--array is refused: every task of an array would run the same study"),
        ("-a 1-3", "-a is refused"),
        ("--arr=1-3", "--arr (--array) is refused"),
        ("--export=NONE", "--export is refused: the job's environment"),
        ("--export=ALL,PGPASSWORD=x", "--export is refused"),
        ("--expo=NONE", "--expo abbreviates --export or --export-file"),
        ("--get-user-env", "--get-user-env is refused"),
        ("--wrap=hostname", "--wrap is read by sbatch on its command line only, and ignored in a script"),
        ("--wait", "--wait is refused"),
        ("--test-only", "--test-only is refused"),
        ("--n=2", "abbreviates"),
        ("mem=1G", "is not an sbatch option"),
        ("--comment='unbalanced", "an unmatched ' (sbatch refuses the script)"),
        ("--container-remap-root", "a site's plugin option is read only as --container-remap-root=VALUE"),
    ],
)
def test_the_sbatch_guard_refuses_what_the_command_sets_or_what_breaks_the_chain(spec_file, capsys, line, says):
    assert main([str(spec_file), "--time", "10", f"--sbatch={line}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "line",
    [
        "--dependency=afterok:12",
        "-d afterany:3",
        "--mem=1G",
        "--wait-all-nodes=1",
        "-C 'a|b'",
        "--comment='don\\'t requeue'",  # sbatch reads don't requeue (issue 60)
        "-Hk --comment='a # b' --exclusive",
        "--container-image=nvcr.io/nvidia/pytorch:24.01-py3",  # a site's plugin option (pyxis), its value after =
    ],
)
def test_the_sbatch_guard_lets_other_options_through(spec_file, capsys, line):
    assert main([str(spec_file), "--time", "10", f"--sbatch={line}", "--dry-run"]) == 0
    assert f"#SBATCH {line}\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (["--comment", "-t5"], "--sbatch '-t5' sets no option"),  # sbatch reads -t5 as the comment: harmless, odd
        (["--mem=1G --comment ''", "-t5"], "--sbatch '-t5' sets no option"),  # '' ends sbatch's line
        (["--comment", "--mem=1G -t5"], "-t is set by dmlstudy slurm itself"),
        (["--mem=1G", "# a note"], "--sbatch '# a note' sets no option"),
        (["--mem=1G", "--comment"], "--comment needs a value"),
    ],
)
def test_the_sbatch_guard_reads_all_lines_as_one_list_as_sbatch_does(spec_file, capsys, lines, says):
    """sbatch reads every #SBATCH line into one argument list: an option missing its value takes the next line's."""
    assert main([str(spec_file), "--time", "10", *[f"--sbatch={line}" for line in lines], "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_an_option_may_take_its_value_from_the_next_line(spec_file, capsys):
    assert main([str(spec_file), "--time", "10", "--sbatch=--comment", "--sbatch=-t5 --mem=1G", "--dry-run"]) == 0
    assert "#SBATCH --comment\n#SBATCH -t5 --mem=1G\n" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-7", "-2"])
def test_max_failures_below_minus_one_is_refused(spec_file, capsys, value):
    with pytest.raises(SystemExit) as stop:
        main([str(spec_file), "--time", "10", "--max-failures", value, "--dry-run"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--max-failures: must be -1 (retry always) or a count >= 0" in err
    assert main([str(spec_file), "--time", "10", "--max-failures", "-1", "--dry-run"]) == 0
    assert "--max-failures -1 " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--set", "dataset.root=/data\ntouch /tmp/x #"], "--set dataset.root: the value holds the control character"),
        (["--partition", "gpu a"], "--partition 'gpu a': a Slurm partition name holds no white space"),
        (["--account", "my lab"], "--account 'my lab': a Slurm account name holds no white space"),
        (["--set", "storage=runs\\x"], "storage: the study directory"),
        (["--setup", "echo\ra"], "--setup 'echo\\ra' holds the control character U+000D"),
    ],
)
def test_a_value_slurm_cannot_take_is_refused_before_anything_is_written(spec_file, capsys, args, says):
    assert main([str(spec_file), "--time", "10", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (spec_file.parent / "runs").exists()


def test_a_space_is_quoted_for_sbatch(spec_file, capsys):
    assert main([str(spec_file), "--time", "10", "--job-name", "my study", "--dry-run"]) == 0
    assert '#SBATCH --job-name="my study"\n' in capsys.readouterr().out


@pytest.mark.parametrize(
    "url",
    [
        "tracking.optuna_uri=postgresql://optuna:hunter2-pw@db/optuna",
        "tracking.optuna_uri=postgresql://optuna@db/optuna?password=hunter2-pw",
        "tracking.uri=http://u:hunter2-pw@mlflow:5000",
        "tracking.uri=http://mlflow:5000/?token=hunter2-pw",
    ],
)
@pytest.mark.parametrize("where", ["--set", "spec"])
def test_a_password_in_a_tracking_url_is_refused_without_echoing_it(spec_file, capsys, url, where):
    key, value = url.split("=", 1)
    args = ["--set", url]
    if where == "spec":
        spec = yaml.safe_load(spec_file.read_text())
        spec.setdefault("tracking", {})[key.split(".")[1]] = value
        spec_file.write_text(yaml.safe_dump(spec))
        args = []
    assert main([str(spec_file), "--time", "10", *args]) == 2
    err = capsys.readouterr().err
    assert f"{key}: holds a password written into the URL" in err and len(err.strip().splitlines()) == 1
    assert "hunter2" not in err and not (spec_file.parent / "runs").exists()


def _fake_sbatch(tmp_path, monkeypatch, rc=0, out="42"):
    """``sbatch`` on PATH: records its environment (NUL-separated) and the script it was given, answers ``out``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        f'#!/bin/bash\nenv -0 > {tmp_path}/sbatch.env\ncp "$2" {tmp_path}/sbatch.script\n'
        + (f"echo {out}\n" if rc == 0 else f"echo 'sbatch: error: invalid partition specified' >&2\nexit {rc}\n")
    )
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm_queue, "job_state", lambda job_id: ("PENDING", "0"))


def test_a_refused_submission_leaves_nothing_behind(spec_file, tmp_path, monkeypatch, capsys):
    _fake_sbatch(tmp_path, monkeypatch, rc=1)
    assert main([str(spec_file), "--time", "10"]) == 2
    assert "sbatch refused the job: sbatch: error: invalid partition" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    (tmp_path / "runs").mkdir()  # a storage directory that was there stays, empty
    assert main([str(spec_file), "--time", "10"]) == 2
    assert list((tmp_path / "runs").iterdir()) == []


def test_the_submission_names_the_same_study_and_status_shows_its_pending_job(spec_file, tmp_path, monkeypatch, capsys):
    from study.commands import status

    _fake_sbatch(tmp_path, monkeypatch)
    for name, value in [("RAY_AUTH_TOKEN", "foreign-tok"), ("RAY_ADDRESS", "10.0.0.1:6379"), ("PGPASSWORD", "pg-pw")]:
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_TOKEN", "hf-tok")
    # sbatch's own input variables would override the script's #SBATCH lines (requeue off, another limit); a site's
    # default partition stays while --partition is not given.
    for name, value in [("SBATCH_NO_REQUEUE", "1"), ("SBATCH_TIMELIMIT", "3"), ("SBATCH_PARTITION", "site")]:
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPT_DB", "named-pw")  # named by the URL below: a credential whatever its name
    sets = ["--set", "storage=other", "--set", "tracking.optuna_uri=postgresql://u:${OPT_DB}@db/optuna"]
    assert main([str(spec_file), "--time", "10", *sets]) == 0
    out, err = capsys.readouterr()
    study_dir = tmp_path / "other" / "t_sbatch"
    assert (study_dir / R.SLURM_JOB_FILE).read_text() == "42\n"
    hint = next(line for line in out.splitlines() if "status:" in line).split("status: ", 1)[1]
    assert shlex.split(hint) == ["dmlstudy", "status", str(spec_file), *sets]
    # sbatch (and so slurmctld's state files) got no credential; the note names them, never their values.
    env = dict(v.split("=", 1) for v in (tmp_path / "sbatch.env").read_text().split("\0") if "=" in v)
    assert not {"RAY_AUTH_TOKEN", "RAY_ADDRESS", "PGPASSWORD", "HF_TOKEN", "OPT_DB"} & env.keys() and "PATH" in env
    assert not {"SBATCH_NO_REQUEUE", "SBATCH_TIMELIMIT"} & env.keys() and env["SBATCH_PARTITION"] == "site"
    assert "would override the script's #SBATCH lines): SBATCH_NO_REQUEUE, SBATCH_TIMELIMIT" in err
    assert "HF_TOKEN, OPT_DB, PGPASSWORD" in err and not {"pg-pw", "hf-tok", "named-pw"} & set(err.split())
    # The driver's command line names the variable; the value is in no line of the script.
    script = (tmp_path / "sbatch.script").read_text()
    assert "${OPT_DB}" in script and "named-pw" not in script and "pg-pw" not in script
    # dmlstudy status, with the hint's arguments or the study's directory: the job's line, exit 0.
    for argv in (shlex.split(hint)[2:], [str(study_dir)]):
        assert status.main(argv) == 0
        said = capsys.readouterr().out
        assert said.startswith("Slurm job 42: PENDING, restarted 0 time(s); log ") and said.endswith(
            "; the study has not started yet\n"
        ), said
    monkeypatch.setattr(slurm_queue, "job_state", lambda job_id: ("FAILED", "0"))
    assert status.main([str(study_dir)]) == 2
    assert "error: the study in" in capsys.readouterr().err


def test_status_shows_the_pending_job_of_a_table(tmp_path, monkeypatch, capsys):
    from harness.driver import tiny_table
    from study.commands import status

    table = tiny_table("t_sbatch_table", epochs=2, batches_per_epoch=2, num_trials=1, seeds=1)
    table["storage"] = str(tmp_path / "runs")
    table_file = tmp_path / "table.yaml"
    table_file.write_text(yaml.safe_dump(table))
    (tmp_path / "runs" / "t_sbatch_table").mkdir(parents=True)
    (tmp_path / "runs" / "t_sbatch_table" / R.SLURM_JOB_FILE).write_text("7\n")
    monkeypatch.setattr(slurm_queue, "job_state", lambda job_id: ("PENDING", "0"))
    assert status.main([str(table_file)]) == 0
    assert "Slurm job 7: PENDING" in capsys.readouterr().out


def _env_file(tmp_path, text="PGPASSWORD=s3cret-pw\n", mode=0o600):
    path = tmp_path / "cred.env"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p / "missing.env", "cannot read it (No such file or directory)"),
        (lambda p: p, "not a regular file"),
        (lambda p: _env_file(p, mode=0o640), "readable by others than its owner (mode 0640)"),
        (lambda p: _env_file(p, mode=0o604), "chmod 600"),
    ],
)
def test_an_env_file_must_be_a_file_only_its_owner_reads(spec_file, tmp_path, capsys, make, says):
    assert main([str(spec_file), "--time", "10", "--env-file", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def _run_until_setup(script: str, tmp_path) -> subprocess.CompletedProcess[str]:
    """The job script up to its setup lines, as the job runs it, then a check that PGPASSWORD is exported."""
    prefix = script[: script.index("# --- setup")]
    check = "/bin/bash -c '[ \"$PGPASSWORD\" = s3cret-pw ] && echo exported || echo missing'\n"
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"}
    return subprocess.run(["bash", "-c", prefix + check], env=env, cwd=tmp_path, capture_output=True, text=True)


def test_an_env_file_is_sourced_exported_and_never_printed(spec_file, tmp_path, capsys):
    good = _env_file(tmp_path)
    assert main([str(spec_file), "--time", "10", "--env-file", str(good), "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert "s3cret" not in script and shlex.quote(str(good)) in script
    done = _run_until_setup(script, tmp_path)
    assert done.stdout.endswith("exported\n") and "s3cret" not in done.stdout + done.stderr
    good.write_text("PGPASSWORD=s3cret-pw (\n")  # a syntax error that would quote the secret
    done = _run_until_setup(script, tmp_path)
    assert done.returncode == 2 and "cannot source --env-file" in done.stdout
    assert "s3cret" not in done.stdout + done.stderr
