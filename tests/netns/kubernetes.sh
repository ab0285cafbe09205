#!/usr/bin/env bash
# ddprun as the container command of a Kubeflow PyTorchJob, across network namespaces. Three
# "pods" of a job named pj (one Master, two Workers, nprocPerNode 2): pj-master-0, pj-worker-0
# and pj-worker-1, each in a network namespace with its own hostname and its own /etc/hosts (a
# bind mount in a mount namespace of its own, read through glibc's files backend), each started
# with exactly the variables the training operator (v1.9, pkg/controller.v1/pytorch) gives a
# pod, and `ddprun train.py` as the command: no flags. See docs/kubernetes.md.
#
# Checks:
#   late_master_name    the workers' hosts files get the master's record only once each
#                       worker's agent has said that the name does not resolve and that it
#                       waits (a headless Service's record appears when the master pod is
#                       ready); the job then forms, every rank sees its RANK, WORLD_SIZE and
#                       MASTER_ADDR, and every agent exits 0
#   trainjob_master_name_late
#                       two pods of a Trainer v2 TrainJob, whose PET_MASTER_ADDR (tj-node-0-0.tj)
#                       resolves late in node 0's own pod too: node 0 waits for its own name
#                       before it serves the store, and the job forms
#   worker_exit_code    a worker that exits 3, with PET_MAX_RESTARTS=0: every agent exits 3
#   name_never_appears  a worker pod whose master's name never resolves exits 124 once
#                       join_timeout (PET_RDZV_CONF) has passed, naming the store it waited for
#
# Skips (exit 77) where namespaces cannot be made, where /usr/bin/python3 is missing (the
# pods' program is a Python script, as train.py would be), or where the hosts lookup does not
# read /etc/hosts (nsswitch.conf) or goes through nscd.
# Usage: kubernetes.sh DDPRUN_BINARY   (KUBERNETES_CHECKS="worker_exit_code" runs only those)
set -euo pipefail
# The caller's ddprun settings must not change what runs here: each pod gets only its own.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster="$here/scripts/netns-cluster.sh"
self="$here/tests/netns/kubernetes.sh"
checks=(late_master_name trainjob_master_name_late worker_exit_code name_never_appears)
if [[ -n ${KUBERNETES_CHECKS:-} ]]; then read -ra checks <<<"$KUBERNETES_CHECKS"; fi

