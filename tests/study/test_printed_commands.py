"""Every printed command round-trips through a shell (issue 60): ``shlex.split`` of what is printed gives back the
arguments meant, every secret masked and nothing else changed.

Property-style, as tests/study/tracking/test_url_secrets.py (seeded random cases, no extra dependency): each field
of a command (the spec path, every ``--set``, ``--address``; ``dmlstudy kuberay``'s ``-o`` and storage) holds hostile
text (white space, quotes, ``$(…)``, backticks, ``#``, ``%``, ``\\``, unicode) around secrets written as a URL's
userinfo or as a query value under any spelling of its key (``?password=``, ``?passw%6Frd=``, ``&%70assword=``...).
The expected line is built from the same pieces with each secret replaced by ``***``: an oracle that knows where the
secrets are, independent of how the masking finds them. Pure functions only: no Ray, no subprocess.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import yaml

from study.commands.invocation import SLURM_JOB_RAY_DIR, Invocation, job_private_address, parser
from study.deploy.kuberay.__main__ import main
from study.deploy.render import load_template
from study.tracking import credentials
from study.tracking.credentials import MASK, mask_argument, shell_command

#: Hostile pieces of plain text. None holds ``=`` (no query pair can form) and a word holding ``://`` is drawn again
#: (no URL can form): a plain word holds no secret, and is printed as it is.
_PLAIN = [
    "my spec", "$(id)", "`id`", "'", '"', "#", "%", "%6F", "\\", "ünï", "→ ☃", ";", "|", " ", "\t", "\n", "*", "~",
    "!", "$HOME", "${HOME}", "@", ":", "dir/", "?", "&", "x", "a b", "--resume", "'$(touch PWNED)'",
]  # fmt: skip
#: Characters of a secret: a query value's run to the next ``&`` (and SQLAlchemy splits there too); no ``@`` (the spec
#: refuses one in a path or query); a userinfo password may hold any of these, ``@`` and ``:`` too.
_SECRET_CHARS = "BCDFGHJKLMNPQRSTVWXZ0123456789 '\"$()`#%\\;|!*~/?:ü"
#: Every spelling of a secret query key that SQLAlchemy reads as one (decoded: ``passw%6Frd`` is ``password``).
_KEYS = ["password", "PASSWORD", "passw%6Frd", "%70assword", "passw%256Frd", "token", "api%5Fkey", "pwd", "secret"]
#: Spellings of keys that are no secret's: their values are printed as they are.
_NOT_KEYS = ["pass+word", "passwords", "x", "charset", "pass%2Bword"]


@dataclass(frozen=True)
class Word:
    """One argument, as pieces: ``(text, is_secret)``."""

    pieces: tuple[tuple[str, bool], ...]

    @property
    def written(self) -> str:
        return "".join(text for text, _ in self.pieces)

    @property
    def masked(self) -> str:
        return "".join(MASK if secret else text for text, secret in self.pieces)

    @property
    def secrets(self) -> list[str]:
        return [text for text, secret in self.pieces if secret]


def _plain(rng: random.Random, lead: str = "") -> str:
    while True:
        text = lead + "".join(rng.choice(_PLAIN) for _ in range(rng.randint(1, 6)))
        if "://" not in text:
            return text


def _secret(rng: random.Random, userinfo: bool) -> str:
    chars = _SECRET_CHARS + ("@:" if userinfo else "")
    return "Hunter2" + "".join(rng.choice(chars) for _ in range(rng.randint(1, 12)))


def _tail(rng: random.Random) -> str:
    """What may follow a secret: no ``@`` (the userinfo ends at the last one) and, after a query value, an ``&``."""
    return rng.choice(["", "&x=$(id)", "&charset=utf8#frag", "&a=' b\"", "&timeout=3"])


def _url(rng: random.Random) -> Word:
    """A URL with one secret: a userinfo password, or a query value under a secret key; or a ``${VAR}`` (none)."""
    scheme = rng.choice(["postgresql", "mysql+pymysql", "http", "sqlite"])
    kind = rng.choice(["userinfo", "query", "query", "var", "not-a-key"])
    if kind == "userinfo":
        user = rng.choice(["u", "me", "ü ser", "$(id)", ""])
        return Word(
            (
                (f"{scheme}://{user}:", False),
                (_secret(rng, userinfo=True), True),
                (f"@db:5432/o{_tail(rng)}", False),
            )
        )
    if kind == "var":
        return Word(((f"{scheme}://u:${{OPTUNA_DB_PASSWORD}}@db/o?{rng.choice(_KEYS)}=${{PW}}{_tail(rng)}", False),))
    first = rng.choice(["?", "?a=1&", "?charset=utf8&"])
    if kind == "not-a-key":
        return Word(((f"{scheme}://db/o{first}{rng.choice(_NOT_KEYS)}=Hunter9 $(id){_tail(rng)}", False),))
    return Word(
        (
            (f"{scheme}://db:5432/o{first}{rng.choice(_KEYS)}=", False),
            (_secret(rng, userinfo=False), True),
            (_tail(rng), False),
        )
    )


def _override(rng: random.Random) -> Word:
    key = rng.choice(["tracking.uri", "tracking.optuna_uri", "storage", "name"])
    if key == "storage" or key == "name":
        return Word(((f"{key}={_plain(rng)}", False),))
    url = _url(rng)
    return Word(((f"{key}=", False), *url.pieces))


def _address(rng: random.Random) -> Word:
    if rng.random() < 0.3:
        return Word((("ray://u:", False), (_secret(rng, userinfo=True), True), ("@head:10001", False)))
    return Word(((_plain(rng, lead="h"), False),))


@pytest.fixture(autouse=True)
def _no_remembered_urls():
    """A remembered URL's password is masked wherever it appears: none here, so that only a line's own secrets are."""
    with mock.patch.dict(credentials._REAL, clear=True):
        yield


def test_the_masking_oracle_can_fail():
    """The oracle sees a secret the masking leaves and a word it changes (so the property below is not vacuous)."""
    word = Word((("tracking.uri=sqlite:///o.db?passw%6Frd=", False), ("Hunter2x", True)))
    assert word.masked == f"tracking.uri=sqlite:///o.db?passw%6Frd={MASK}" == mask_argument(word.written)
    # masking the joined line (the bug): the closing quote ran into the masked value
    broken = credentials.mask_passwords(shlex.join(["--set", word.written, "--resume"]))
    with pytest.raises(ValueError, match="No closing quotation"):
        shlex.split(broken)


@pytest.mark.parametrize("seed", range(4))
def test_shell_command_round_trips_with_every_secret_masked(seed):
    rng = random.Random(seed)
    for _ in range(300):
        words = [rng.choice([_override, _address, lambda r: Word(((_plain(r), False),))])(rng) for _ in range(4)]
        line = shell_command([w.written for w in words])
        assert shlex.split(line) == [w.masked for w in words], line
        assert "Hunter2" not in line, line


@pytest.mark.parametrize("seed", range(3))
def test_the_continue_line_round_trips_with_every_secret_masked(seed, monkeypatch):
    """``python -m study.run``'s last line: every option that shapes the study, hostile, as a shell reads it back."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    rng = random.Random(100 + seed)
    for _ in range(100):
        spec = Word(((_plain(rng, lead="s"), False),))
        overrides = [_override(rng) for _ in range(rng.randint(0, 3))]
        address = _address(rng)
        argv = [spec.written, *(w for o in overrides for w in ("--set", o.written)), "--address", address.written]
        run = Invocation("dmlstudy run", parser("dmlstudy run").parse_args([*argv, "--drain-timeout", "20"]))
        expected = [spec.masked, *(w for o in overrides for w in ("--set", o.masked)), "--address", address.masked]
        line = run.command(resume=True)
        assert shlex.split(line) == ["dmlstudy", "run", *expected, "--drain-timeout", "20", "--resume"], line
        assert "Hunter2" not in line, line


