"""``dmlstudy slurm`` without a Slurm: the options' checks, the time format, and the script ``--dry-run`` prints
(the real job runs in test_slurm.py)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from harness.driver import tiny_spec
from study.deploy.slurm import main, parse_time
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
