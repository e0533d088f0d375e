"""Where researchers' GPUs are: ``dmlstudy slurm`` (:mod:`study.deploy.slurm`, an sbatch script that requeues
itself at its time limit) and ``dmlstudy kuberay`` (:mod:`study.deploy.kuberay`, a KubeRay ``RayJob`` manifest)."""
