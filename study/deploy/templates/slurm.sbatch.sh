#!/bin/bash
# Written by `dmlstudy slurm` for study '{{comment:name}}' ({{comment:written_at}} UTC):
#   {{comment:command_line}}
# The script you would write by hand (docs/notebook/cluster.md, "Deploy on Slurm"): edit it and `sbatch` it again
# freely. Its log (every requeued run appended) is beside it.
#SBATCH --job-name={{sbatch:job_name}}
#SBATCH --nodes={{int:nodes}}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={{int:cpus_per_node}}
#SBATCH --gpus-per-node={{sbatch?:gpus_option}}
#SBATCH --time={{sbatch:time}}
#SBATCH --partition={{sbatch?:partition}}
#SBATCH --account={{sbatch?:account}}
#SBATCH --signal=B:USR1@{{int:signal_lead_s}}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={{sbatch:output}}
#SBATCH --chdir={{sbatch:workdir}}
# --- extra #SBATCH lines (--sbatch): edit freely; sbatch reads none after the first command ---
{{sbatch-lines:sbatch_lines}}
# --- end extra #SBATCH lines ---

# USR1 comes {{int:signal_lead_s}} s before the time limit (Slurm looks every ~30 s, so up to ~30 s earlier); the driver
# then has --drain-timeout {{int:drain_timeout_s}} s for running trials to checkpoint, and the rest to save and stop.
# Not `set -e`: every exit code below is looked at.
set -uo pipefail

# --- values: filled in by dmlstudy slurm, each quoted for bash ---
# shellcheck disable=SC2016,SC1003  # a value is literal text: a $, ` or \ in it is a character, never expanded
{
  STUDY_DIR={{sh:study_dir}}
  STUDY_SPEC={{sh:study_spec}}
  STUDY_LOG={{sh:study_log}}
  PYTHON={{sh:python}}
  RAY={{sh:ray}}
  SPEC={{sh:spec}}
  SETS=({{words:sets}})
  MAX_REQUEUES={{int:max_requeues}}
  CONTINUE={{sh:continue_command}}
  GRES=({{words:gres}})
  ENV_FILES=({{words:env_files}})
}
# --- end values ---

restarts=${SLURM_RESTART_COUNT:-0}
say() { echo "[$(date '+%F %T')] $*"; }
say "job $SLURM_JOB_ID run $((restarts + 1)) (SLURM_RESTART_COUNT=$restarts) on $SLURM_JOB_NODELIST"

# Credentials (--env-file): each file's VAR=value lines, exported (set -a) to Ray and the driver; never printed.
for env_file in "${ENV_FILES[@]}"; do
  set -a
  # shellcheck disable=SC1090  # a file of the user's, named by --env-file
  if ! . "$env_file" 2>/dev/null; then  # its errors could quote a line of it: not shown
    set +a
    say "cannot source --env-file $env_file (try: bash -n FILE); not requeued"
    exit 2
  fi
  set +a
done

# --- setup (--setup): edit freely; runs on the job's first node before Ray starts ---
{{lines:setup}}
# --- end setup ---

# A Ray cluster of this job's own, in a temp dir of the job's (Ray's default, /tmp/ray, is every user's; a requeued run
# keeps its id and reuses it). Every port its nodes listen on is the kernel's pick as they bind (python -m
# study.deploy.job ray-node): none can be one another job on the node holds (Ray's defaults, 6379 and up, are fixed).
export RAY_TMPDIR="${TMPDIR:-/tmp}/dmlray-$SLURM_JOB_ID"
# Token authentication (Ray >= 2.59): a fresh token for this run, in the environment only. srun passes the
# environment to every step, the driver inherits it; it is written to no file, not even this script.
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export RAY_AUTH_TOKEN
# On SIGTERM a node drains for 2 s, not Ray's default 30 s: well inside Slurm's KillWait.
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=2