#: The common development URL: its user, password and database are all ``study``, the word of the module, the spec's
#: folder and the storage path too.
_DEV_URL = "postgresql://study:study@localhost/study"
#: Plain text around a known password: it in module names, paths and values, ``?pass=`` in a path that is no URL.
_PLAIN_STUDY = [
    *_PLAIN,
    "study",
    "study.run",
    "/srv/study/runs",
    "?pass=study",
    "a?pass=1",
    "$(study)",
    "'study'",
    "s tudy",
]


def _plain_study(rng: random.Random, lead: str = "") -> str:
    while True:
        text = lead + "".join(rng.choice(_PLAIN_STUDY) for _ in range(rng.randint(1, 6)))
        if "://" not in text:
            return text


def test_a_printed_command_masks_a_known_password_where_it_stands_and_nowhere_else(monkeypatch):
    """With ``postgresql://study:study@localhost/study`` the driver knows ``study`` as a password: a message masks it
    wherever it appears (a library may quote a fragment of it), but the continue line masks only the URL's password
    field and secret query values, so that ``python -m study.run``, the spec's path and ``storage=`` read back as
    written, ``?pass=`` of a path included."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    credentials.remember(_DEV_URL)  # as the driver does with its tracking URLs
    argv = [
        "search_spaces/study $(study).yaml",
        *("--set", f"tracking.optuna_uri={_DEV_URL}"),
        *("--set", "tracking.uri=http://study:st udy'@mlflow:5000/x?token=study&db=study"),
        *("--set", "storage=/srv/study/runs?pass=study"),
        *("--set", 'name=it\'s "study"'),
        *("--address", "ray://study:study@head:10001"),
    ]
    run = Invocation("python -m study.run", parser().parse_args(argv))
    assert shlex.split(run.command(resume=True)) == [
        "python", "-m", "study.run",
        "search_spaces/study $(study).yaml",
        "--set", f"tracking.optuna_uri=postgresql://study:{MASK}@localhost/study",
        "--set", f"tracking.uri=http://study:{MASK}@mlflow:5000/x?token={MASK}&db=study",
        "--set", "storage=/srv/study/runs?pass=study",
        "--set", "name=it's \"study\"",
        "--address", f"ray://study:{MASK}@head:10001",
        "--resume",
    ]  # fmt: skip
    # A message (a log line, an error) keeps the stricter masking: the known password goes wherever it stands.
    message = credentials.mask_passwords("could not open /srv/study/runs?pass=study for study.run")
    assert message == f"could not open /srv/{MASK}/runs?pass={MASK} for {MASK}.run"


@pytest.mark.parametrize("seed", range(2))
def test_printed_commands_round_trip_around_a_known_password(seed):
    """The property of :func:`test_shell_command_round_trips_with_every_secret_masked`, the password ``study`` known
    to the process and written all over the plain words: each URL's secrets masked, every other character kept."""
    credentials.remember(_DEV_URL)
    rng = random.Random(200 + seed)

    def plain(r: random.Random) -> Word:
        return Word(((_plain_study(r), False),))

    def override(r: random.Random) -> Word:
        return Word(((f"storage={_plain_study(r)}", False),)) if r.random() < 0.5 else _override(r)

    for _ in range(300):
        words = [rng.choice([override, _address, plain])(rng) for _ in range(4)]
        line = shell_command([w.written for w in words])
        assert shlex.split(line) == [w.masked for w in words], line
        assert "Hunter2" not in line, line


