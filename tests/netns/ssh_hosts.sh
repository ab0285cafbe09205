#!/usr/bin/env bash
# `ddprun --hosts` over real OpenSSH across network namespaces. Node 1 runs the command (it has no
# sshd); nodes 2, 3 and 4 run sshd and are the hosts, 2+1+1 slots. Node 5 is on the network but
# runs no sshd (connection refused), and .9 is an address with no node behind it (no route).
# All nodes share this machine's filesystem, so files that workers write anywhere are read here.
# Skips (exit 77) where namespaces cannot be made or OpenSSH's server is not installed.
# Usage: ssh_hosts.sh DDPRUN_BINARY FAKE_WORKER_BINARY
#        (SSH_HOSTS_CHECKS="sigint sigkill" runs only those checks)
#
# The script calls itself: once inside `netns-cluster.sh run` (--in-cluster: start sshd, run the
# checks), and once per check (--check NAME), so that each check runs under `set -e` on its own.
set -euo pipefail
# The caller's ddprun settings must not change what runs here: every flag it needs is given.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster="$here/scripts/netns-cluster.sh"
self="$here/tests/netns/ssh_hosts.sh"
checks=(env_and_ranks tree_fanout exit_code_from_host sigint sigint_to_process_group sigkill
  hangup_after_cut unreachable_hosts output_lines status_and_metrics staging)
if [[ -n ${SSH_HOSTS_CHECKS:-} ]]; then read -ra checks <<<"$SSH_HOSTS_CHECKS"; fi

