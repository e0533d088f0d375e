"""``dmlstudy kuberay SPEC.yaml``: a study (or a table) as a KubeRay ``RayJob`` manifest, printed or written with ``-o``.

The manifest is two YAML documents: a ``ConfigMap`` holding the spec (every ``--set`` applied) and the entrypoint's
script, mounted on the head pod, and the ``RayJob``: a Ray cluster of one head (the driver runs there, as the job's
entrypoint; it takes no trials: ``num-cpus: 0``) and one worker group sized for ``search.max_concurrent`` trials of
``resources`` each. Every secret comes from a Kubernetes ``Secret`` as a ``valueFrom.secretKeyRef`` variable, never
inline: the Ray token (``RAY_AUTH_TOKEN``, on the head, the workers and the submitter: Ray 2.59+ clusters require it),
the S3 keys (head and workers: trials write their checkpoints to the bucket) and the stores' passwords (the head
alone: only the driver talks to Optuna and MLflow). The spec's tracking URLs name those passwords as ``${VAR}``s
(:mod:`study.tracking.credentials`); a URL with a password written into it is refused, since Kubernetes keeps a
``ConfigMap`` in the clear.

Written by hand as plain data dumped to YAML (no templating engine, no Kubernetes client): the output is meant to be
read and edited (node selectors, tolerations, another GPU resource name), and ``tests/study/deploy/test_kuberay.py`` checks
it against the ``RayJob`` CRD's OpenAPI schema of KubeRay v1.7.0. Nothing here talks to a cluster.

A retried ``RayJob`` (``backoffLimit``: a new cluster after a failed one) or one applied again finds its study's
``spec.yaml`` in the bucket and continues it with ``--resume``, as ``python -m study.run`` requires.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from study.arguments import ArgumentParser, one_line
from study.deploy.checks import ENV_VAR, max_failures, refuse_written_passwords, tracking_urls
from study.deploy.render import fill, load_template
from study.loading import read_raw
from study.table.spec import load_run
from trainables.schema import record as R
from trainables.schema.errors import SpecError, StudyError
from trainables.schema.plain_text import control_character

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["main", "render", "Deployment", "job_name", "kubectl"]

#: Where the ConfigMap is mounted on the head pod, and the entrypoint that runs from it.
MOUNT = "/etc/dmlstudy"
START_SCRIPT = "start.sh"
ENTRYPOINT = f"bash {MOUNT}/{START_SCRIPT}"
#: The key KubeRay reads the token from in ``authOptions.secretName`` (ray-operator ``RAY_AUTH_TOKEN_SECRET_KEY``).
TOKEN_KEY = "auth_token"
#: The S3 variables pyarrow (``storage: s3://``) and boto3 read: the keys are required, the rest used when present.
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
S3_OPTIONAL = ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
#: Store credentials a URL need not name: libpq's and MLflow's own variables, used when the Secret holds them.
STORE_OPTIONAL = ("PGPASSWORD", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
#: KubeRay names a RayJob's cluster ``<job>-<5 chars>``, and a RayCluster name may hold 53 (MaxRayJobNameLength).
MAX_JOB_NAME = 47
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: A Kubernetes memory quantity (``16Gi``, ``500M``, ``1e9``).
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([eE][0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_LOOPBACK_HOSTS = ("localhost", "::1", "0.0.0.0")
#: Memory per CPU of a worker unless ``--memory-per-worker`` says otherwise (a guess: data loaders and a model per trial).
GIB_PER_CPU = 4
#: Spec keys naming files the pods read: relative, they would resolve against Ray's job directory on the head.
_POD_PATHS = (("dataset", "root"), ("dataset", "split_file"), ("dataset", "noise", "file"), ("dataset", "cache_dir"))


@dataclass(frozen=True)
class Sizing:
    """The worker group: ``workers`` pods of ``cpus``/``gpus``/``memory`` each, each running ``trials_per_worker``."""

    workers: int
    cpus: int
    gpus: int
    memory: str
    trials_per_worker: int


@dataclass(frozen=True)
class Deployment:
    """Everything the manifest is made of, checked: the spec (as written, with ``--set``), its study and the options."""

    raw: dict[str, Any]
    spec: StudySpec
    name: str
    image: str
    namespace: str | None
    sizing: Sizing
    head_cpus: int
    head_memory: str
    token_secret: str
    s3_secret: str
    db_secret: str
    volumes: tuple[tuple[str, str], ...]
    max_failures: int
    backoff_limit: int
    ttl_seconds: int
    ray_version: str
    #: The study's directory in the bucket (:class:`study.layout.StudyLayout`'s root).
    study_root: str

    @property
    def db_vars(self) -> list[str]:
        """The ``${VAR}``s the spec's tracking URLs name: each is a required key of the store Secret."""
        urls = (self.spec.tracking.uri or "", self.spec.tracking.optuna_uri or "")
        return sorted({name for url in urls for name in ENV_VAR.findall(url)})