# --- stage 1: the cluster ------------------------------------------------------------------
if [[ ${1:-} != --in-cluster ]]; then
  [[ $# -eq 1 ]] || { echo "usage: $0 DDPRUN_BINARY" >&2; exit 2; }
  if ! "$cluster" check; then
    echo "SKIPPED: network namespaces cannot be created here (needs root and iproute2)"
    exit 77
  fi
  if [[ ! -x /usr/bin/python3 ]]; then
    echo "SKIPPED: /usr/bin/python3 is missing (the pods run a Python program, as train.py)"
    exit 77
  fi
  if ! grep -Eq '^hosts:.*\bfiles\b' /etc/nsswitch.conf 2>/dev/null; then
    echo "SKIPPED: /etc/nsswitch.conf does not resolve hosts from files (/etc/hosts)"
    exit 77
  fi
  if [[ -S /run/nscd/socket || -S /var/run/nscd/socket ]]; then
    echo "SKIPPED: nscd runs here: it, not each pod's /etc/hosts, would answer the lookups"
    exit 77
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  ddprun=$(realpath "$1")
  export work ddprun
  "$cluster" run "k8s$$" 3 "$self" --in-cluster
  exit
fi

# --- stage 2: the pods ---------------------------------------------------------------------
# The job's pods (namespace I+1 holds pod I, of node rank I), their master's name as the pods
# look it up, and the environment the operator gives pod I (pod_env I); the PyTorchJob unless a
# check says otherwise.
pods=(pj-master-0 pj-worker-0 pj-worker-1)
master=pj-master-0
port=23456  # the operator's default port (pytorchjob-port)
nproc=2
pytorchjob_env() {  # pkg/controller.v1/pytorch: envvar.go, master.go (v1.9)
  echo PYTHONUNBUFFERED=1 MASTER_PORT=$port PET_MASTER_PORT=$port MASTER_ADDR=$master \
    PET_MASTER_ADDR=$master WORLD_SIZE=$((${#pods[@]} * nproc)) RANK=$1 PET_NODE_RANK=$1 \
    PET_NPROC_PER_NODE=$nproc PET_NNODES=${#pods[@]}
}
pod_env=pytorchjob_env

fail() {
  echo "  FAIL: $*"
  local f
  for f in "$work"/pod*.log; do [[ -f $f ]] && { echo "  --- $f"; sed 's/^/    /' "$f"; }; done
  exit 1
}

# The program every pod runs, as its train.py: it records what its rank was given (written
# whole, then renamed), then exits with the code the check asks of that rank ($work/exit_<rank>,
# else 0).
cat >"$work/train.py" <<EOF
import os, socket, sys
rank = os.environ["RANK"]
path = "$work/out/env_" + rank
with open(path + ".tmp", "w") as f:
    for name, value in os.environ.items():
        f.write(name + "=" + value + "\n")
    f.write("HOSTNAME_SEEN=" + socket.gethostname() + "\n")
os.rename(path + ".tmp", path)
code = "$work/exit_" + rank
sys.exit(int(open(code).read()) if os.path.exists(code) else 0)
EOF

addr() { eval echo "\$NODE_$(($1 + 1))_ADDR"; }

# hosts_file I WITH_MASTER [OWN_NAMES]: pod I's /etc/hosts as the kubelet writes it (localhost,
# the pod's own names: OWN_NAMES, else its name), plus the master's record when WITH_MASTER is 1.
# Its access time is then set back, so that the next lookup shows as a new access time.
hosts_file() {
  local f=$work/hosts_$1
  {
    echo "# Kubernetes-managed hosts file."
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    printf '%s\t%s\n' "$(addr "$1")" "${3:-${pods[$1]}}"
    if [[ $2 == 1 ]]; then printf '%s\t%s\n' "$(addr 0)" "$master"; fi
  } >"$f"
}

# add_master_record I: the master's record appears in pod I's hosts file (appended in place: the
# bind mount shows the same file).
add_master_record() {
  printf '%s\t%s\n' "$(addr 0)" "$master" >>"$work/hosts_$1"
}

# pod I [VAR=VALUE...]: pod I's container, in the foreground: its hostname, its /etc/hosts, a
# resolv.conf whose name server does not exist (nothing resolves but /etc/hosts), and only the
# operator's environment (with PATH, HOME and HOSTNAME, as in any container) plus VAR=VALUE.
# A hung agent is ended by SIGTERM after 120 s (it then exits 143).
pod() {
  local i=$1
  shift
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$work/resolv_$i"
  # shellcheck disable=SC2046  # the operator's variables, one word each
  timeout --preserve-status -k 10 120 "$cluster" exec "$NETNS_TAG" $((i + 1)) \
    unshare --mount --uts -- /bin/sh -c \
    'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && hostname "$3" &&
     shift 3 && exec "$@"' sh "$work/hosts_$i" "$work/resolv_$i" "${pods[$i]}" \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    HOSTNAME="${pods[$i]}" $("$pod_env" "$i") "$@" \
    "$ddprun" "$work/train.py" >"$work/pod$i.log" 2>&1
}

# wait_for FILE PATTERN SECONDS: a line of FILE matches PATTERN within SECONDS
wait_for() {
  local found
  found=$(timeout "$3" tail -n +1 -F "$1" 2>/dev/null | grep -c -m 1 -e "$2" || true)
  [[ ${found:-0} -ge 1 ]] || fail "'$2' not in $1 within $3 s"
}

# wait_for_lookup I SECONDS: pod I's agent says, within SECONDS, that the master's name does
# not resolve and that it waits for it.
wait_for_lookup() {
  wait_for "$work/pod$1.log" "waiting for the store's address $master:$port to resolve" "$2"
}

# wait_all PID...: waits for every PID (a pod started with & by this shell, each bounded by its
# own timeout in pod); their exit codes go to $codes, space separated. Not in a $(...): only
# this shell can wait for its children.
wait_all() {
  local pid rc list=()
  for pid in "$@"; do
    rc=0
    wait "$pid" || rc=$?
    list+=("$rc")
  done
  codes="${list[*]}"
}

value() { sed -n "s/^$2=//p" "$1"; }

# check_ranks NODES: ranks 0..NODES*nproc-1 ran on the right pods with the right variables
check_ranks() {
  local r f size=$(($1 * nproc))
  for ((r = 0; r < size; r++)); do
    f=$work/out/env_$r
    [[ -f $f ]] || fail "rank $r did not run"
    [[ $(value "$f" RANK) == "$r" ]] || fail "rank $r has RANK=$(value "$f" RANK)"
    [[ $(value "$f" WORLD_SIZE) == "$size" ]] || fail "rank $r has WORLD_SIZE=$(value "$f" WORLD_SIZE)"
    [[ $(value "$f" LOCAL_RANK) == $((r % nproc)) ]] ||
      fail "rank $r has LOCAL_RANK=$(value "$f" LOCAL_RANK)"
    [[ $(value "$f" GROUP_RANK) == $((r / nproc)) ]] ||
      fail "rank $r has GROUP_RANK=$(value "$f" GROUP_RANK)"
    [[ $(value "$f" MASTER_ADDR) == "$master" ]] ||
      fail "rank $r has MASTER_ADDR=$(value "$f" MASTER_ADDR)"
    # The workers' own store gets a fresh port on the master (reference.md), not the agents'.
    [[ $(value "$f" MASTER_PORT) =~ ^[0-9]+$ && $(value "$f" MASTER_PORT) != "$port" ]] ||
      fail "rank $r has MASTER_PORT=$(value "$f" MASTER_PORT)"
    [[ $(value "$f" HOSTNAME_SEEN) == "${pods[$((r / nproc))]}" ]] ||
      fail "rank $r ran on $(value "$f" HOSTNAME_SEEN), expected ${pods[$((r / nproc))]}"
  done
}

check_late_master_name() {
  local pids=() i
  for i in 0 1 2; do hosts_file "$i" 0; done
  for i in 0 1 2; do pod "$i" & pids+=($!); done
  wait_for "$work/pod0.log" "store: listening on" 30
  # Each worker's agent looks the name up, misses it, and says it waits: it waits, not fails.
  for i in 1 2; do
    wait_for_lookup "$i" 30
    [[ ! -e $work/out/env_0 ]] || fail "a worker started before every pod had joined"
    add_master_record "$i"
  done
  echo "  ok: both worker pods found $master unresolved and waited; its record added"
  wait_all "${pids[@]}"
  [[ $codes == "0 0 0" ]] || fail "the agents exited '$codes', expected '0 0 0'"
  check_ranks 3
  echo "  ok: ranks 0-5 of 6, 2 on each of ${pods[*]}, MASTER_ADDR $master; every agent exited 0"
}

check_worker_exit_code() {
  local pids=() i
  for i in 0 1 2; do hosts_file "$i" "$((i > 0))"; done
  echo 3 >"$work/exit_3"
  for i in 0 1 2; do pod "$i" PET_MAX_RESTARTS=0 & pids+=($!); done
  wait_all "${pids[@]}"
  rm -f "$work/exit_3"
  [[ $codes == "3 3 3" ]] || fail "the agents exited '$codes', expected '3 3 3'"
  grep -q "exit code 3" "$work/pod0.log" || fail "the master's root cause does not say 'exit code 3'"
  echo "  ok: rank 3 (on ${pods[1]}) exited 3 with PET_MAX_RESTARTS=0: every agent exited 3"
}

check_name_never_appears() {
  local pid start took
  hosts_file 1 0
  start=$SECONDS
  pod 1 PET_RDZV_CONF=join_timeout=5 & pid=$!
  wait_all "$pid"
  took=$((SECONDS - start))
  [[ $codes == 124 ]] || fail "the agent exited '$codes', expected 124"
  ((took >= 5)) || fail "the agent gave up after ${took} s, before join_timeout (5 s)"
  grep -q "$master:$port" "$work/pod1.log" || fail "the log does not name $master:$port"
  echo "  ok: with $master never resolving, the agent exited 124 after ${took} s (join_timeout=5)"
}

# A TrainJob tj of 2 nodes (pkg/runtime/framework/plugins/torch): pods tj-node-0-0 and
# tj-node-0-1 of the JobSet tj, whose hosts files hold only their own names (the kubelet's:
# HOSTNAME.SUBDOMAIN.NAMESPACE.svc.cluster.local and HOSTNAME); tj-node-0-0.tj comes from the
# cluster's DNS once the headless Service tj publishes it, here added to every pod's hosts file
# once each agent said it waits for it.
trainjob_env() {
  echo PET_NNODES=2 PET_NPROC_PER_NODE=$nproc PET_NODE_RANK=$1 JOB_COMPLETION_INDEX=$1 \
    PET_MASTER_ADDR=$master PET_MASTER_PORT=$port
}
check_trainjob_master_name_late() {
  local pids=() i
  pods=(tj-node-0-0 tj-node-0-1) master=tj-node-0-0.tj port=29500 pod_env=trainjob_env
  for i in 0 1; do hosts_file "$i" 0 "${pods[$i]}.tj.default.svc.cluster.local ${pods[$i]}"; done
  for i in 0 1; do pod "$i" & pids+=($!); done
  for i in 0 1; do
    wait_for_lookup "$i" 30
  done
  for i in 0 1; do add_master_record "$i"; done
  echo "  ok: both pods, node 0's too, found $master unresolved and waited; its record added"
  wait_all "${pids[@]}"
  [[ $codes == "0 0" ]] || fail "the agents exited '$codes', expected '0 0'"
  check_ranks 2
  echo "  ok: ranks 0-3 of 4, 2 on each of ${pods[*]}, MASTER_ADDR $master; every agent exited 0"
}

passed=0 failed=0 codes=""
for check in "${checks[@]}"; do
  echo "check: $check"
  rm -rf "$work/out" "$work"/pod*.log "$work"/exit_*
  mkdir -p "$work/out"
  started=$(date +%s.%N)
  # A subshell of its own under set -e (in an if, set -e would be off inside it).
  set +e
  (set -e; "check_$check")
  rc=$?
  set -e
  if ((rc == 0)); then
    echo "  passed ($(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s)"
    passed=$((passed + 1))
  else
    echo "  FAILED"
    failed=$((failed + 1))
  fi
  # Nothing of a check outlives it: what a failed check left in the pods is ended by pid.
  for i in 1 2 3; do
    for pid in $(ip netns pids "ddp-$NETNS_TAG-$i" 2>/dev/null || true); do
      kill -9 "$pid" 2>/dev/null || true
    done
  done
done
echo "$passed passed, $failed failed"
((failed == 0))
