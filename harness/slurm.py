"""A real two-node Slurm cluster on one host, for the ``dmlstudy slurm`` test (tests/study/deploy/test_slurm.py).

Debian's slurmctld/slurmd/slurm-client/munge (22.05) run unmodified; what makes two nodes on one host work:

- ``NodeName=n1 NodeAddr=127.0.0.1 Port=17001`` and ``n2 ... Port=17002``, each daemon ``slurmd -N NAME``, with
  ``%n`` in its spool, pid and log paths; no cgroups (``proctrack/linuxproc``, ``task/none``), ``SlurmUser=root``.
- Everything Slurm runs lives in a private *named* network namespace whose only interface is loopback (else Ray
  rewrites 127.0.0.1 to the machine's address). It is entered with ``nsenter --net=/run/netns/NAME``: ``ip netns
  exec`` would remount /sys, and slurmd then fails on cgroups. ``127.0.0.2/8`` on ``lo``: without a second address
  slurmctld loops on getaddrinfo.
- munged of its own (key, socket, pid, log under the cluster's directory): the host's munge is left alone.
- ``AuthInfo=...,cred_expire=10``: a requeued job is held for the credential's lifetime (120 s by default);
  ``sched_interval=5,bf_interval=5``: then started within seconds (Slurm's scheduler passes come every 60 and 30 s).
- Preemption as a cluster may configure it: ``PreemptType=preempt/partition_prio``, ``PreemptMode=REQUEUE``; a job
  submitted to ``urgent`` (``PriorityTier=2``) preempts one in ``debug`` (the default, ``PriorityTier=1``) on the
  same CPUs, and Slurm requeues the preempted job itself (SIGTERM to every process, ``KillWait`` 30 s).

Every daemon is ended by its PID; the namespace is deleted by name. ``SLURM_CONF`` in :meth:`SlurmCluster.env`
points every client command (sbatch, squeue, scontrol) at this cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SlurmCluster", "slurm_unavailable_reason"]

_DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "squeue", "sinfo", "nsenter", "ip")
_MUNGED = "/usr/sbin/munged"


def slurm_unavailable_reason() -> str | None:
    """``None`` when a cluster can be started here, else one line saying why not (for ``pytest.skip``)."""
    if os.geteuid() != 0:
        return "a test Slurm cluster needs root (slurmd, ip netns)"
    missing = [tool for tool in _DAEMONS if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    if missing:
        return (
            f"Slurm test cluster: {', '.join(missing)} not found (apt-get install slurmctld slurmd slurm-client munge)"
        )
    name = f"dmlprobe{os.getpid()}"
    trial = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if trial.returncode != 0:
        return f"ip netns add failed here: {(trial.stderr.strip() or f'exit {trial.returncode}').splitlines()[-1]}"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return None


_CONF = """\
ClusterName=dmltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock,cred_expire=10
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
JobRequeue=1
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=30
MinJobAge=600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes={node_list} MaxTime=INFINITE State=UP PriorityTier=2
"""


class SlurmCluster:
    """slurmctld, ``len(nodes)`` slurmd and munged, started on entering, ended (by PID) on leaving.

    Args:
        root: an empty directory for the configuration, state, spools and logs (the token test greps it).
        nodes: node names; node ``i`` listens on ``17001 + i``.
        cpus: CPUs each node declares.
    """

    def __init__(self, root: Path, nodes: Sequence[str] = ("n1", "n2"), cpus: int = 1) -> None:
        self.root = root
        self.nodes = list(nodes)
        self.cpus = cpus
        self.netns = f"dmlslurm{os.getpid()}"
        self.conf = root / "slurm.conf"
        self._procs: list[subprocess.Popen[Any]] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), **extra}

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the cluster's namespace (where slurmctld and every job's processes live)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("env", self.env())
        return subprocess.run(self.command(argv), capture_output=True, text=True, timeout=120, **kwargs)

    def __enter__(self) -> SlurmCluster:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
        for argv in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "127.0.0.2/8", "dev", "lo"]):
            subprocess.run(self.command(argv), check=True, capture_output=True)
        munge = self.root / "munge"
        (self.root / "ctld").mkdir(parents=True)
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            [
                _MUNGED,
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={munge}/munge.sock",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/seed",
            ],
            netns=False,  # a unix socket: reachable from any network namespace
        )
        self._wait(lambda: (munge / "munge.sock").exists(), "munged's socket")
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr=127.0.0.1 Port={17001 + i} CPUs={self.cpus} State=UNKNOWN"
            for i, n in enumerate(self.nodes)
        )
        self.conf.write_text(
            _CONF.format(root=self.root, ctld_port=16817, nodes=node_lines, node_list=",".join(self.nodes))
        )
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for n in self.nodes:
            self._spawn(["slurmd", "-D", "-N", n, "-f", str(self.conf)])
        self._wait(self._nodes_idle, "both nodes idle in sinfo", timeout=60)

    def _spawn(self, argv: list[str], netns: bool = True) -> None:
        log = open(self.root / f"{Path(argv[0]).name}-{len(self._procs)}.out", "w")  # noqa: SIM115 (lives with proc)
        self._procs.append(
            subprocess.Popen(
                self.command(argv) if netns else argv,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        log.close()

    def _nodes_idle(self) -> bool:
        lines = set(self.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.splitlines())  # a node per partition
        return sum(line.endswith(" idle") for line in lines) == len(self.nodes)

    def _wait(self, ready: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "; ".join(
                    f"{f.name}: {f.read_text()[-300:]}" for f in sorted(self.root.glob("*.log")) if f.is_file()
                )
                raise RuntimeError(f"Slurm test cluster: no {what} (exited: {dead}); {logs}")
            time.sleep(0.5)

    def advance_job_ids(self, next_id: int) -> None:
        """Make ``next_id`` the id of the next job submitted: held one-line jobs are submitted (one shell, to be quick)
        until the last took ``next_id - 1``, then cancelled (a test of two jobs whose ids differ by N)."""
        last = self.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]).stdout.strip()
        count = next_id - 1 - int(last)
        loop = f"for _ in $(seq {count}); do sbatch --parsable --hold -o /dev/null --wrap true; done"
        held = [last, *self.run(["bash", "-c", loop]).stdout.split()] if count > 0 else [last]
        self.run(["scancel", *held])
        assert int(held[-1]) == next_id - 1, f"job ids did not reach {next_id - 1}: {held[-3:]}"

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields (``JobState``, ``Restarts``, ``ExitCode``...), or ``{}`` once it is gone."""
        out = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def __exit__(self, *exc: object) -> None:
        self._kill_jobs()
        for proc in reversed(self._procs):  # slurmd before slurmctld before munged; each by its PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:  # slurmctld saves its state, then hangs on a write for 15 s and more: nothing here needs it
                proc.wait(3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self._procs.clear()
        self._kill_jobs()
        subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True)

    def _kill_jobs(self) -> None:
        """SIGKILL what the jobs left (slurmstepd, their scripts, Ray): every process in the cluster's private
        namespace but the daemons this object started. All of them are this cluster's; each is ended by PID."""
        daemons = {p.pid for p in self._procs}
        listed = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout.split()
        for pid in {int(p) for p in listed} - daemons:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
