"""``dmlstudy slurm SPEC.yaml``: run a study or a table as a Slurm job with a Ray cluster of its own, through the job's
time limit and preemption by requeueing and resuming.

The command writes an sbatch script into the study directory (:data:`~trainables.schema.record.SLURM_SCRIPT_FILE`)
and submits it (``sbatch --parsable``; ``--dry-run`` prints it instead). The script is a real shell file,
``study/deploy/templates/slurm.sbatch.sh``, not made through a Slurm or Ray library, because it has to be the script a
user could have written: readable, editable (its marked sections), resubmittable with plain ``sbatch``, and debuggable
from its own log; :func:`study.deploy.render.fill` writes each value into it, quoted for where it lands. What it does,
and why (docs/notebook/cluster.md "Deploy on Slurm"):

- one ``srun`` step per node: ``ray start --head`` on the first, ``ray start --address`` on every other one, at the
  address Slurm itself reaches the node at (its ``NodeAddr``), on ports and a ``RAY_TMPDIR`` derived from the job
  id (two jobs on one node never collide on Ray's default ports: ray #10154, #59551);
- a fresh token from ``/dev/urandom`` each run, exported (``RAY_AUTH_MODE=token``): every step and the driver inherit
  it; it is in no file, not even this script;
- credentials from ``--env-file`` files (readable by their owner only), sourced with their variables exported; a
  tracking URL with a password in it is refused, and sbatch gets no credential of the submitting shell (slurmctld
  keeps a job's environment on disk);
- the driver with an explicit ``--address`` (``address="auto"`` could attach to another user's cluster), with
  ``--resume`` once the study exists;
- ``--signal=B:USR1@LEAD``: the script forwards ``USR1`` (and ``TERM``, preemption) to the driver, which stops for
  ``--resume`` (exit 3, :mod:`study.runtime.stopping`); the script then ends its own Ray nodes by the PIDs of its own
  ``srun`` steps (never ``ray stop``: it ends every user's Ray on the node) and requeues the job
  (``scontrol requeue``), at most ``--max-requeues`` times; the requeued run resumes.

``dmlstudy status`` shows the job's id, state and restart count (:func:`study.runtime.slurm_queue.job_line`).

The package, one concern a module, in the order a job meets them. Submitting, on the login node:

- :mod:`study.deploy.slurm.__main__`: the command line (``dmlstudy slurm``, ``python -m study.deploy.slurm``);
- :mod:`study.deploy.slurm.options`: its options checked, and the ``--sbatch`` lines refused that set what the command
  sets or break the job's chain of runs, read as sbatch reads them (:mod:`study.deploy.slurm.sbatch_reader`);
- :mod:`study.deploy.slurm.script`: the job (``SlurmJob``) that the options and the spec make, and its sbatch script;
- :mod:`study.deploy.slurm.submit`: the script written into the study directory and handed to ``sbatch``.

Running, on the job's nodes (the script calls ``python -m study.deploy.job COMMAND``, the address kept by
:mod:`study.deploy.job`):

- :mod:`study.deploy.slurm.job`: those commands;
- :mod:`study.deploy.slurm.nodes`: the job's nodes, each one's ``ray start``, this job's Ray head told from another's;
- :mod:`study.deploy.slurm.scontrol`: what Slurm says of the job (``scontrol show job``, Slurm's durations);
- :mod:`study.deploy.slurm.ending`: how a run ends (requeued, stopped or failed) and the line that says why;
- :mod:`study.deploy.slurm.records`: this run's progress as the driver left it, and each run's line in the study's
  runs file.
"""