def test_the_continue_line_inside_a_slurm_job_names_no_private_ray_address(monkeypatch):
    """Issue 60: inside a ``dmlstudy slurm`` job the driver runs on the job's own Ray (dead once the run ends), so its
    continue line names no ``--address`` (the job's own line follows it); anywhere else ``--address`` is kept."""
    run = Invocation("python -m study.run", parser().parse_args(["spec.yaml", "--address", "127.0.0.1:37003"]))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:37003")
    monkeypatch.setenv("RAY_TMPDIR", "/scratch/tmp/dmlray-4242")
    assert shlex.split(run.command(resume=True)) == ["python", "-m", "study.run", "spec.yaml", "--resume"]
    monkeypatch.setenv("RAY_TMPDIR", "/tmp/ray")  # the user's own Ray in an allocation: its address is kept
    assert "--address 127.0.0.1:37003" in run.command(resume=True)


def test_the_job_scripts_ray_dir_is_the_one_the_driver_recognises():
    """The job script's ``RAY_TMPDIR`` and :data:`study.commands.invocation.SLURM_JOB_RAY_DIR` name the same directory, and the
    script gives the driver the address it exports."""
    script = load_template("slurm.sbatch.sh")
    assert f'export RAY_TMPDIR="${{TMPDIR:-/tmp}}/{SLURM_JOB_RAY_DIR.format(job_id="$SLURM_JOB_ID")}"' in script
    assert '--address "$RAY_ADDRESS"' in script
    env = {"SLURM_JOB_ID": "9", "RAY_ADDRESS": "10.1.2.3:40001", "RAY_TMPDIR": "/tmp/dmlray-9"}
    assert job_private_address("10.1.2.3:40001", env)
    assert not job_private_address("10.1.2.3:40001", {**env, "RAY_TMPDIR": "/tmp/dmlray-10"})  # another job's
    assert not job_private_address("10.1.2.3:40001", {**env, "RAY_ADDRESS": "10.1.2.3:6379"})  # another Ray
    assert not job_private_address("10.1.2.3:40001", {k: v for k, v in env.items() if k != "SLURM_JOB_ID"})