# --- stage 1: the cluster -------------------------------------------------------------------
if [[ ${1:-} != --in-cluster && ${1:-} != --check ]]; then
  [[ $# -eq 2 ]] || { echo "usage: $0 DDPRUN_BINARY FAKE_WORKER_BINARY" >&2; exit 2; }
  if ! "$cluster" check; then
    echo "SKIPPED: network namespaces cannot be created here (needs root and iproute2)"
    exit 77
  fi
  if ! "$cluster" check-sshd; then
    echo "SKIPPED: OpenSSH is not installed (needs /usr/sbin/sshd, ssh and ssh-keygen)"
    exit 77
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Absolute paths: the command runs from $work.
  ddprun=$(realpath "$1") fake=$(realpath "$2")
  export work ddprun fake sshdir="$work/ssh"
  "$cluster" run "sh$$" 5 "$self" --in-cluster
  exit
fi

# --- stage 2: sshd on nodes 2-4, then each check in a process of its own ---------------------
net=${NODE_1_ADDR%.*}
hosts="$NODE_2_ADDR:2,$NODE_3_ADDR:1,$NODE_4_ADDR:1"
ns() { echo "ddp-$NETNS_TAG-$1"; }

# leftovers I: the pids in node I other than its sshd listener (and, with ignore_sessions=1, other
# than sshd's per-connection processes too)
leftovers() {
  local keep="" pid
  [[ -f $sshdir/sshd-$1.pid ]] && keep=$(<"$sshdir/sshd-$1.pid")
  for pid in $(ip netns pids "$(ns "$1")" 2>/dev/null || true); do
    [[ $pid == "$keep" ]] && continue
    [[ ${ignore_sessions:-0} == 1 && $(cat "/proc/$pid/comm" 2>/dev/null) == sshd ]] && continue
    echo "$pid"
  done
}

if [[ $1 == --in-cluster ]]; then
  started=$(date +%s.%N)
  "$cluster" sshd "$NETNS_TAG" "$sshdir" 2 3 4
  echo "sshd accepts logins on nodes 2, 3, 4 ($(awk -v a="$started" -v b="$(date +%s.%N)" \
    'BEGIN{printf "%.2f", b-a}') s to start all three)"
  passed=0 failed=0
  for check in "${checks[@]}"; do
    if "$self" --check "$check"; then
      passed=$((passed + 1))
    else
      echo "FAIL: $check"
      failed=$((failed + 1))
    fi
    # What a failed check left behind must not disturb the next one: only this test's own
    # processes live in these namespaces (the sshd listeners are kept).
    "$cluster" heal "$NETNS_TAG" 1
    for i in 1 2 3 4 5; do
      for pid in $(leftovers "$i"); do kill -9 "$pid" 2>/dev/null || true; done
    done
  done
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
  exit
fi

# --- stage 3: one check ----------------------------------------------------------------------
name=$2
out="$work/$name"
cmd_pid=""
trap '[[ -n $cmd_pid ]] && kill -9 -- "-$cmd_pid" 2>/dev/null; true' EXIT

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

dump() {
  echo "--- command line: ${cmd_line:-}"
  echo "--- command stdout ($out.out, last 40 lines)"
  tail -n 40 "$out.out" 2>/dev/null || true
  echo "--- command stderr ($out.err, last 80 lines)"
  tail -n 80 "$out.err" 2>/dev/null || true
  for i in 2 3 4; do
    echo "--- sshd log of node $i (last 10 lines)"
    tail -n 10 "$sshdir/sshd-$i.log" 2>/dev/null || true
  done
}

fail() { echo "FAIL: $name: $*"; dump; exit 1; }

# launch ARGS...: start `ddprun ARGS... --no-python FAKE_WORKER` inside node 1, from $work, in a
# process group of its own (its pid is the group's id), with SIGINT at its default even though
# this shell starts it in the background; output in $out.out and $out.err.
launch() {
  cmd_line="ddprun --ssh-command='ssh -F $sshdir/ssh_config' $* --no-python fake_worker"
  (cd "$work" && exec setsid env --default-signal=INT ip netns exec "$(ns 1)" "$ddprun" \
    --ssh-command="ssh -F $sshdir/ssh_config" "$@" --no-python "$fake" >"$out.out" 2>"$out.err") &
  cmd_pid=$!
}

finish() {  # finish SECONDS: wait until the command exits; its exit status in $status
  local exited=1
  # In braces, so that bash's own "Killed" line about the job (after a SIGKILL) goes nowhere.
  { timeout "$1" tail --pid="$cmd_pid" -s 0.1 -f /dev/null || exited=0; } 2>/dev/null
  if ((!exited)); then
    # What it waits for, for the next reader of a failure: its threads' kernel waits, its open
    # descriptors and its children.
    {
      echo "--- the command (pid $cmd_pid) still runs: threads' wchan, descriptors, children"
      for t in /proc/"$cmd_pid"/task/*; do echo "thread ${t##*/}: $(cat "$t/comm" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"; done
      ls -l /proc/"$cmd_pid"/fd 2>/dev/null | sed 1d
      ps -o pid,stat,etime,args --ppid "$cmd_pid" 2>/dev/null
    } >&2
    fail "the command did not exit within $1 s"
  fi
  status=0
  { wait "$cmd_pid" || status=$?; } 2>/dev/null
  cmd_pid=""
}

wait_started() {  # wait_started DIR COUNT SECONDS: COUNT workers have created their started_* file
  local deadline=$((SECONDS + $3)) n
  while :; do
    n=$(find "$1" -name 'started_*' | wc -l)
    ((n >= $2)) && return 0
    kill -0 "$cmd_pid" 2>/dev/null || fail "the command exited while $n of $2 workers had started"
    ((SECONDS < deadline)) || fail "$n of $2 workers started within $3 s"
    sleep 0.1  # the interval between looks at the directory
  done
}

wait_clean() {  # wait_clean SECONDS NODES...: nothing but sshd is left in these nodes
  local seconds=$1 deadline=$((SECONDS + $1)) left i
  shift
  while :; do
    left=""
    for i in "$@"; do left+=$(leftovers "$i" | tr '\n' ' '); done
    [[ -z ${left// /} ]] && return 0
    if ((SECONDS >= deadline)); then
      echo "processes left in nodes $* after $seconds s:"
      for i in "$@"; do
        for pid in $(leftovers "$i"); do
          echo "  node $i: $(ps -o pid=,ppid=,etime=,comm=,args= -p "$pid" 2>/dev/null || echo "$pid (gone)")"
          # Where it waits: each thread's name, wait channel and kernel stack's top frames.
          for t in /proc/"$pid"/task/*; do
            echo "    thread ${t##*/} $(cat "$t/comm" 2>/dev/null): $(cat "$t/wchan" 2>/dev/null);" \
              "$(head -n 4 "$t/stack" 2>/dev/null | awk '{printf "%s ", $2}')"
          done
        done
      done
      fail "processes other than sshd are left $seconds s after the command ended"
    fi
    sleep 0.2  # the interval between looks at the namespaces
  done
}

envval() { awk -v k="$2" 'index($0, k "=") == 1 { print substr($0, length(k) + 2); exit }' "$1"; }

# a) Ranks and environment across 3 hosts with 2+1+1 slots. FAKE_TOUCH_DIR is relative, so the
#    started_* files land in $work/env_and_ranks.touch only if workers run in the command's
#    working directory ($work).
check_env_and_ranks() {
  mkdir -p "$out.env" "$out.touch"
  launch --hosts="$hosts" --master-port=29501 -x FOO=bar -x FAKE_MODE=env \
    -x FAKE_ENV_DIR="$out.env" -x FAKE_TOUCH_DIR="$name.touch"
  finish 120
  [[ $status -eq 0 ]] || fail "exit code $status, expected 0"
  local files
  files=$(cd "$out.env" && ls)
  [[ $(echo "$files" | tr '\n' ' ') == "env_0.txt env_1.txt env_2.txt env_3.txt " ]] ||
    fail "env files: $(echo "$files" | tr '\n' ' '), expected env_0.txt to env_3.txt"
  local group=(0 0 1 2) local_rank=(0 1 0 0) local_world=(2 2 1 1) r f key want got
  for r in 0 1 2 3; do
    f="$out.env/env_$r.txt"
    # MASTER_PORT: the workers' store gets a fresh port per attempt (docs/reference.md), the same for all.
    for key in RANK WORLD_SIZE GROUP_RANK LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT FOO; do
      case $key in
        RANK) want=$r ;;
        WORLD_SIZE) want=4 ;;
        GROUP_RANK) want=${group[r]} ;;
        LOCAL_RANK) want=${local_rank[r]} ;;
        LOCAL_WORLD_SIZE) want=${local_world[r]} ;;
        MASTER_ADDR) want=$NODE_2_ADDR ;;
        MASTER_PORT)
          want=$(envval "$out.env/env_0.txt" MASTER_PORT)
          [[ -n $want ]] || fail "no MASTER_PORT in $out.env/env_0.txt" ;;
        FOO) want=bar ;;
      esac
      got=$(envval "$f" "$key")
      [[ $got == "$want" ]] || fail "rank $r: $key='$got', expected '$want' ($f)"
    done
  done
  echo "ok: 4 workers on 3 hosts (2+1+1): RANK 0-3, GROUP_RANK 0 0 1 2, LOCAL_WORLD_SIZE 2 2 1 1," \
    "MASTER_ADDR $NODE_2_ADDR, one MASTER_PORT, -x FOO=bar in every worker"
  for r in 0 1 2 3; do
    [[ -f $out.touch/started_${r}_0 ]] ||
      fail "no $out.touch/started_${r}_0: rank $r did not run in the command's working directory"
  done
  echo "ok: workers on every host run in the command's working directory"
}

