"""Deploying a study where the GPUs are: ``dmlstudy slurm`` (:mod:`study.deploy.slurm`)."""
