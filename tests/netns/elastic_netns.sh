#!/usr/bin/env bash
# Elastic ddprun across network namespaces (separate addresses, a real bridge): two nodes start,
# a third joins and the job grows to WORLD_SIZE 3; then the third node is cut off the network
# and the other two re-form with 2 and finish. Skips (exit 77) where namespaces cannot be made.
# Usage: elastic_netns.sh DDPRUN_BINARY
set -euo pipefail
# The caller's ddprun settings must not change what runs here: every flag it needs is given.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
ddprun=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster="$here/scripts/netns-cluster.sh"
if ! "$cluster" check; then
  echo "SKIPPED: network namespaces cannot be created here (needs root and iproute2)"
  exit 77
fi

tag="el$$"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scenario() {
  local endpoint="$NODE_1_ADDR:29400" pids=() gate_fd
  # Workers wait at a gate (a file this shell holds an exclusive lock on) instead of running for
  # a fixed time: they stay up until the survivors have re-formed, however slow the machine is.
  exec {gate_fd}>"$work/gate"
  flock -x "$gate_fd"
  agent() {  # agent I
    "$cluster" exec "$NETNS_TAG" "$1" env GATE="$work/gate" "$ddprun" \
      --nnodes=2:3 --rdzv-backend=c10d --rdzv-endpoint="$endpoint" --rdzv-id=netns \
      --local-addr="$(eval echo "\$NODE_$1_ADDR")" \
      --rdzv-conf=last_call_timeout=1,keep_alive_interval=0.5,keep_alive_max_attempt=3,read_timeout=5,join_timeout=60 \
      --shutdown-timeout=2 --events-file "$work/node$1.jsonl" \
      --no-python sh -c 'exec flock -s "$GATE" true' >"$work/node$1.log" 2>&1 {gate_fd}>&-
  }
  wait_for() {  # wait_for FILE PATTERN SECONDS [COUNT]: COUNT lines match (default 1)
    # tail -F follows the file (created or not yet) as it grows; grep stops at the COUNTth match
    # and tail ends with it; timeout only catches a hang.
    local found
    found=$(timeout "$3" tail -n +1 -F "$1" 2>/dev/null | grep -c -m "${4:-1}" -e "$2" || true)
    [[ ${found:-0} -ge ${4:-1} ]] && return 0
    echo "FAIL: '$2' not ${4:-1} times in $1 within $3 s"; cat "$work"/node*.log; return 1
  }
  agent 1 & pids+=($!)
  wait_for "$work/node1.jsonl" '"event":"rendezvous_started"' 20
  agent 2 & pids+=($!)
  wait_for "$work/node1.jsonl" '"world_size":2' 30
  agent 3 & local third=$!
  wait_for "$work/node3.jsonl" '"world_size":3' 30
  echo "ok: the job grew to 3 nodes across namespaces"
  "$cluster" cut "$NETNS_TAG" 3
  cut_at=$(date +%s.%N)
  # Rounds of node 1: 2 nodes, then 3, then 2 again without the cut-off node.
  wait_for "$work/node1.jsonl" '"event":"rendezvous_completed"' 30 3
  tail -n 20 "$work/node1.jsonl" | grep '"event":"rendezvous_completed"' | tail -1 | grep -q '"world_size":2' ||
    { echo "FAIL: the last round of node 1 is not 2 nodes"; return 1; }
  echo "ok: survivors re-formed with 2 nodes $(awk -v a="$cut_at" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s after the cut"
  flock -u "$gate_fd"  # the workers may finish now
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  wait "$third" || true  # cut off: it fails on its own (store unreachable)
  if [[ $status -ne 0 ]]; then echo "FAIL: a surviving agent exited $status"; cat "$work"/node*.log; return 1; fi
  echo "ok: survivors finished with exit 0"
}
export -f scenario
export cluster ddprun work
"$cluster" run "$tag" 3 bash -c scenario
echo "1 passed, 0 failed"