def job_name(study_name: str) -> str:
    """A valid RayJob name for a study: lower case, ``-`` for anything else, starting with a letter, at most 47."""
    name = re.sub(r"[^a-z0-9-]+", "-", study_name.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"study-{name}"
    return name[:MAX_JOB_NAME].rstrip("-")


# --- checks: every one raises SpecError with one line naming the key or option --------------------------------------


def _check_deployable(spec: StudySpec, raw: dict[str, Any], db_secret: str) -> None:
    """What a RayJob needs of a spec: storage every pod reaches, stores on servers, no secret and no local path."""
    if not spec.storage.startswith("s3://"):
        raise SpecError(
            f"a RayJob's pods share no disk, so storage must be an s3:// URI (got {spec.storage!r}): "
            "e.g. --set storage=s3://BUCKET/studies",
            "storage",
        )
    for key, url in tracking_urls(spec):
        if url is None:
            raise SpecError(
                "must name a server the head pod reaches (with storage on S3 there is no sqlite file): e.g. "
                + ("http://mlflow.NAMESPACE.svc:5000" if key == "tracking.uri" else "postgresql://user@db/optuna"),
                key,
            )
    refuse_written_passwords(
        [spec],
        "Kubernetes keeps a ConfigMap in the clear: name a variable instead (user:${OPTUNA_DB_PASSWORD}@host) "
        f"and put it in the Secret {db_secret!r}",
    )
    for key, url in tracking_urls(spec):
        assert url is not None  # checked above
        parts = urlsplit(url)
        if parts.scheme.split("+")[0] in ("sqlite", "file"):
            raise SpecError(f"{url} is a file on one pod's disk: name a server the head pod reaches", key)
        host = (parts.hostname or "").lower()
        if host in _LOOPBACK_HOSTS or host.startswith("127."):
            raise SpecError(
                f"{url} names this machine; in a pod it is the pod itself: name the server as the cluster reaches it "
                "(e.g. mlflow.NAMESPACE.svc)",
                key,
            )
    for path in _POD_PATHS:
        value: Any = raw
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and not value.startswith("/"):
            key = ".".join(path)
            raise SpecError(
                f"{value!r} is relative; in a pod it would resolve against Ray's job directory: give the path where "
                f"the pods see it (in the image, or on a --volume), e.g. --set {key}=/data/...",
                key,
            )


def _check_name(value: str, option: str, pattern: re.Pattern[str], limit: int, what: str) -> str:
    if len(value) > limit or not pattern.fullmatch(value):
        raise SpecError(
            f"{value!r} is not a valid {what} (lower-case letters, digits and '-', at most {limit})", option
        )
    return value


def _sizing(spec: StudySpec, args: argparse.Namespace) -> Sizing:
    """Workers sized for ``search.max_concurrent`` trials: one trial per worker unless the options fit more."""
    cpu, gpu = spec.resources.cpu, spec.resources.gpu
    gpus = math.ceil(gpu) if args.gpus_per_worker is None else args.gpus_per_worker
    if gpu > gpus:
        raise SpecError(f"a trial needs resources.gpu={gpu:g} but a worker would have {gpus}", "--gpus-per-worker")
    if args.cpus_per_worker is not None and cpu > args.cpus_per_worker:
        raise SpecError(
            f"a trial needs resources.cpu={cpu:g} but a worker would have {args.cpus_per_worker}", "--cpus-per-worker"
        )
    fits = [math.floor(gpus / gpu + 1e-9)] if gpu > 0 else []
    if args.cpus_per_worker is not None:
        fits.append(math.floor(args.cpus_per_worker / cpu + 1e-9))
    per_worker = min(fits) if fits else 1
    cpus = math.ceil(cpu * per_worker) if args.cpus_per_worker is None else args.cpus_per_worker
    workers = args.workers or math.ceil(spec.search.max_concurrent / per_worker)
    memory = args.memory_per_worker or f"{GIB_PER_CPU * cpus}Gi"
    if not _QUANTITY.fullmatch(memory):
        raise SpecError(f"{memory!r} is not a Kubernetes quantity (e.g. 16Gi)", "--memory-per-worker")
    return Sizing(workers, cpus, gpus, memory, per_worker)


def _volume(text: str) -> tuple[str, str]:
    claim, sep, path = text.partition(":")
    if not sep or not path.startswith("/"):
        raise SpecError(
            f"{text!r}: expected CLAIM:/mount/path (a PersistentVolumeClaim and where pods see it)", "--volume"
        )
    _check_name(claim, "--volume", _DNS1123_SUBDOMAIN, 253, "PersistentVolumeClaim name")
    return claim, path


def deployment(args: argparse.Namespace) -> Deployment:
    """The checked deployment of the command line ``args``; :class:`SpecError` (one line) on bad input."""
    from study.layout import StudyLayout  # defers Optuna (study.tracking.credentials imports its storages)

    raw = read_raw(args.spec, args.overrides)  # what the RayJob carries: the spec as written, --set applied
    spec = load_run(args.spec, args.overrides).base
    secret = _check_name(args.secret, "--secret", _DNS1123_SUBDOMAIN, 253, "Secret name")
    token, s3, db = (
        _check_name(value or secret, option, _DNS1123_SUBDOMAIN, 253, "Secret name")
        for value, option in (
            (args.token_secret, "--token-secret"),
            (args.s3_secret, "--s3-secret"),
            (args.db_secret, "--db-secret"),
        )
    )
    _check_deployable(spec, raw, db)
    name = _check_name(args.name or job_name(spec.name), "--name", _DNS1035, MAX_JOB_NAME, "RayJob name")
    namespace = (
        None if args.namespace is None else _check_name(args.namespace, "--namespace", _DNS1123_LABEL, 63, "namespace")
    )
    if not args.image or any(c.isspace() for c in args.image):
        raise SpecError(f"{args.image!r} is not an image reference", "--image")
    if not _QUANTITY.fullmatch(args.head_memory):
        raise SpecError(f"{args.head_memory!r} is not a Kubernetes quantity (e.g. 8Gi)", "--head-memory")
    return Deployment(
        raw=raw,
        spec=spec,
        name=name,
        image=args.image,
        namespace=namespace,
        sizing=_sizing(spec, args),
        head_cpus=args.head_cpus,
        head_memory=args.head_memory,
        token_secret=token,
        s3_secret=s3,
        db_secret=db,
        volumes=tuple(_volume(v) for v in args.volumes),
        max_failures=args.max_failures,
        backoff_limit=args.backoff_limit,
        ttl_seconds=args.ttl_seconds_after_finished,
        ray_version=metadata.version("ray"),
        study_root=StudyLayout.for_spec(spec).root,
    )


# --- the manifest -----------------------------------------------------------------------------------------------------


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True  # the variable is left unset when the Secret lacks the key
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _env(d: Deployment, role: str) -> list[dict[str, Any]]:
    """The variables of a container: the token everywhere; S3 on the head and the workers; stores on the head."""
    env = [{"name": "RAY_AUTH_MODE", "value": "token"}, _secret_env("RAY_AUTH_TOKEN", d.token_secret, TOKEN_KEY)]
    if role in ("head", "worker"):
        env += [_secret_env(k, d.s3_secret, k) for k in S3_KEYS]
        env += [_secret_env(k, d.s3_secret, k, optional=True) for k in S3_OPTIONAL]
    if role == "head":
        taken = {e["name"] for e in env}
        env += [_secret_env(k, d.db_secret, k) for k in d.db_vars if k not in taken]
        env += [_secret_env(k, d.db_secret, k, optional=True) for k in STORE_OPTIONAL if k not in d.db_vars]
    return env


def _resources(cpus: int, memory: str, gpus: int = 0) -> dict[str, Any]:
    # Requests equal limits: the pod is Guaranteed, and KubeRay tells Ray the limits (--num-cpus, --num-gpus).
    amounts: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        amounts["nvidia.com/gpu"] = gpus
    return {"limits": amounts, "requests": dict(amounts)}


def _pod(d: Deployment, container: dict[str, Any], with_spec: bool = False) -> dict[str, Any]:
    """A Ray pod: its container, /dev/shm in memory (Ray's object store and PyTorch's loaders use it), the
    ``--volume``s, and on the head the ConfigMap (the spec and the entrypoint) at :data:`MOUNT`."""
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    for i, (claim, path) in enumerate(d.volumes):
        mounts.append({"name": f"data-{i}", "mountPath": path, "readOnly": True})
        volumes.append({"name": f"data-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
    if with_spec:
        mounts.append({"name": "study-spec", "mountPath": MOUNT, "readOnly": True})
        volumes.append({"name": "study-spec", "configMap": {"name": _configmap_name(d)}})
    return {"spec": {"containers": [{**container, "volumeMounts": mounts}], "volumes": volumes}}


def _configmap_name(d: Deployment) -> str:
    return f"{d.name}-spec"


#: The entrypoint's template (package data: study/deploy/templates/), filled by :func:`study.deploy.render.fill`.
TEMPLATE = "kuberay_start.sh"


def start_script(d: Deployment) -> str:
    """The entrypoint: start the study, or continue it (``--resume``) when its ``spec.yaml`` is in the bucket."""
    values = {
        "spec": f"{MOUNT}/{R.SPEC_FILE}",
        "name": d.spec.name,
        "study_spec": f"{d.study_root}/{R.SPEC_FILE}",
        "max_failures": d.max_failures,
    }
    return fill(load_template(TEMPLATE), values)


def configmap(d: Deployment) -> dict[str, Any]:
    spec_text = yaml.safe_dump(d.raw, sort_keys=False, default_flow_style=None, allow_unicode=True, width=120)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(d, _configmap_name(d)),
        "data": {R.SPEC_FILE: spec_text, START_SCRIPT: start_script(d)},
    }


def _metadata(d: Deployment, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if d.namespace:
        meta["namespace"] = d.namespace
    meta["labels"] = {"app.kubernetes.io/part-of": "dmlstudy", "app.kubernetes.io/instance": d.name}
    meta["annotations"] = {"dmlstudy/study": d.spec.name, "dmlstudy/storage": d.study_root}
    return meta


def _containers(d: Deployment) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The head's, a worker's and the job submitter's container."""
    head = {
        "name": "ray-head",
        "image": d.image,
        "env": _env(d, "head"),
        "ports": [
            {"name": "gcs-server", "containerPort": 6379},
            {"name": "dashboard", "containerPort": 8265},
            {"name": "client", "containerPort": 10001},
        ],
        "resources": _resources(d.head_cpus, d.head_memory),
    }
    worker = {
        "name": "ray-worker",
        "image": d.image,
        "env": _env(d, "worker"),
        "resources": _resources(d.sizing.cpus, d.sizing.memory, d.sizing.gpus),
    }
    submitter = {
        "name": "ray-job-submitter",
        "image": d.image,
        "env": _env(d, "submitter"),
        "resources": _resources(1, "1Gi"),
    }
    return head, worker, submitter


def rayjob(d: Deployment) -> dict[str, Any]:
    """The RayJob manifest: a cluster of its own (a head without trials, fixed workers) whose entrypoint runs the
    study."""
    head, worker, submitter = _containers(d)
    n = d.sizing.workers
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _metadata(d, d.name),
        "spec": {
            "entrypoint": ENTRYPOINT,
            # Retries start a new cluster, whose entrypoint continues the study (start.sh): a lost head pod (the
            # driver with it) costs the trials' work since their last checkpoint, not the study.
            "backoffLimit": d.backoff_limit,
            # GPUs are released when the study ends; everything it made is in the bucket and the stores.
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": d.ttl_seconds,
            # The submitter runs `ray job submit` against the head: it needs the token too (KubeRay fills its command).
            "submitterPodTemplate": {"spec": {"restartPolicy": "Never", "containers": [submitter]}},
            "rayClusterSpec": {
                "rayVersion": d.ray_version,
                # KubeRay >= 1.5.1 also injects the token itself; the variables above are explicit all the same.
                "authOptions": {"mode": "token", "secretName": d.token_secret},
                "enableInTreeAutoscaling": False,
                "headGroupSpec": {
                    # No trials on the head: it holds the driver, the GCS and the dashboard.
                    "rayStartParams": {"num-cpus": "0"},
                    "template": _pod(d, head, with_spec=True),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu" if d.sizing.gpus else "cpu",
                        "replicas": n,
                        "minReplicas": n,
                        "maxReplicas": n,
                        "rayStartParams": {},
                        "template": _pod(d, worker),
                    }
                ],
            },
        },
    }


def _shell_command(words: list[str]) -> str:
    """A printed command: each word masked, then quoted (:func:`study.tracking.credentials.shell_command`), so that
    pasted into a shell it runs as shown (``-o 'out/my job.yaml'``, a bucket named ``$(id)``)."""
    from study.tracking.credentials import shell_command  # defers Optuna (its storages load with it)

    return shell_command(words)


def kubectl(d: Deployment, *words: str) -> str:
    """``kubectl WORDS...`` as printed: ``-n NAMESPACE`` after the words before the first option (the RayJob's
    namespace), shell-quoted."""
    at = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    ns = ["-n", d.namespace] if d.namespace else []
    return _shell_command(["kubectl", *words[:at], *ns, *words[at:]])


def _header(d: Deployment, output: str | None) -> str:
    """Comments: the Secret(s) to create (names and keys only), how to apply, follow and resume."""
    needs: dict[str, list[str]] = {}
    optional: dict[str, list[str]] = {}
    for secret, keys, opt in (
        (d.token_secret, [TOKEN_KEY], []),
        (d.s3_secret, list(S3_KEYS), list(S3_OPTIONAL)),
        (d.db_secret, d.db_vars, list(STORE_OPTIONAL)),
    ):
        needs.setdefault(secret, []).extend(k for k in keys if k not in needs.get(secret, []))
        optional.setdefault(secret, []).extend(opt)
    lines = [
        f"# Study {d.spec.name!r} as a KubeRay RayJob, written by `dmlstudy kuberay` (KubeRay >= 1.5.1; checked against",
        "# the v1.7.0 RayJob CRD). It holds no secret: create the Secret(s) it reads first, e.g. from a KEY=VALUE file",
        "# readable by you only:",
    ]
    for secret, keys in needs.items():
        lines.append(f"#   {kubectl(d, 'create', 'secret', 'generic', secret, f'--from-env-file={secret}.env')}")
        lines.append(f"#     keys: {' '.join(keys) or '(none required)'}")
        lines.append(f"#     read when present: {' '.join(optional[secret])}")
    lines += [
        f'#   ({TOKEN_KEY}: the Ray cluster\'s token, e.g. python -c "import secrets; print(secrets.token_hex(32))")',
        f"# Run:     {kubectl(d, 'apply', '-f', output or 'THIS_FILE')}",
        f"# Follow:  {kubectl(d, 'logs', '-f', f'job/{d.name}')}    (the driver's output, through the submitter)",
        f"# Status:  {_shell_command(['dmlstudy', 'status', d.study_root])}",
        f"# Workers: {d.sizing.workers} x ({d.sizing.cpus} CPU, {d.sizing.gpus} GPU, {d.sizing.memory}), "
        f"{d.sizing.trials_per_worker} trial(s) of resources cpu={d.spec.resources.cpu:g} gpu={d.spec.resources.gpu:g} "
        f"each; search.max_concurrent={d.spec.search.max_concurrent}",
    ]
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the spec, the script) as literal blocks, so the manifest reads as the files it carries; the
    entries of the lists below and the resource amounts on one line each, as Kubernetes' own examples write them."""


