"""What ``dmlstudy slurm`` and ``dmlstudy kuberay`` both refuse before they write anything: a password written into
a tracking URL, a ``--max-failures`` no driver means; and which variables of the submitting shell are credentials
that must not travel with a job (sbatch hands its whole environment to slurmctld, which keeps it on disk)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from study.arguments import max_failures
from trainables.schema.errors import SpecError

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["ENV_VAR", "tracking_urls", "refuse_written_passwords", "max_failures", "credential_variables"]

#: A ``${VAR}`` in a tracking URL, as :mod:`study.tracking.credentials` resolves it in the driver.
ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Names of variables that hold a credential by every convention in use (``PGPASSWORD``, ``MLFLOW_TRACKING_TOKEN``,
#: ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``HF_TOKEN``, ``WANDB_API_KEY``, ``RAY_AUTH_TOKEN``...).
_CREDENTIAL_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|CREDENTIAL", re.IGNORECASE)


def tracking_urls(spec: StudySpec) -> list[tuple[str, str | None]]:
    """``(key, url)`` of every URL of a spec that names a store (the URL keys of ``tracking``)."""
    return [("tracking.uri", spec.tracking.uri), ("tracking.optuna_uri", spec.tracking.optuna_uri)]


def refuse_written_passwords(specs: Iterable[StudySpec], advice: str) -> None:
    """:class:`SpecError` naming the key of the first tracking URL with a literal password (in its userinfo or its
    query: ``password=``, ``passw%6Frd=``, ``token=``...), from the spec or a ``--set``, as spelled and as its driver
    decodes it; ``${VAR}`` references pass. The message quotes no part of the URL."""
    from study.tracking.credentials import redact, written_secrets  # defers Optuna (its storages load with it)

    for spec in specs:
        for key, url in tracking_urls(spec):
            if url is not None and (redact(url) != url or written_secrets(url)):
                raise SpecError(f"holds a password written into the URL; {advice}", key)


def credential_variables(environ: Mapping[str, str], specs: Iterable[StudySpec] = ()) -> list[str]:
    """The names in ``environ`` that hold a credential: by their name, or named as ``${VAR}`` by a tracking URL."""
    named = {name for spec in specs for _, url in tracking_urls(spec) for name in ENV_VAR.findall(url or "")}
    return sorted(k for k in environ if k in named or _CREDENTIAL_NAME.search(k))