# a') Tree fan-out (--tree-threshold=2 --fanout=2): the command reaches nodes 2 and 4 itself, and
#     node 2's agent starts node 3's over ssh from inside node 2; the job is the same.
check_tree_fanout() {
  mkdir -p "$out.env"
  launch --hosts="$hosts" --master-port=29509 --tree-threshold=2 --fanout=2 -x FAKE_MODE=env \
    -x FAKE_ENV_DIR="$out.env"
  finish 120
  [[ $status -eq 0 ]] || fail "exit code $status, expected 0"
  grep -q "2 directly, each of those starting the rest of its group" "$out.err" ||
    fail "the command did not use the tree"
  local r
  for r in 0 1 2 3; do
    [[ $(envval "$out.env/env_$r.txt" WORLD_SIZE) == 4 ]] || fail "rank $r: WORLD_SIZE is not 4"
    [[ $(envval "$out.env/env_$r.txt" RANK) == "$r" ]] || fail "rank $r: wrong RANK"
  done
  grep -q "^\[$NODE_3_ADDR:2\]:" "$out.out" 2>/dev/null ||
    grep -q "ddprun@$NODE_3_ADDR" "$out.err" || fail "no output from node 3 reached the command"
  echo "ok: tree fan-out: node 3's agent started by node 2's over ssh, 4 ranks, exit 0"
}

