"""``dmlstudy kuberay SPEC.yaml`` (``python -m study.deploy.kuberay``): the command line. It checks the options and the
spec (:mod:`study.deploy.kuberay.deployment`) and prints the manifest (:mod:`study.deploy.kuberay.yaml_text`), or
writes it with ``-o``. Exit 0 written, 2 bad input (one line on stderr)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from study.arguments import ArgumentParser, one_line
from study.deploy.checks import max_failures
from study.deploy.kuberay.deployment import GIB_PER_CPU, deployment
from study.deploy.kuberay.manifest import TOKEN_KEY
from study.deploy.kuberay.yaml_text import kubectl, render
from trainables.schema.errors import SpecError, StudyError
from trainables.schema.plain_text import control_character

__all__ = ["main"]


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
