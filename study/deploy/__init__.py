"""Where researchers' GPUs are: ``dmlstudy slurm`` (:mod:`study.deploy.slurm`, an sbatch script that requeues
itself at its time limit) and ``dmlstudy kuberay`` (:mod:`study.deploy.kuberay`, a KubeRay ``RayJob`` manifest)."""

from __future__ import annotations

from study.runtime.face import face_of

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "CONTEXTS": "study.deploy.render",
    "Deployment": "study.deploy.kuberay",
    "ENV_VAR": "study.deploy.checks",
    "Ending": "study.deploy.job",
    "HeadWait": "study.deploy.job",
    "RayNode": "study.deploy.job",
    "RunEnd": "study.deploy.job",
    "SlurmJob": "study.deploy.slurm",
    "SlurmView": "study.deploy.job",
    "TemplateError": "study.deploy.render",
    "comment_text": "study.deploy.render",
    "credential_variables": "study.deploy.checks",
    "decide": "study.deploy.job",
    "fill": "study.deploy.render",
    "finish": "study.deploy.job",
    "head_first": "study.deploy.job",
    "job_name": "study.deploy.kuberay",
    "load_template": "study.deploy.render",
    "max_failures": "study.deploy.checks",
    "parse_job_fields": "study.deploy.job",
    "parse_time": "study.deploy.slurm",
    "ray_start_argv": "study.deploy.job",
    "read_head_address": "study.deploy.job",
    "refuse_written_passwords": "study.deploy.checks",
    "render": "study.deploy.kuberay",
    "render_script": "study.deploy.slurm",
    "sbatch_quote": "study.deploy.render",
    "slurm_seconds": "study.deploy.job",
    "this_jobs_head": "study.deploy.job",
    "tracking_urls": "study.deploy.checks",
    "wait_head": "study.deploy.job",
    "with_time": "study.deploy.job",
}
__getattr__, __dir__ = face_of(__name__, FACE)
__all__ = sorted(FACE)