# b) A worker's exit code on the last host is the command's, and the root cause names that host.
check_exit_code_from_host() {
  launch --hosts="$hosts" --master-port=29502 -x FAKE_MODE=fail_rank:3:7
  finish 120
  [[ $status -eq 7 ]] || fail "exit code $status, expected 7 (rank 3 on $NODE_4_ADDR exits 7)"
  echo "ok: rank 3 on $NODE_4_ADDR exits 7, the command exits 7"
  # The block: the "Root cause" line and the indented rows under it (any [..] prefix removed).
  local all blocks block row
  all=$(cat "$out.out" "$out.err")
  blocks=$(grep -c 'Root cause' <<<"$all" || true)
  [[ $blocks -eq 1 ]] || fail "$blocks root-cause blocks in the output, expected 1"
  block=$(sed -E 's/^\[[^]]*\]:? ?//' <<<"$all" |
    awk '/Root cause/ { on = 1; print; next } on && /^  / { print; next } { on = 0 }')
  [[ $(grep -cwF "$NODE_4_ADDR" <<<"$block" || true) -eq 1 ]] ||
    fail "the root-cause block does not name host $NODE_4_ADDR exactly once:"$'\n'"$block"
  row=$(grep -E '^  host ' <<<"$block" || true)
  grep -wqF "$NODE_4_ADDR" <<<"$row" || fail "the root cause's host row is not $NODE_4_ADDR:"$'\n'"$block"
  echo "ok: the root cause names host $NODE_4_ADDR once"
}

# c) SIGINT to the command (the pid alone) while every worker hangs.
hang_then() {  # hang_then PORT [FLAGS...]: start 4 hanging workers and wait until all started
  local port=$1
  shift
  mkdir -p "$out.touch"
  launch --hosts="$hosts" --master-port="$port" "$@" -x FAKE_MODE=hang -x FAKE_TOUCH_DIR="$out.touch"
  wait_started "$out.touch" 4 60
}

check_sigint() {
  hang_then 29503
  local t0
  t0=$(date +%s.%N)
  kill -INT "$cmd_pid"
  finish 60
  [[ $status -eq 130 ]] || fail "exit code $status after SIGINT, expected 130"
  echo "ok: SIGINT to the command: exit 130 after $(elapsed "$t0") s"
  wait_clean 30 2 3 4
  echo "ok: nothing but sshd left on hosts 2-4, $(elapsed "$t0") s after SIGINT"
  wait_clean 30 1
  echo "ok: nothing left on node 1 (no ssh client)"
}

# c') Ctrl-C at a terminal: SIGINT to the whole process group, so the ssh clients get it too and
#     the connections drop at once.
check_sigint_to_process_group() {
  hang_then 29504
  local t0
  t0=$(date +%s.%N)
  kill -INT -- "-$cmd_pid"
  finish 60
  [[ $status -eq 130 ]] || fail "exit code $status after SIGINT to the process group, expected 130"
  echo "ok: SIGINT to the command's process group (Ctrl-C): exit 130 after $(elapsed "$t0") s"
  wait_clean 30 1 2 3 4
  echo "ok: nothing but sshd left on nodes 1-4, $(elapsed "$t0") s after Ctrl-C"
}

# d) SIGKILL to the command: the remote agents hear nothing for --hangup-timeout and stop.
check_sigkill() {
  hang_then 29505 --hangup-timeout=2
  local t0
  t0=$(date +%s.%N)
  kill -KILL "$cmd_pid"
  finish 10
  wait_clean 30 2 3 4
  echo "ok: SIGKILL to the command (--hangup-timeout=2): nothing but sshd left on hosts 2-4" \
    "$(elapsed "$t0") s later"
  wait_clean 30 1
  echo "ok: nothing left on node 1 (no ssh client)"
}

# d') Node 1 cut off the network: the connections stay open but go silent, so the remote agents
#     hear nothing (no EOF as after a SIGKILL) and stop their workers after --hangup-timeout,
#     and the command, hearing no sign of life from them (or its ssh keep-alive, which ddprun
#     adds, giving up first), ends each host's connection, so it ends on its own with 123.
#     sshd's own per-connection processes may stay until TCP gives up: only they are allowed.
check_hangup_after_cut() {
  hang_then 29508 --hangup-timeout=2
  local t0
  t0=$(date +%s.%N)
  "$cluster" cut "$NETNS_TAG" 1
  ignore_sessions=1 wait_clean 30 2 3 4
  echo "ok: node 1 cut off (--hangup-timeout=2): hosts 2-4 stopped their agents and workers" \
    "$(elapsed "$t0") s later"
  finish 30
  "$cluster" heal "$NETNS_TAG" 1
  [[ $status -eq 123 ]] || fail "the command exited $status after the cut, expected 123"
  grep -qE "lost the connection|heard nothing from its agent" "$out.err" ||
    fail "the command did not say it lost the hosts"
  echo "ok: the command noticed on its own and exited 123, $(elapsed "$t0") s after the cut"
}

