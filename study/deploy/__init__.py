"""Where researchers' GPUs are: one package per launcher, one concern per module inside it (packages rather than
sibling modules, so that everything one launcher does sits in one folder; each package's docstring lists its modules):

- :mod:`study.deploy.slurm`: ``dmlstudy slurm``, an sbatch script that requeues itself at its time limit, and the
  commands its job runs on its nodes;
- :mod:`study.deploy.kuberay`: ``dmlstudy kuberay``, a KubeRay ``RayJob`` manifest.

Beside them, what both use: :mod:`study.deploy.checks` (what both commands refuse before writing anything) and
:mod:`study.deploy.render` (the one function that fills the scripts in ``templates/``). :mod:`study.deploy.job` is only
an address: ``python -m study.deploy.job``, which every Slurm job script calls, those already submitted included.
"""

from __future__ import annotations

from study.runtime.face import face_of

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "CONTEXTS": "study.deploy.render",
    "Deployment": "study.deploy.kuberay.deployment",
    "ENV_VAR": "study.deploy.checks",
    "Ending": "study.deploy.slurm.ending",
    "HeadWait": "study.deploy.slurm.nodes",
    "RayNode": "study.deploy.slurm.nodes",
    "RunEnd": "study.deploy.slurm.ending",
    "SlurmJob": "study.deploy.slurm.script",
    "SlurmView": "study.deploy.slurm.scontrol",
    "TemplateError": "study.deploy.render",
    "comment_text": "study.deploy.render",
    "credential_variables": "study.deploy.checks",
    "decide": "study.deploy.slurm.ending",
    "fill": "study.deploy.render",
    "finish": "study.deploy.slurm.ending",
    "head_first": "study.deploy.slurm.nodes",
    "job_name": "study.deploy.kuberay.deployment",
    "load_template": "study.deploy.render",
    "max_failures": "study.deploy.checks",
    "parse_job_fields": "study.deploy.slurm.scontrol",
    "parse_time": "study.deploy.slurm.options",
    "ray_start_argv": "study.deploy.slurm.nodes",
    "read_head_address": "study.deploy.slurm.nodes",
    "refuse_written_passwords": "study.deploy.checks",
    "render": "study.deploy.kuberay.yaml_text",
    "render_script": "study.deploy.slurm.script",
    "sbatch_quote": "study.deploy.render",
    "slurm_seconds": "study.deploy.slurm.scontrol",
    "this_jobs_head": "study.deploy.slurm.nodes",
    "tracking_urls": "study.deploy.checks",
    "wait_head": "study.deploy.slurm.nodes",
    "with_time": "study.deploy.slurm.ending",
}
__getattr__, __dir__ = face_of(__name__, FACE)
__all__ = sorted(FACE)
