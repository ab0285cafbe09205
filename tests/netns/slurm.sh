#!/usr/bin/env bash
# ddprun under a real Slurm (slurmctld, slurmd, munge; scripts/slurm-cluster.sh): two compute
# nodes n1 and n2 in network namespaces, jobs submitted from the login host "ctl". All hosts
# share this machine's filesystem, so what workers write under $work is read here.
# Skips (exit 77) where namespaces cannot be made or Slurm and munge are not installed.
# Usage: slurm.sh DDPRUN_BINARY   (SLURM_CHECKS="srun_no_flags scancel" runs only those)
set -euo pipefail
# The caller's ddprun settings must not change what runs here: every flag it needs is given.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
here=$(cd "$(dirname "$0")/../.." && pwd)
slurm="$here/scripts/slurm-cluster.sh"
checks=(srun_no_flags heterogeneous_nodes exit_code_through_srun one_task_per_node
  signal_reaches_workers sbatch_hosts_slurm exit_code_through_sbatch scancel_leaves_nothing
  staging_hosts_slurm frozen_node_hosts_slurm)
if [[ -n ${SLURM_CHECKS:-} ]]; then read -ra checks <<<"$SLURM_CHECKS"; fi

[[ $# -eq 1 ]] || { echo "usage: $0 DDPRUN_BINARY" >&2; exit 2; }
if ! "$slurm" check; then
  echo "SKIPPED: needs root, network namespaces, and Debian's slurmctld, slurmd, slurm-client" \
    "and munge (scripts/install-deps.sh --tests installs them)"
  exit 77
fi
ddprun=$(realpath "$1")
work=$(mktemp -d)
tag="sl$$"
# The user's private cache under /tmp, which the nodes share with this machine (see
# check_staging_hosts_slurm).
private_cache=/tmp/ddprun-$(id -u)/cache
cleanup() {
  "$slurm" down "$tag" "$work" || true
  local e
  for e in "$work"/aside/*; do [[ -e $e ]] && mv "$e" "$private_cache/"; done
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s.%N)
"$slurm" up "$tag" 2 "$work"
echo "Slurm is up: 2 idle nodes ($(awk -v a="$started" -v b="$(date +%s.%N)" \
  'BEGIN{printf "%.2f", b-a}') s)"

on_login() { "$slurm" exec "$tag" "$work" "$@"; }
# fail MESSAGE: ends the check (each runs in a subshell of its own) as failed
fail() {
  echo "  $*" >&2
  exit 1
}
# value FILE NAME: NAME's value in an `env` dump
value() { sed -n "s/^$2=//p" "$1"; }
# until_true SECONDS CMD...: CMD until it succeeds, for at most SECONDS
until_true() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05  # the interval between checks of the condition
  done
}

# srun with no rendezvous flags: the step gives nodes, node ranks, the master, port and run id.
check_srun_no_flags() {
  local out=$work/no_flags
  mkdir -p "$out"
  on_login timeout 120 srun -N2 --ntasks-per-node=1 "$ddprun" --nproc-per-node=1 --no-python \
    sh -c "env > $out/env_\$RANK" >"$out/log" 2>&1 || { cat "$out/log"; fail "srun failed"; }
  for r in 0 1; do [[ -f $out/env_$r ]] || fail "no env for rank $r"; done
  [[ $(value "$out/env_0" WORLD_SIZE) == 2 ]] || fail "WORLD_SIZE $(value "$out/env_0" WORLD_SIZE)"
  [[ $(value "$out/env_1" MASTER_ADDR) == n1 ]] || fail "MASTER_ADDR $(value "$out/env_1" MASTER_ADDR)"
  [[ $(value "$out/env_0" SLURMD_NODENAME) == n1 ]] || fail "rank 0 not on n1"
  [[ $(value "$out/env_1" SLURMD_NODENAME) == n2 ]] || fail "rank 1 not on n2"
  [[ $(value "$out/env_1" GROUP_RANK) == 1 ]] || fail "GROUP_RANK of rank 1"
  local job
  job=$(value "$out/env_0" SLURM_JOB_ID)
  [[ $(value "$out/env_0" TORCHELASTIC_RUN_ID) == "slurm-$job.0" ]] ||
    fail "run id $(value "$out/env_0" TORCHELASTIC_RUN_ID)"
  grep -q "from Slurm\|SLURM_NODEID" "$out/log" || fail "the log does not say what came from Slurm"
}

# Nodes with different worker counts: 1 on n1, 2 on n2 (one command line, computed per node).
check_heterogeneous_nodes() {
  local out=$work/hetero
  mkdir -p "$out"
  on_login timeout 120 srun -N2 --ntasks-per-node=1 sh -c \
    "exec $ddprun --nproc-per-node=\$((SLURM_NODEID + 1)) --no-python sh -c 'env > $out/env_\$RANK'" \
    >"$out/log" 2>&1 || { cat "$out/log"; fail "srun failed"; }
  for r in 0 1 2; do
    [[ $(value "$out/env_$r" WORLD_SIZE) == 3 ]] || fail "rank $r: WORLD_SIZE"
  done
  [[ $(value "$out/env_0" LOCAL_WORLD_SIZE) == 1 ]] || fail "n1 should run 1 worker"
  [[ $(value "$out/env_2" LOCAL_WORLD_SIZE) == 2 ]] || fail "n2 should run 2 workers"
  [[ $(value "$out/env_2" SLURMD_NODENAME) == n2 ]] || fail "rank 2 not on n2"
}

# A worker's exit code comes back through srun.
check_exit_code_through_srun() {
  local rc=0
  on_login timeout 120 srun -N2 --ntasks-per-node=1 "$ddprun" --nproc-per-node=1 --no-python \
    sh -c 'exit $((RANK == 1 ? 7 : 0))' >"$work/exit.log" 2>&1 || rc=$?
  [[ $rc == 7 ]] || { cat "$work/exit.log"; fail "srun exited $rc, expected 7"; }
}

# Two tasks on a node: a usage error that says how to write the srun line.
check_one_task_per_node() {
  local rc=0
  on_login timeout 120 srun -N1 --ntasks-per-node=2 "$ddprun" --no-python true \
    >"$work/tasks.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$work/tasks.log"; fail "exit $rc, expected 2"; }
  grep -q "srun --ntasks-per-node=1" "$work/tasks.log" || fail "no advice in: $(cat "$work/tasks.log")"
}

# A signal Slurm sends the job's tasks (scancel --signal, or --signal=USR1@60 before the time
# limit) reaches the workers through the agents when --signals-to-handle lists it; as with
# torchrun, a handled signal also ends the job (exit 128 + the signal) once the workers stop.
# The first agent to get it ends the round, so a node whose copy of the signal comes later may
# stop its workers with SIGTERM first: each worker gets one of the two, and at least one USR1.
# A worker waits on a child that never ends by itself (`sleep infinity`), so only a signal ends
# the wait and runs its trap. (Slurm signals every process of the step, so that child may die
# of the signal before the worker's own trap runs: the worker then waits on a new one.)
check_signal_reaches_workers() {
  local out=$work/signal job rc=0
  mkdir -p "$out"
  # The shell's $$ is written $$$$: ddprun, as torchrun, reads $$ in a worker's arguments as $.
  on_login timeout 120 srun -N2 --ntasks-per-node=1 -J ddprun-signal "$ddprun" \
    --nproc-per-node=1 --signals-to-handle=SIGTERM,SIGUSR1 --no-python sh -c \
    "trap 'echo USR1 > $out/got_\$RANK; kill \$s; exit 0' USR1; trap 'echo TERM > $out/got_\$RANK; kill \$s; exit 0' TERM; echo \$\$\$\$ > $out/pid_\$RANK; while :; do sleep infinity & s=\$!; wait \$s; done" \
    >"$out/log" 2>&1 &
  local srun_pid=$!
  both_running() { [[ -f $out/pid_0 && -f $out/pid_1 ]]; }
  until_true 60 both_running || { cat "$out/log"; fail "the workers did not start"; }
  job=$(on_login squeue -h -n ddprun-signal -o %i)
  on_login scancel --signal=USR1 "$job"
  wait "$srun_pid" || rc=$?
  [[ $rc == $((128 + 10)) ]] || { cat "$out/log"; fail "srun exited $rc, expected 138 (SIGUSR1)"; }
  local usr1=0 got
  for r in 0 1; do
    got=$(cat "$out/got_$r" 2>/dev/null || true)
    [[ $got == USR1 || $got == TERM ]] || fail "rank $r got neither USR1 nor TERM"
    [[ $got == USR1 ]] && usr1=$((usr1 + 1))
  done
  ((usr1 > 0)) || fail "no worker got USR1"
}

# sbatch_script NAME COMMAND: a batch script that runs COMMAND
sbatch_script() {
  printf '#!/bin/sh\nexec %s\n' "$2" >"$work/$1.sbatch"
  chmod +x "$work/$1.sbatch"
}

# sbatch_env_job NAME COMMAND: COMMAND (a --hosts=slurm command line, up to its flags) with
# --nproc-per-node=2 and a worker that writes its environment to $work/NAME/env_RANK, in an
# sbatch script on both nodes; every rank must see WORLD_SIZE=4. The job's log: $work/NAME/log.
sbatch_env_job() {
  local name=$1 out=$work/$1
  mkdir -p "$out"
  sbatch_script "$name" "$2 --nproc-per-node=2 --no-python sh -c 'env > $out/env_\$RANK'"
  on_login timeout 120 sbatch --wait -N2 -o "$out/log" "$work/$name.sbatch" >/dev/null ||
    { cat "$out/log"; fail "the job failed"; }
  for r in 0 1 2 3; do
    [[ $(value "$out/env_$r" WORLD_SIZE) == 4 ]] || { cat "$out/log"; fail "rank $r: WORLD_SIZE"; }
  done
}

# An sbatch script with --hosts=slurm: one agent per node, started with srun.
check_sbatch_hosts_slurm() {
  local out=$work/batch
  sbatch_env_job batch "$ddprun --hosts=slurm"
  [[ $(value "$out/env_3" SLURMD_NODENAME) == n2 ]] || fail "rank 3 not on n2"
  grep -q "srun --nodes=1" "$out/log" || fail "the agents were not started with srun"
}

# --hosts=slurm on nodes without ddprun at --remote-ddprun: they get this one by sbcast, into
# the cache (one directory for both nodes here: the filesystem is shared); sbcast's copies are
# removed once taken.
check_staging_hosts_slurm() {
  local out=$work/staged e
  # A node also looks for a cached copy in the private cache under /tmp, which other jobs on
  # this machine may have filled: this build's entries wait in $work/aside until the script
  # ends (cleanup puts them back), so that the nodes lack ddprun as this check needs.
  mkdir -p "$work/aside"
  for e in "$private_cache/$("$ddprun" --version | cut -d' ' -f2)"-*; do
    [[ -e $e ]] && mv "$e" "$work/aside/"
  done
  sbatch_env_job staged \
    "env XDG_CACHE_HOME=$out/cache $ddprun --hosts=slurm --remote-ddprun=/nonexistent/ddprun"
  grep -q "sent ddprun .* to every node of the allocation with sbcast" "$out/log" ||
    { cat "$out/log"; fail "the command did not use sbcast"; }
  grep -q "staged ddprun .* on [12] host(s) that lacked it ([12] from sbcast's copy, [01] sent from here)" "$out/log" ||
    { cat "$out/log"; fail "the command did not say it staged ddprun from sbcast's copy"; }
  ! ls /tmp/ddprun-bcast-* >/dev/null 2>&1 || fail "sbcast's copy was left: $(ls /tmp/ddprun-bcast-*)"
  local copy
  copy=$(find "$out/cache/ddprun" -type f)
  [[ $(wc -l <<<"$copy") -eq 1 ]] || fail "the cache holds '$copy', not one copy"
  cmp -s "$copy" "$ddprun" || fail "the copy $copy is not this ddprun"
}

check_exit_code_through_sbatch() {
  local rc=0
  sbatch_script batch_exit "$ddprun --hosts=slurm --no-python sh -c 'exit \$((RANK == 1 ? 7 : 0))'"
  on_login timeout 120 sbatch --wait -N2 -o "$work/batch_exit.log" "$work/batch_exit.sbatch" \
    >/dev/null || rc=$?
  [[ $rc == 7 ]] || { cat "$work/batch_exit.log"; fail "sbatch --wait exited $rc, expected 7"; }
  grep -q "Root cause" "$work/batch_exit.log" || fail "no root cause in the job's output"
}

# gated_job NAME FLAGS WORKERS: an sbatch job on both nodes of `ddprun --hosts=slurm FLAGS`
# whose workers write their pids to $work/NAME/pid_RANK, then wait at a gate this shell holds
# closed (fd 7) until it lets go; returns once WORKERS workers have started, the job's id in
# $job.
gated_job() {
  local out=$work/$1 want=$3
  mkdir -p "$out"
  : >"$out/gate"
  exec 7>"$out/gate"
  flock -x 7
  # $$$$: the workers' shell gets $$ (ddprun, as torchrun, reads $$ as $).
  sbatch_script "$1" "$ddprun --hosts=slurm $2 --no-python sh -c 'echo \$\$\$\$ > $out/pid_\$RANK; exec flock -s $out/gate true'"
  job=$(on_login sbatch --parsable -N2 -o "$out/log" "$work/$1.sbatch")
  started() { [[ $(ls "$out"/pid_* 2>/dev/null | wc -l) == "$want" ]]; }
  until_true 60 started || { cat "$out/log"; fail "the $want workers did not start"; }
}

# scancel ends the agents and every worker on every node.
check_scancel_leaves_nothing() {
  local out=$work/cancel job
  gated_job cancel --nproc-per-node=2 4
  local pids
  pids=$(cat "$out"/pid_*)
  on_login scancel "$job"
  none_alive() {
    local p
    for p in $pids; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
  }
  gone() { [[ -z $(on_login squeue -h -j "$job" 2>/dev/null) ]]; }
  until_true 60 none_alive || fail "workers still alive 60 s after scancel: $pids"
  until_true 60 gone || fail "job $job still in the queue"
  # Nothing of the job on any node: only slurmd is left in the nodes' namespaces.
  local i pid comm
  for i in 2 3; do
    for pid in $(ip netns pids "ddp-$tag-$i"); do
      comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
      [[ -z $comm || $comm == slurmd ]] || fail "left on node $((i - 1)): $pid $comm"
    done
  done
  exec 7>&-
}

# --hosts=slurm when a node freezes (its agent stopped): srun has no keep-alive, so only the
# agents' signs of life tell the command; it ends that node's srun after --hangup-timeout and
# the job ends, leaving nothing once Slurm ends the allocation.
check_frozen_node_hosts_slurm() {
  local out=$work/frozen job agent pids
  gated_job frozen --hangup-timeout=2 2
  pids=$(cat "$out"/pid_*)
  # Rank 1 runs on n2; its parent is n2's agent.
  agent=$(awk '{print $4}' "/proc/$(cat "$out/pid_1")/stat")
  kill -STOP "$agent"
  gone() { [[ -z $(on_login squeue -h -j "$job" 2>/dev/null) ]]; }
  until_true 90 gone ||
    { kill -KILL "$agent" 2>/dev/null; fail "job $job still running 90 s after node 2 froze"; }
  grep -q "host n2 (node 1): heard nothing from its agent for" "$out/log" ||
    { cat "$out/log"; fail "the command did not name the silent node"; }
  none_alive() {
    local p
    for p in $pids $agent; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
  }
  until_true 60 none_alive || fail "left after the job: $pids $agent"
  exec 7>&-
}

passed=0 failed=0
for check in "${checks[@]}"; do
  echo "== $check"
  if ("check_$check"); then
    passed=$((passed + 1))
  else
    echo "FAIL: $check"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
