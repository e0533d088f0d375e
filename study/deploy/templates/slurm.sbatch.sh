#!/bin/bash
# Written by `dmlstudy slurm` for study '{{comment:name}}' ({{comment:written_at}} UTC):
#   {{comment:command_line}}
# The script you would write by hand (docs/cluster.md, "Deploy on Slurm"): edit it and `sbatch` it again
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
  # shellcheck disable=SC2034  # the study's directory, for lines of your own (nothing below needs it)
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

# A Ray cluster of this job's own. Its ports and temp dir come from the job id, so two jobs on one node never meet
# (Ray's defaults, 6379 and /tmp/ray, are every user's); a requeued run keeps its id and reuses them.
port_base=$(( {{int:port_base}} + SLURM_JOB_ID % {{int:port_slots}} * 100 ))
export RAY_TMPDIR="${TMPDIR:-/tmp}/dmlray-$SLURM_JOB_ID"
# Token authentication (Ray >= 2.59): a fresh token for this run, in the environment only. srun passes the
# environment to every step, the driver inherits it; it is written to no file, not even this script.
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export RAY_AUTH_TOKEN
# On SIGTERM a node drains for 2 s, not Ray's default 30 s: well inside Slurm's KillWait.
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=2

# Each node at the address Slurm reaches it at (its NodeAddr), head first.
node_ip() {
  local addr
  addr=$(scontrol show node "$1" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
  getent ahostsv4 "$addr" | awk 'NR == 1 { print $1 }'
}
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_ip=$(node_ip "${nodes[0]}")
export RAY_ADDRESS="$head_ip:$port_base"

signalled=""
driver_pid=""
# shellcheck disable=SC2329  # called by the traps below
on_signal() {
  signalled=$1
  if [ -n "$driver_pid" ]; then
    say "SIG$1: asking the driver (PID $driver_pid) to stop at its trials' next checkpoint"
    kill -USR1 "$driver_pid" 2>/dev/null
  else
    say "SIG$1 before the driver started"
  fi
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM

# One srun step per node (the PIDs below are this job's Ray, the only Ray it ever stops).
ray_pids=()
start_node() {  # INDEX NODE ray-start-arguments...
  local i=$1 node=$2
  shift 2
  srun --nodes=1 --ntasks=1 --nodelist="$node" --cpus-per-task={{int:cpus_per_node}} "${GRES[@]}" \
    "$RAY" start --block --disable-usage-stats --node-ip-address="$(node_ip "$node")" \
    --num-cpus={{int:cpus_per_node}} --num-gpus={{int:gpus_per_node}} --temp-dir="$RAY_TMPDIR" \
    --dashboard-agent-listen-port=$((port_base + 10 + i)) "$@" &
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

start_node 0 "${nodes[0]}" --head --port="$port_base" --include-dashboard=false
for _ in $(seq 120); do  # the head's GCS answers
  (exec 3<>"/dev/tcp/$head_ip/$port_base") 2>/dev/null && break
  kill -0 "${ray_pids[0]}" 2>/dev/null || break
  sleep 1
done
if ! kill -0 "${ray_pids[0]}" 2>/dev/null; then
  say "the Ray head did not start (its lines are above); not requeued"
  exit 1
fi
for i in $(seq 1 $(( ${#nodes[@]} - 1 ))); do
  start_node "$i" "${nodes[$i]}" --address="$RAY_ADDRESS"
done
"$PYTHON" - "$RAY_ADDRESS" "${#nodes[@]}" <<'EOF'  # wait until every node has joined (at most 5 min)
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + 300
while sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(1)
print(f"ray: {sum(n['Alive'] for n in ray.nodes())} of {sys.argv[2]} nodes up", flush=True)
EOF
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

case $rc in
  0)
    srun --nodes={{int:nodes}} --ntasks-per-node=1 rm -rf "$RAY_TMPDIR"
    say "study finished"
    exit 0 ;;
  3)  # stopped on the signal, nothing lost: the requeued run resumes
    if [ "$restarts" -lt "$MAX_REQUEUES" ]; then
      say "requeueing (requeue $((restarts + 1)) of at most $MAX_REQUEUES)"
      scontrol requeue "$SLURM_JOB_ID"
      exit 0
    fi
    say "stopped after $MAX_REQUEUES requeues (--max-requeues); continue the study with: $CONTINUE"
    exit 3 ;;
  *)
    say "the driver failed (exit $rc: 2 bad input, 1 the study failed); not requeued; see $STUDY_LOG"
    exit "$rc" ;;
esac