# --- dmlstudy kuberay --------------------------------------------------------------------------------------------------

_SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "bspml_cub.yaml"
_ON_CLUSTER = [
    "--set",
    "tracking.uri=http://mlflow.ml.svc:5000",
    "--set",
    "tracking.optuna_uri=postgresql://optuna:${OPTUNA_DB_PASSWORD}@postgres.ml.svc:5432/optuna",
    "--set",
    "dataset.root=/data/CUB_200_2011",
]


def _printed(header: str, label: str) -> list[str]:
    line = next(x for x in header.splitlines() if x.startswith(f"# {label}"))
    return shlex.split(line.removeprefix(f"# {label}").split("    (")[0])


@pytest.mark.parametrize("namespace", [None, "ml"])
def test_kuberay_prints_commands_a_shell_reads_back(tmp_path, capsys, namespace):
    """``-o 'out/my job.yaml'`` and a bucket named ``$(id)``: the header's commands and the ``wrote`` line."""
    rng = random.Random(60)
    ns = ["-n", namespace] if namespace else []
    for _ in range(6):
        folder = tmp_path / _plain(rng, lead="o").replace("/", "_").replace("\n", "_").replace("\t", "_")
        folder.mkdir(exist_ok=True)
        output = str(folder / "my job.yaml")
        bucket = _plain(rng, lead="b").replace("\n", "_").replace("\t", "_")
        argv = [str(_SPEC), "--image", "img:1", *_ON_CLUSTER, "--set", f"storage=s3://{bucket}", "-o", output]
        assert main([*argv, *(["--namespace", namespace] if namespace else [])]) == 0, capsys.readouterr()
        header = Path(output).read_text().split("\n---\n")[0]
        assert _printed(header, "Run:") == ["kubectl", "apply", *ns, "-f", output]
        assert _printed(header, "Follow:") == ["kubectl", "logs", *ns, "-f", "job/bspml-cub"]
        assert _printed(header, "Status:") == ["dmlstudy", "status", f"s3://{bucket}/bspml_cub"]
        secret_line = next(x for x in header.splitlines() if "kubectl create secret" in x)
        assert shlex.split(secret_line.removeprefix("#")) == [
            "kubectl", "create", "secret", "generic", "dmlstudy", *ns, "--from-env-file=dmlstudy.env"
        ]  # fmt: skip
        wrote = capsys.readouterr().err.splitlines()[-1]
        assert shlex.split(wrote.removeprefix(f"wrote {output}: ")) == ["kubectl", "apply", *ns, "-f", output]
        assert len(list(yaml.safe_load_all(Path(output).read_text()))) == 2  # the header stays comments


def test_kuberay_refuses_an_output_path_that_would_break_its_header(tmp_path, capsys):
    out = tmp_path / "a\nb.yaml"
    argv = [str(_SPEC), "--image", "img:1", *_ON_CLUSTER, "--set", "storage=s3://b/r", "-o", str(out)]
    assert main(argv) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: -o: holds the control character U+000A")
