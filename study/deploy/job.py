"""``python -m study.deploy.job COMMAND``: the address at which every ``dmlstudy slurm`` job script calls the job's
commands (``nodes``, ``ray-node``, ``wait-head``, ``wait-nodes``, ``end``; study/deploy/templates/slurm.sbatch.sh).

Slurm keeps a submitted job's script, and a job requeued after an upgrade runs that script again, so this address
stays wherever the commands move; they are :mod:`study.deploy.slurm.job`'s."""

from __future__ import annotations

import sys

from study.deploy.slurm.job import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