# Each node at the address Slurm reaches it at (its NodeAddr); the head first, on the node that runs this script.
node_ip() {
  local addr
  addr=$(scontrol show node "$1" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
  getent ahostsv4 "$addr" | awk 'NR == 1 { print $1 }'
}
mapfile -t nodes < <("$PYTHON" -m study.deploy.job nodes)

signalled=""
driver_pid=""
# shellcheck disable=SC2329  # called by the traps below
on_signal() {
  signalled=${signalled:-SIG$1}  # the first: the one that stopped the run (python -m study.deploy.job end --signal)
  if [ -z "$driver_pid" ]; then
    say "SIG$1 before the driver started"
  elif kill -0 "$driver_pid" 2>/dev/null; then
    say "SIG$1: asking the driver (PID $driver_pid) to stop at its trials' next checkpoint"
    kill -"$1" "$driver_pid" 2>/dev/null
  fi  # (after the driver: Slurm's TERM to a job being requeued or cancelled; the lines below say what happens)
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM

# One srun step per node (the PIDs below are this job's Ray, the only Ray it ever stops).
ray_pids=()
start_node() {  # NODE [--address HEAD]: `ray start --block` there (no --address: the head)
  local node=$1
  shift
  srun --nodes=1 --ntasks=1 --nodelist="$node" --cpus-per-task={{int:cpus_per_node}} "${GRES[@]}" \
    "$PYTHON" -m study.deploy.job ray-node --ray "$RAY" --ip "$(node_ip "$node")" --cpus {{int:cpus_per_node}} \
    --gpus {{int:gpus_per_node}} --tmpdir "$RAY_TMPDIR" "$@" &
  ray_pids+=($!)
}
stop_ray() {
  say "stopping this job's Ray nodes (srun PIDs ${ray_pids[*]})"
  kill -TERM "${ray_pids[@]}" 2>/dev/null  # srun ends its step: Slurm signals its every process (ray, raylet, workers)
  for _ in $(seq 60); do
    kill -0 "${ray_pids[@]}" 2>/dev/null || break
    sleep 1
  done
  kill -KILL "${ray_pids[@]}" 2>/dev/null
  wait "${ray_pids[@]}" 2>/dev/null
}

head_started=$(date +%s)
start_node "${nodes[0]}"
# The address Ray wrote to RAY_TMPDIR in this run, once a head there accepts this run's token and is this job's (its
# temp dir): another job's head on the same port is not taken for it (at most 2 min).
if ! RAY_ADDRESS=$("$PYTHON" -m study.deploy.job wait-head --tmpdir "$RAY_TMPDIR" --pid "${ray_pids[0]}" \
    --since "$head_started"); then
  stop_ray
  exit 1
fi
export RAY_ADDRESS
for node in "${nodes[@]:1}"; do
  start_node "$node" --address "$RAY_ADDRESS"
done
"$PYTHON" -m study.deploy.job wait-nodes "$RAY_ADDRESS" "${#nodes[@]}"  # every node joined (at most 5 min)
say "Ray cluster at $RAY_ADDRESS"

# A study that exists (its spec file is written before its first trial) is resumed: a requeued run, or a new job
# for a study that ran before. Not SLURM_RESTART_COUNT alone: a run stopped before the study began must start it.
resume=()
[ -e "$STUDY_SPEC" ] && resume=(--resume)
if [ -z "$signalled" ]; then
  say "driver: study.run ${resume[*]}"
  "$PYTHON" -m study.run "$SPEC" "${SETS[@]}" --address "$RAY_ADDRESS" --shared-storage \
    --max-failures {{int:max_failures}} --drain-timeout {{int:drain_timeout_s}} "${resume[@]}" &
  driver_pid=$!
  while :; do  # a trap interrupts `wait`: wait again until the driver has really exited
    wait "$driver_pid"
    rc=$?
    kill -0 "$driver_pid" 2>/dev/null || break
  done
else
  rc=3
fi
say "driver exited with $rc"
stop_ray
[ "$rc" -eq 0 ] && srun --nodes={{int:nodes}} --ntasks-per-node=1 rm -rf "$RAY_TMPDIR"

# What next (python -m study.deploy.job end, docs/notebook/cluster.md): exit 3 is requeued (scontrol requeue) only after a run
# that checkpointed an epoch, while --max-requeues lasts, and not when the job was cancelled or Slurm requeues it
# itself (preemption). Every other ending is one line with the command that continues the study; a stop that is not
# requeued ends the job FAILED (exit 3).
"$PYTHON" -m study.deploy.job end --rc "$rc" --driver-pid "$driver_pid" --elapsed "$SECONDS" \
  --study-dir "$STUDY_DIR" --max-requeues "$MAX_REQUEUES" --signal-lead {{int:signal_lead_s}} \
  --continue "$CONTINUE" --study-log "$STUDY_LOG" --signal "$signalled"
exit $?
