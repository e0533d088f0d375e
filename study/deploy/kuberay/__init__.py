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

The package, one concern a module, in the order the command runs them:

- :mod:`study.deploy.kuberay.__main__`: the command line (``dmlstudy kuberay``, ``python -m study.deploy.kuberay``);
- :mod:`study.deploy.kuberay.deployment`: what the manifest is made of, checked (``Deployment``): a spec every pod can
  run, valid names, the workers sized for the trials;
- :mod:`study.deploy.kuberay.manifest`: the ``ConfigMap`` and the ``RayJob`` as plain data, and the entrypoint's
  script (``study/deploy/templates/kuberay_start.sh``);
- :mod:`study.deploy.kuberay.yaml_text`: the manifest as printed: a header of comments (the Secrets to create, the
  ``kubectl`` lines), then the two YAML documents.
"""
