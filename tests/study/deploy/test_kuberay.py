"""``dmlstudy kuberay``: the manifest against KubeRay's own RayJob schema, its secrets, its sizing, its bad input and its
entrypoint's resume. No Kubernetes here: what a cluster would check first (the CRD's schema) is checked instead.

The CRD's ``openAPIV3Schema`` (tests/study/deploy/data/kuberay/, v1.7.0) is Kubernetes' structural OpenAPI v3 dialect; it is
read as JSON Schema (draft 7) with the API server's own extra rules added where a manifest could break them:

- ``nullable: true`` admits ``null``;
- an object that lists its ``properties`` admits no other field (``additionalProperties: false``): what
  ``kubectl apply``'s strict field validation rejects, and what a lenient server would silently drop (the CRD has no
  ``x-kubernetes-preserve-unknown-fields``);
- ``x-kubernetes-int-or-string``: an integer or a string (the CRD also spells it as ``anyOf``);
- ``x-kubernetes-list-type``: ``map`` lists are unique by their ``x-kubernetes-list-map-keys`` (an ``env`` name, a
  port), ``set`` lists unique;
- ``format: int32``/``int64``: in range;
- ``default``s are filled in before the check, as the API server does (a missing ``minReplicas`` is 0);
- ``x-kubernetes-validations`` (CEL, which this test cannot evaluate) fails any field that carries it: the manifest
  must stay clear of those fields (``deletionStrategy``, ``managedBy``, ``gcsFaultToleranceOptions``), so nothing it
  sets goes unchecked.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from study.deploy.kuberay.__main__ import main
from study.intake.spec_reader import load_spec, parse_spec
from trainables.schema import record as R

REPO = Path(__file__).resolve().parents[3]
SCHEMA = Path(__file__).parent / "data" / "kuberay" / "ray.io_rayjobs-v1.7.0.openAPIV3Schema.json"
SPEC = REPO / "search_spaces" / "bspml_cub.yaml"  # resources {cpu: 4, gpu: 1}, search.max_concurrent 4
TABLE = REPO / "search_spaces" / "table_cub.yaml"  # resources {cpu: 8, gpu: 1}, search.max_concurrent 4
ON_CLUSTER = [
    "--set",
    "storage=s3://studies/runs",
    "--set",
    "tracking.uri=http://mlflow.ml.svc:5000",
    "--set",
    "tracking.optuna_uri=postgresql://optuna:${OPTUNA_DB_PASSWORD}@postgres.ml.svc:5432/optuna",
    "--set",
    "dataset.root=/data/CUB_200_2011",
]
IMAGE = ["--image", "registry.example/dmlstudy:0.1.0"]


# --- the schema as JSON Schema ----------------------------------------------------------------------------------------


def _structural(node: Any) -> Any:
    """The CRD's OpenAPI v3 node as a draft-7 JSON Schema (see the module's docstring)."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _structural(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("items", "not"):
        if key in out:
            out[key] = _structural(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(out["additionalProperties"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = _structural(out[key])
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _int_or_string(validator, value, instance, schema):
    if value and (isinstance(instance, bool) or not isinstance(instance, int | str)):
        yield jsonschema.ValidationError(f"{instance!r} is neither an integer nor a string")


def _list_type(validator, value, instance, schema):
    if not isinstance(instance, list):
        return
    if value == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = [tuple(item.get(k) for k in keys) for item in instance if isinstance(item, dict)]
        dup = {k for k in seen if seen.count(k) > 1}
        if dup:
            yield jsonschema.ValidationError(f"duplicate entries for list-map keys {keys}: {sorted(dup)}")
    elif value == "set":
        seen_items = [json.dumps(i, sort_keys=True) for i in instance]
        if len(set(seen_items)) != len(seen_items):
            yield jsonschema.ValidationError("duplicate entries in a list-type set")


def _cel(validator, value, instance, schema):
    rules = "; ".join(v.get("rule", "") for v in value)
    yield jsonschema.ValidationError(f"this field carries CEL rules this test cannot evaluate: {rules}")


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {
        "x-kubernetes-int-or-string": _int_or_string,
        "x-kubernetes-list-type": _list_type,
        "x-kubernetes-validations": _cel,
    },
)


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = _structural(json.loads(SCHEMA.read_text()))
    Validator.check_schema(schema)
    return Validator(schema, format_checker=_FORMATS)


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """``value`` with the schema's ``default``s filled in, as the API server does before it validates (a missing
    ``minReplicas`` is 0, not an error): in every object present, at any depth."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        filled = {k: _defaulted(properties.get(k, {}), v) for k, v in value.items()}
        for k, sub in properties.items():
            if k not in filled and "default" in sub:
                filled[k] = sub["default"]
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            filled = {k: v if k in properties else _defaulted(extra, v) for k, v in filled.items()}
        return filled
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_defaulted(schema["items"], v) for v in value]
    return value


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every error of a RayJob document, its defaults applied first: ``path: message``."""
    validator = _validator()
    return sorted(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(_defaulted(validator.schema, doc))
    )


# --- rendering ----------------------------------------------------------------------------------------------------------


def render(tmp_path: Path, *args: str, spec: Path = SPEC) -> tuple[str, list[dict[str, Any]]]:
    out = tmp_path / "job.yaml"
    assert main([str(spec), *IMAGE, *ON_CLUSTER, *args, "-o", str(out)]) == 0
    text = out.read_text()
    return text, list(yaml.safe_load_all(text))


@cache
def _sample() -> tuple[str, tuple[dict[str, Any], dict[str, Any]]]:
    """One rendered manifest, shared by the tests that only read it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        text, (cm, job) = render(Path(tmp), "--namespace", "ml", "--volume", "datasets:/data")
    return text, (cm, job)


def containers(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    return {
        "head": cluster["headGroupSpec"]["template"]["spec"]["containers"][0],
        "worker": cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0],
        "submitter": job["spec"]["submitterPodTemplate"]["spec"]["containers"][0],
    }


def test_the_rendered_rayjob_validates_against_the_crd_schema():
    _, (cm, job) = _sample()
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert schema_errors(job) == []
    # Kubernetes checks metadata itself (the CRD's schema says only "object"): a RayJob name KubeRay accepts.
    name = job["metadata"]["name"]
    assert name == "bspml-cub" and len(name) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert job["spec"]["entrypoint"] == "bash /etc/dmlstudy/start.sh"  # no shell syntax: KubeRay pastes it into bash
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["backoffLimit"] == 2
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token", "secretName": "dmlstudy"}
    # The operator's own checks (ray-operator/controllers/ray/utils/validation.go, v1.7.0) that this manifest meets:
    # token auth needs rayVersion >= 2.52.0; without autoscaling a group sets minReplicas <= replicas <= maxReplicas;
    # a group's Ray resources are not set both in rayStartParams and in its resources field.
    cluster = job["spec"]["rayClusterSpec"]
    assert tuple(int(p) for p in cluster["rayVersion"].split(".")[:2]) >= (2, 52)
    group = _worker_group(job)
    assert (
        cluster["enableInTreeAutoscaling"] is False
        and group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    )
    assert "resources" not in group and "resources" not in cluster["headGroupSpec"]


@pytest.mark.parametrize(
    "where, change, expected",
    [
        (
            "a count as a string",
            lambda j: _worker_group(j).update(replicas="4"),
            "replicas: '4' is not of type 'integer'",
        ),
        ("a required field missing", lambda j: _worker_group(j).pop("groupName"), "'groupName' is a required property"),
        ("a misspelled field", lambda j: j["spec"].update(shutdownAfterJobFinish=True), "shutdownAfterJobFinish"),
        ("a duplicate env name", lambda j: _env(j).append(dict(_env(j)[0])), "duplicate entries for list-map keys"),
        ("a quantity as a list", lambda j: _limits(j).update(cpu=[4]), "is neither an integer nor a string"),
        ("an int32 overflow", lambda j: j["spec"].update(backoffLimit=2**31), "is not a 'int32'"),
        ("a CEL-guarded field", lambda j: j["spec"].update(managedBy="x"), "CEL rules"),
    ],
)
def test_a_broken_rayjob_fails_the_schema(where, change, expected):
    _, (_, job) = _sample()
    broken = json.loads(json.dumps(job))
    change(broken)
    errors = schema_errors(broken)
    assert any(expected in e for e in errors), (where, errors)


def _worker_group(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]


def _env(job: dict[str, Any]) -> list[dict[str, Any]]:
    return containers(job)["worker"]["env"]


def _limits(job: dict[str, Any]) -> dict[str, Any]:
    return containers(job)["worker"]["resources"]["limits"]


def test_secrets_come_from_secrets_and_no_value_reaches_the_output(tmp_path, monkeypatch):
    sentinels = {
        "OPTUNA_DB_PASSWORD": "s3ntinel-db-pw",
        "AWS_SECRET_ACCESS_KEY": "s3ntinel-aws-secret",
        "AWS_ACCESS_KEY_ID": "s3ntinel-aws-key",
        "RAY_AUTH_TOKEN": "s3ntinel-ray-token",
        "PGPASSWORD": "s3ntinel-pg",
    }
    for name, value in sentinels.items():
        monkeypatch.setenv(name, value)
    text, (cm, job) = render(tmp_path, "--token-secret", "ray-token", "--s3-secret", "s3", "--db-secret", "stores")
    assert not [v for v in sentinels.values() if v in text]
    env = {role: {e["name"]: e for e in c["env"]} for role, c in containers(job).items()}
    for role, variables in env.items():
        for name, entry in variables.items():  # only the auth mode is written inline
            assert ("value" in entry) == (name == "RAY_AUTH_MODE"), (role, entry)
        assert variables["RAY_AUTH_MODE"]["value"] == "token"
        assert variables["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "ray-token", "key": "auth_token"}}
    for role in ("head", "worker"):  # trials write checkpoints to the bucket; the driver its state
        assert env[role]["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "s3",
            "key": "AWS_SECRET_ACCESS_KEY",
        }
    # The stores' password goes to the head alone (the driver is the stores' single writer), required.
    assert env["head"]["OPTUNA_DB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "stores",
        "key": "OPTUNA_DB_PASSWORD",
    }
    assert env["head"]["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert not {"OPTUNA_DB_PASSWORD", "PGPASSWORD"} & (env["worker"].keys() | env["submitter"].keys())
    assert "AWS_SECRET_ACCESS_KEY" not in env["submitter"]
    assert "${OPTUNA_DB_PASSWORD}" in cm["data"]["spec.yaml"]  # the spec names the variable; the pod resolves it
    assert schema_errors(job) == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://optuna:hunter2-pw@db/optuna",
        # issue 60: a key percent-encoded is the same key to SQLAlchemy (make_url decodes it)
        "postgresql://optuna@db/optuna?passw%6Frd=hunter2-pw",
        "postgresql://optuna@db/optuna?sslmode=require&%70assword=hunter2-pw",
    ],
)
def test_a_password_written_into_a_url_is_refused_without_echoing_it(tmp_path, capsys, url):
    out = tmp_path / "job.yaml"
    code = main(
        [
            str(SPEC),
            *IMAGE,
            *ON_CLUSTER,
            "--set",
            f"tracking.optuna_uri={url}",
            "-o",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and err.startswith("error: ") and "tracking.optuna_uri" in err
    assert "hunter2" not in err


def test_resources_follow_the_options(tmp_path):
    _, (_, job) = render(
        tmp_path, "--workers", "3", "--gpus-per-worker", "2", "--cpus-per-worker", "16", "--memory-per-worker", "64Gi"
    )
    group = _worker_group(job)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], group["groupName"]) == (3, 3, 3, "gpu")
    limits = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 2}
    assert containers(job)["worker"]["resources"] == {"limits": limits, "requests": limits}
    assert job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}  # no trial on the head
    assert schema_errors(job) == []


def test_default_sizing_fits_max_concurrent_trials(tmp_path):
    # bspml_cub: trials of 4 CPUs and 1 GPU, 4 at a time: 4 workers of 4 CPUs, 1 GPU, 4 Gi per CPU.
    _, (_, job) = render(tmp_path)
    assert _worker_group(job)["replicas"] == 4
    assert _limits(job) == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}
    # Half a GPU per trial, 2 CPUs: two trials share a 1-GPU worker of 4 CPUs; 6 at a time need 3 workers.
    _, (_, job) = render(
        tmp_path, "--set", "resources.gpu=0.5", "--set", "resources.cpu=2", "--set", "search.max_concurrent=6"
    )
    assert _worker_group(job)["replicas"] == 3
    assert _limits(job) == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}
    # CPU-only trials: no GPU asked, the group says so.
    _, (_, job) = render(tmp_path, "--set", "resources.gpu=0", "--set", "search.max_concurrent=2")
    assert _worker_group(job)["groupName"] == "cpu" and "nvidia.com/gpu" not in _limits(job)
    assert _worker_group(job)["replicas"] == 2


def test_a_table_deploys_like_a_study(tmp_path):
    _, (cm, job) = render(tmp_path, spec=TABLE)
    assert schema_errors(job) == []
    assert _worker_group(job)["replicas"] == 4 and _limits(job) == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}
    assert "arms" in yaml.safe_load(cm["data"]["spec.yaml"])
    assert "s3://studies/runs/table_cub/spec.yaml" in cm["data"]["start.sh"]


def test_the_configmap_carries_the_spec_the_driver_would_load(tmp_path):
    _, (cm, job) = _sample()
    # Kubernetes' rules for a ConfigMap (core/v1; its schema is not shipped): a DNS-1123 subdomain name, keys of
    # [-._a-zA-Z0-9], string values, at most 1 MiB in all; the RayJob's head mounts it by that name.
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", cm["metadata"]["name"])
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", k) and isinstance(v, str) for k, v in cm["data"].items())
    assert sum(len(v.encode()) for v in cm["data"].values()) < 2**20
    volumes = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    assert {"name": "study-spec", "configMap": {"name": cm["metadata"]["name"]}} in volumes
    # The spec in the pod is the one loaded here, --set overrides included.
    in_pod = parse_spec(yaml.safe_load(cm["data"][R.SPEC_FILE]))
    assert in_pod == load_spec(SPEC, [v for v in ON_CLUSTER if v != "--set"])


@pytest.mark.parametrize(
    "args, names",
    [
        (["--set", "storage=runs/"], "storage: a RayJob's pods share no disk"),
        (["--set", "tracking.uri=http://127.0.0.1:5000"], "tracking.uri: http://127.0.0.1:5000 names this machine"),
        (["--set", "tracking.optuna_uri=sqlite:////tmp/o.db"], "tracking.optuna_uri: sqlite:////tmp/o.db is a file"),
        (["--set", "dataset.root=data/CUB_200_2011"], "dataset.root: 'data/CUB_200_2011' is relative"),
        (["--gpus-per-worker", "0"], "--gpus-per-worker: a trial needs resources.gpu=1 but a worker would have 0"),
        (["--cpus-per-worker", "2"], "--cpus-per-worker: a trial needs resources.cpu=4 but a worker would have 2"),
        (["--memory-per-worker", "lots"], "--memory-per-worker: 'lots' is not a Kubernetes quantity"),
        (["--namespace", "Bad_NS"], "--namespace: 'Bad_NS' is not a valid namespace"),
        (["--volume", "datasets"], "--volume: 'datasets': expected CLAIM:/mount/path"),
        (["--workers", "0"], "argument --workers: must be at least 1"),
        (["--set", "train.epochs=-1"], "train.epochs"),
        (["--max-failures", "-7"], "argument --max-failures: must be -1 (retry always) or a count >= 0, got -7"),
        (["--set", "storage=s3://studies/x\ny"], "--set storage: the value holds the control character U+000A"),
        (["--set", "tracking.uri=http://mlflow.ml.svc:5000/?token=t0ps3cret"], "tracking.uri: holds a password"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, args, names):
    out = tmp_path / "job.yaml"
    try:
        code = main([str(SPEC), *IMAGE, *ON_CLUSTER, *args, "-o", str(out)])
    except SystemExit as stop:  # argparse's errors (study.arguments: one line, exit 2)
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and names in err, err


# --- the entrypoint ----------------------------------------------------------------------------------------------------


def test_the_entrypoint_starts_a_new_study_and_resumes_an_existing_one(tmp_path):
    """start.sh as the head pod runs it, its existence check real (read_bytes, here on a file:// URI in place of
    the bucket); ``python -m study.run`` is replaced by a shim that prints its arguments."""
    _, (cm, _) = _sample()
    study_dir = tmp_path / "bucket" / "bspml_cub"
    script = cm["data"]["start.sh"].replace("s3://studies/runs/bspml_cub", study_dir.as_uri())
    (tmp_path / "start.sh").write_text(script)
    shim = tmp_path / "bin" / "python"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/bash\nif [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\necho "RUN $*"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}

    def start() -> str:
        proc = subprocess.run(["bash", str(tmp_path / "start.sh")], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    fresh = start()
    assert "starting study bspml_cub" in fresh and "RUN -m study.run /etc/dmlstudy/spec.yaml --max-failures 3" in fresh
    study_dir.mkdir(parents=True)
    (study_dir / R.SPEC_FILE).write_text("name: bspml_cub\n")  # what the driver writes when the study starts
    again = start()
    assert "RUN -m study.run /etc/dmlstudy/spec.yaml --resume --max-failures 3" in again