# e) Hosts that cannot be reached: nothing starts anywhere, exit 123, one line per failing host.
check_unreachable_hosts() {
  local noroute=$net.9 refused=$NODE_5_ADDR t0 n
  mkdir -p "$out.touch"
  t0=$(date +%s.%N)
  launch --hosts="$NODE_2_ADDR:1,$noroute:1,$NODE_3_ADDR:1,$refused:1" --master-port=29506 \
    --connect-timeout=5 -x FAKE_MODE=hang -x FAKE_TOUCH_DIR="$out.touch"
  finish 60
  [[ $status -eq 123 ]] || fail "exit code $status, expected 123 (hosts $noroute and $refused unreachable)"
  for host in "$noroute" "$refused"; do
    n=$(cat "$out.out" "$out.err" | grep -cwF "$host" || true)
    [[ $n -eq 1 ]] || fail "$n lines name the unreachable host $host, expected 1"
  done
  echo "ok: exit 123 after $(elapsed "$t0") s, one line each for $noroute (no route) and $refused (refused)"
  n=$(find "$out.touch" -name 'started_*' | wc -l)
  [[ $n -eq 0 ]] || fail "$n workers started although two hosts are unreachable"
  wait_clean 30 1 2 3 4
  echo "ok: no worker started, nothing left on nodes 1-4"
}

