"""What a ``dmlstudy kuberay`` manifest is made of, checked: :func:`deployment` turns the command line into a
:class:`Deployment` (the spec as written with its ``--set``, the study it makes, the options), refusing with one line
naming the key or option a spec that a RayJob's pods cannot run (storage not on S3, stores on a pod's own disk or on
this machine, a password in a URL, a relative path), a name Kubernetes would refuse, or workers too small for a trial
(:class:`Sizing`)."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from study.deploy.checks import ENV_VAR, refuse_written_passwords, tracking_urls
from study.intake.load import load_plan
from study.intake.spec_reader import read_raw
from trainables.schema.errors import SpecError

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["Sizing", "Deployment", "job_name", "deployment"]

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
    #: The study's directory in the bucket (:class:`study.intake.layout.StudyLayout`'s root).
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
    from study.intake.layout import StudyLayout  # defers Optuna (study.tracking.credentials imports its storages)

    raw = read_raw(args.spec, args.overrides)  # what the RayJob carries: the spec as written, --set applied
    spec = load_plan(args.spec, args.overrides).base
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
