#!/usr/bin/env bash
# --node-check's links across network namespaces (separate addresses, a real bridge): five nodes,
# one of them with its link rate-limited both ways by tc (tbf). Every node's agent must name that
# node, and nothing else; with the limit lifted, nothing at all; with --node-check=refuse, every
# node ends with exit code 120 and no worker runs; with --node-check=exclude in an elastic job
# (--nnodes=3:5), that node alone exits 120 and the other four run the job. Skips (exit 77) where
# namespaces or tc cannot be used.
# Usage: node_check_links.sh DDPRUN_BINARY [RUNS]
#   RUNS (default 1): how many slowed and how many clean runs; passes when the slowed node is
#   named alone in all runs but one (all of them, for fewer than 20) and no clean run names
#   anything (for fewer than 20, a clean run that does is run once more and judged by that).
set -euo pipefail
# The caller's ddprun settings must not change what runs here: every flag it needs is given.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
ddprun=$1
runs=${2:-1}
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster="$here/scripts/netns-cluster.sh"
if ! "$cluster" check; then
  echo "SKIPPED: network namespaces cannot be created here (needs root and iproute2)"
  exit 77
fi
if ! command -v tc >/dev/null; then
  echo "SKIPPED: tc (iproute2) is not here"
  exit 77
fi
# The nodes share this machine's /dev/shm: one too small to pass the check would be named on
# every node, and no clean run could name nothing.
if (( $(df --output=avail -B1 /dev/shm | tail -1) < 256 * 1024 * 1024 )); then
  echo "SKIPPED: /dev/shm here has less than 256 MiB free, which the check names on every node"
  exit 77
fi

tag="nc$$"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scenario() {
  local nodes=5 slow=3 rate=100mbit
  # One job: every node's agent, at once; NODE's log in $work/node<I>.log; the codes in
  # $work/rc<I>. The worker only touches $work/ran<I>, so that a worker that ran is seen; its
  # command line is the same on every node, as an elastic job requires. The nodes have static
  # ranks (node I is node rank I-1) unless FLAGS give another rendezvous.
  job() {  # job MODE [FLAGS...]
    local mode=$1 pids=() i
    shift
    rm -f "$work"/node*.log "$work"/rc* "$work"/ran*
    for i in $(seq 1 "$nodes"); do
      local rendezvous=(--nnodes="$nodes" --node-rank=$((i - 1)) --master-addr="$NODE_1_ADDR"
                        --master-port=29500)
      (( $# )) && rendezvous=("$@")
      ( rc=0
        timeout 120 "$cluster" exec "$NETNS_TAG" "$i" env CHECKED_NODE="$i" "$ddprun" \
          "${rendezvous[@]}" --local-addr="$(eval echo "\$NODE_${i}_ADDR")" \
          --node-check="$mode" --no-python sh -c 'touch "$0/ran$CHECKED_NODE"' "$work" \
          >"$work/node$i.log" 2>&1 || rc=$?
        echo "$rc" >"$work/rc$i" ) &
      pids+=($!)
    done
    wait "${pids[@]}"
  }
  # The findings node 0 printed (it prints every node's).
  findings() { grep -o 'node check: node .*' "$work/node1.log" || true; }
  local bad="node $((slow - 1)) ($(eval echo "\$NODE_${slow}_ADDR")): every link to and from it is slow"
  local named=0 clean=0 run
  for run in $(seq 1 "$runs"); do
    if ! "$cluster" slow "$NETNS_TAG" "$slow" "$rate"; then
      echo "SKIPPED: tc cannot rate-limit a link here (tbf)"
      return 77
    fi
    job warn
    if [[ $(findings | grep -c -F "$bad") -eq 1 && $(findings | wc -l) -eq 1 ]]; then
      named=$((named + 1))
    else
      echo "run $run, node $slow slowed to $rate: not named alone; node 0 found:"
      findings
      [[ $runs -eq 1 ]] && cat "$work/node1.log"
    fi
    for i in $(seq 1 "$nodes"); do
      if [[ $(cat "$work/rc$i") != 0 ]]; then echo "FAIL: node $i exited $(cat "$work/rc$i") under warn"; cat "$work/node$i.log"; return 1; fi
    done
    "$cluster" unslow "$NETNS_TAG" "$slow"
    job warn
    if ! grep -q "node check: $nodes node(s), nothing found" "$work/node1.log" &&
       (( runs < 20 )); then
      # Under ctest the suite's other tests share this machine's cores with these five nodes'
      # traffic, and a descheduled sender can slow every look at one link. Such a moment does
      # not last a second job; a link that is slow does.
      echo "run $run, no link slowed: something was named, looking again; node 0 found:"
      findings
      job warn
    fi
    if grep -q "node check: $nodes node(s), nothing found" "$work/node1.log"; then
      clean=$((clean + 1))
    else
      echo "run $run, no link slowed: something was named; node 0 found:"
      findings
    fi
    [[ $run -eq 1 ]] && grep -o 'nothing found.*' "$work/node1.log" | sed 's/^/clean run: /'
  done
  echo "slowed: node $((slow - 1)) named alone in $named of $runs runs"
  echo "clean: nothing named in $clean of $runs runs"
  local allowed=$(( runs >= 20 ? 1 : 0 ))
  if (( named < runs - allowed || clean < runs )); then echo "FAIL"; return 1; fi

  # refuse: every node ends with the node check's code, and no worker runs.
  "$cluster" slow "$NETNS_TAG" "$slow" "$rate"
  job refuse
  for i in $(seq 1 "$nodes"); do
    if [[ $(cat "$work/rc$i") != 120 ]]; then
      echo "FAIL: under refuse node $i exited $(cat "$work/rc$i"), not 120"; cat "$work/node$i.log"; return 1
    fi
    if [[ -e "$work/ran$i" ]]; then echo "FAIL: a worker ran on node $i under refuse"; return 1; fi
  done
  echo "ok: under refuse every node exited 120 and no worker ran"

  # exclude: the slowed node leaves (node 1 serves the store), and the other four run the job.
  # The first round closes when the fifth node joins; the last call, long so that a node slow
  # to start still makes it, is waited out by the round of four that follows.
  job exclude --nnodes=3:5 --rdzv-backend=c10d --rdzv-endpoint="$NODE_1_ADDR:29400" \
    --rdzv-id=exclude --rdzv-conf=last_call_timeout=10
  for i in $(seq 1 "$nodes"); do
    local want=0 ran=yes
    (( i == slow )) && want=120 ran=no
    if [[ $(cat "$work/rc$i") != "$want" ]]; then
      echo "FAIL: under exclude node $i exited $(cat "$work/rc$i"), not $want"; cat "$work/node$i.log"; return 1
    fi
    if [[ -e "$work/ran$i" && $ran == no || ! -e "$work/ran$i" && $ran == yes ]]; then
      echo "FAIL: under exclude a worker ran on node $i: $ran expected"; cat "$work/node$i.log"; return 1
    fi
  done
  if ! grep -q "this node left the job (exit code 120)" "$work/node$slow.log"; then
    echo "FAIL: node $slow does not say it left the job"; cat "$work/node$slow.log"; return 1
  fi
  echo "ok: under exclude node $slow alone exited 120, the other $((nodes - 1)) ran the job"
}
export -f scenario
export cluster ddprun work runs
"$cluster" run "$tag" 5 bash -c scenario
echo "1 passed, 0 failed"