# g) The running job watched from node 1: `ddprun status` finds the command through its control
#    socket and shows every rank of every host (read from node 0's store); the command's
#    --metrics-port serves every node's series; after the end, status finds nothing (exit 3).
status_json() {
  ip netns exec "$(ns 1)" env XDG_RUNTIME_DIR="$rt" "$ddprun" status --json --rdzv-id=netns-status
}
check_status_and_metrics() {
  rt="$out.rt"
  mkdir -m 700 "$rt"
  export XDG_RUNTIME_DIR="$rt"
  hang_then 29508 --metrics-port=29709 --rdzv-id=netns-status
  local deadline=$((SECONDS + 60)) running="" page samples
  # "AGENTS RANKS": the job's agents and ranks that are running
  count_running='import json, sys
jobs = json.load(sys.stdin)["jobs"]
nodes = [n for j in jobs for n in j["nodes"]]
print(sum(n["state"] == "running" for n in nodes),
      sum(r["state"] == "running" for n in nodes for r in n["ranks"]))'
  while ((SECONDS < deadline)); do
    running=$(status_json 2>/dev/null | python3 -c "$count_running" 2>/dev/null) || true
    [[ $running == "3 4" ]] && break
    sleep 0.2  # the interval between looks
  done
  [[ $running == "3 4" ]] || fail "ddprun status saw '$running' agents and ranks running, expected '3 4': $(status_json 2>&1)"
  echo "ok: ddprun status on node 1 shows the 3 hosts' agents and 4 ranks running"
  # The command reads the store (at most once a second), where each agent's record is rewritten
  # within a second of a change: its view follows within a few seconds.
  deadline=$((SECONDS + 60)) samples=0
  while ((SECONDS < deadline)); do
    page=$(ip netns exec "$(ns 1)" bash -c 'exec 3<>/dev/tcp/127.0.0.1/29709 &&
      printf "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" >&3 && timeout 10 cat <&3')
    samples=$(grep -c '^ddprun_workers{.*state="running"} [12]$' <<<"$page" || true)
    ((samples == 3)) && break
    sleep 0.2  # the interval between scrapes
  done
  [[ $samples -eq 3 ]] || fail "the command's metrics have $samples nodes with running workers, expected 3: $page"
  grep -q '^ddprun_info{.*run_id="' <<<"$page" || fail "no ddprun_info in the command's metrics"
  echo "ok: the command's /metrics has every node's series"
  kill -INT "$cmd_pid"
  finish 60
  local code=0
  status_json >/dev/null 2>&1 || code=$?
  [[ $code -eq 3 ]] || fail "ddprun status after the end exited $code, expected 3"
  echo "ok: after the end, ddprun status finds no job (exit 3)"
  wait_clean 30 2 3 4
  unset XDG_RUNTIME_DIR
}

# f) Output integrity: 2000 numbered lines from each of 4 workers arrive whole and in order.
check_output_lines() {
  launch --hosts="$hosts" --master-port=29507 -x FAKE_MODE=lines:2000
  finish 120
  [[ $status -eq 0 ]] || fail "exit code $status, expected 0"
  local prefixed report
  prefixed=$(grep -c '^\[' "$out.out" || true)
  # host of each rank: 0 and 1 on node 2, 2 on node 3, 3 on node 4
  report=$(awk -v h0="$NODE_2_ADDR" -v h1="$NODE_2_ADDR" -v h2="$NODE_3_ADDR" -v h3="$NODE_4_ADDR" '
    BEGIN { host[0] = h0; host[1] = h1; host[2] = h2; host[3] = h3 }
    !/^\[/ { next }
    {
      whole = 0
      if (match($0, /^\[[0-9.]+:[0-3]\]: ?/)) {
        pre = substr($0, 2, RLENGTH - 1); rest = substr($0, RLENGTH + 1)
        sub(/\]: ?$/, "", pre); split(pre, hp, ":"); r = hp[2]
        whole = hp[1] == host[r] && rest ~ ("^line [0-9]+ of 2000 from rank " r "$")
      }
      if (!whole) { if (bad++ < 5) print "not a whole line from its host and rank, line " NR ": " $0; next }
      split(rest, w, " "); n = w[2] + 0
      if (n != last[r] + 1 && disorder++ < 5) print "rank " r ": line " n " after line " last[r] + 0
      last[r] = n; count[r]++
    }
    END {
      for (r = 0; r < 4; r++) if (count[r] != 2000) print "rank " r ": " count[r] + 0 " whole lines of 2000"
      if (bad) print bad " lines not whole"
      if (disorder) print disorder " lines out of order"
    }' "$out.out")
  [[ -z $report ]] || fail "$prefixed prefixed lines on stdout, not 4 x 2000 whole lines in order:"$'\n'"$report"
  echo "ok: 8000 lines, each whole with its [host:rank]: prefix, 2000 per rank in order"
}

# g) Staging over real ssh: no host has ddprun at --remote-ddprun, so each gets this one in its
#    own cache (sshd's SetEnv XDG_CACHE_HOME, scripts/netns-cluster.sh); through the tree, node 2
#    sends node 3 its own copy. The next job runs the cached copies; a damaged one is replaced.
check_staging() {
  local staged=(--hosts="$hosts" --remote-ddprun=/nonexistent/ddprun --tree-threshold=2 --fanout=2)
  launch "${staged[@]}" --master-port=29510
  finish 120
  [[ $status -eq 0 ]] || fail "exit code $status, expected 0"
  grep -q "on 3 host(s) that lacked it (2 sent from here, 1 by relays)" "$out.err" ||
    fail "the command did not say it staged ddprun on 3 hosts, 1 through a relay"
  local i copy
  for i in 2 3 4; do
    copy=$(find "$sshdir/cache-$i/ddprun" -type f)
    [[ $(wc -l <<<"$copy") -eq 1 ]] || fail "node $i's cache holds '$copy', not one copy"
    cmp -s "$copy" "$ddprun" || fail "node $i's copy $copy is not this ddprun"
  done
  echo "ok: 3 hosts without ddprun ran this one from their caches, node 3's sent by node 2"

  launch "${staged[@]}" --master-port=29510
  finish 120
  [[ $status -eq 0 ]] || fail "second job: exit code $status, expected 0"
  grep -q "from the cache on 3 host(s)" "$out.err" || fail "the second job did not reuse the caches"
  ! grep -q "staged ddprun" "$out.err" || fail "the second job sent ddprun again"

  copy=$(find "$sshdir/cache-3/ddprun" -type f)
  printf 'damaged' | dd of="$copy" bs=1 seek=8192 conv=notrunc status=none
  launch "${staged[@]}" --master-port=29510
  finish 120
  [[ $status -eq 0 ]] || fail "third job: exit code $status, expected 0"
  grep -q "on 1 host(s) that lacked it (0 sent from here, 1 by relays), .*: $NODE_3_ADDR" "$out.err" ||
    fail "node 3's damaged copy was not replaced"
  cmp -s "$copy" "$ddprun" || fail "node 3's copy is still damaged"
  echo "ok: the next job ran the cached copies; a damaged copy was sent again and replaced"
}

"check_$name"