#: Lists whose entries are written one per line, and mappings written on one line.
_ONE_LINE_ENTRIES = ("env", "ports", "volumeMounts", "volumes")
_ONE_LINE_MAPPINGS = ("limits", "requests")


class _Flow(dict):
    """A mapping :class:`_Dumper` writes on one line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _flow(dumper: yaml.SafeDumper, value: _Flow) -> yaml.MappingNode:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value.items(), flow_style=True)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(_Flow, _flow)


def _compact(node: Any) -> Any:
    """``node`` with the entries of :data:`_ONE_LINE_ENTRIES` and the :data:`_ONE_LINE_MAPPINGS` marked one-line."""
    if isinstance(node, list):
        return [_compact(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ONE_LINE_ENTRIES and isinstance(value, list):
            out[key] = [_Flow(item) for item in value]
        elif key in _ONE_LINE_MAPPINGS and isinstance(value, dict):
            out[key] = _Flow(value)
        else:
            out[key] = _compact(value)
    return out


def render(d: Deployment, output: str | None = None) -> str:
    """The manifest: the header's comments, then the ConfigMap and the RayJob as two YAML documents."""
    body = yaml.dump_all(
        [configmap(d), _compact(rayjob(d))],
        Dumper=_Dumper,
        sort_keys=False,
        width=200,  # a one-line entry stays on its line
        allow_unicode=True,
        explicit_start=True,
    )
    return _header(d, output) + body


