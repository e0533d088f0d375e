"""A ``dmlstudy kuberay`` manifest as printed (:func:`render`): a header of comments (the Secrets to create, names and
keys only; how to apply, follow and resume, each a ``kubectl`` line quoted to paste, :func:`kubectl`), then the
``ConfigMap`` and the ``RayJob`` as two YAML documents written to be read (literal blocks, short entries on one
line)."""

from __future__ import annotations

from typing import Any

import yaml

from study.deploy.kuberay.deployment import Deployment
from study.deploy.kuberay.manifest import S3_KEYS, S3_OPTIONAL, STORE_OPTIONAL, TOKEN_KEY, configmap, rayjob

__all__ = ["render", "kubectl"]


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
