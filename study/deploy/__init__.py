"""Where researchers' GPUs are: one package per launcher, one concern per module inside it (packages rather than
sibling modules, so that everything one launcher does sits in one folder; each package's docstring lists its modules):

- :mod:`study.deploy.slurm`: ``dmlstudy slurm``, an sbatch script that requeues itself at its time limit, and the
  commands its job runs on its nodes;
- :mod:`study.deploy.kuberay`: ``dmlstudy kuberay``, a KubeRay ``RayJob`` manifest.

Beside them, what both use: :mod:`study.deploy.checks` (what both commands refuse before writing anything) and
:mod:`study.deploy.render` (the one function that fills the scripts in ``templates/``). :mod:`study.deploy.job` is only
an address: ``python -m study.deploy.job``, which every Slurm job script calls, those already submitted included.

A map, not a face: callers import the module that holds a name (``from study.search.driver import run_study``);
the wing's ``__init__`` imports nothing, so importing one light module of the wing never imports its heavy ones.
"""