# --- command line -----------------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Write a KubeRay RayJob manifest (a ConfigMap with the spec, then the RayJob) that runs the study "
        "on Kubernetes. Secrets come from Kubernetes Secrets; storage must be s3://. Nothing is applied.",
    )
    p.add_argument("spec", help="YAML study or table spec")
    p.add_argument("--image", required=True, help="container image with this project and its Ray installed")
    p.add_argument("--workers", type=_positive, help="worker pods (default: enough for search.max_concurrent trials)")
    p.add_argument("--cpus-per-worker", type=_positive, metavar="C", help="default: the trials' resources.cpu")
    p.add_argument("--gpus-per-worker", type=_count, metavar="G", help="default: resources.gpu rounded up")
    p.add_argument("--memory-per-worker", metavar="QTY", help=f"default: {GIB_PER_CPU}Gi per CPU")
    p.add_argument("--head-cpus", type=_positive, default=2, metavar="C", help="the head pod (the driver): default 2")
    p.add_argument("--head-memory", default="8Gi", metavar="QTY", help="default 8Gi")
    p.add_argument("--namespace", help="the namespace of the RayJob and its ConfigMap (default: kubectl's)")
    p.add_argument("--name", help="the RayJob's name (default: from the study's name)")
    p.add_argument("--secret", default="dmlstudy", help="the one Secret every key comes from (default: dmlstudy)")
    p.add_argument("--token-secret", metavar="NAME", help=f"Secret with the Ray token under {TOKEN_KEY!r}")
    p.add_argument("--s3-secret", metavar="NAME", help="Secret with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...")
    p.add_argument("--db-secret", metavar="NAME", help="Secret with the ${VAR}s the tracking URLs name")
    p.add_argument(
        "--volume",
        dest="volumes",
        action="append",
        default=[],
        metavar="CLAIM:PATH",
        help="mount a PersistentVolumeClaim read-only on every pod (datasets); repeatable",
    )
    p.add_argument(
        "--max-failures", type=max_failures, default=3, metavar="N", help="python -m study.run's (default 3; -1 always)"
    )
    p.add_argument("--backoff-limit", type=_count, default=2, metavar="N", help="RayJob retries (default 2)")
    p.add_argument(
        "--ttl-seconds-after-finished", type=_count, default=300, metavar="S", help="keep the cluster S s (default 300)"
    )
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a spec value"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the manifest here (default: stdout)")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m study.deploy.kuberay") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.output is not None and (bad := control_character(args.output)) is not None:
            raise SpecError(f"holds the control character {bad}: the manifest's header names it on one line", "-o")
        d = deployment(args)
        text = render(d, args.output)
    except StudyError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    trials = d.sizing.workers * d.sizing.trials_per_worker
    if trials < d.spec.search.max_concurrent:
        print(
            f"warning: {d.sizing.workers} worker(s) run at most {trials} trial(s) at a time; "
            f"search.max_concurrent is {d.spec.search.max_concurrent}",
            file=sys.stderr,
        )
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"error: -o {args.output}: cannot write ({e.strerror or type(e).__name__})", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {kubectl(d, 'apply', '-f', args.output)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
