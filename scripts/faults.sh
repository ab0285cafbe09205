#!/usr/bin/env bash
# The fault matrix: each fault injected into real ddprun jobs (the project's fake
# worker, agents on 127.0.0.1) N times; for each, how many runs met the expected outcome, the
# processes of the job left behind afterwards, worker output lines lost, and the time from the
# fault to the moment ddprun acted on it. Writes docs/reliability.md (or --output).
#
#   scripts/faults.sh              every fault, 5 runs each (about 5 minutes on 2 cores)
#   scripts/faults.sh --smoke      one run of a few faults (what ctest runs); writes no report
#   options: --runs N  --build DIR (default $BUILD_DIR or build)  --output FILE  --only NAME,...
#
# Processes left behind are found by a marker in the environment that every process of a run
# inherits (FAULTS_RUN=<id>); they are counted, then killed. Only processes of this script's own
# runs are ever signalled. Polls here are bounded waits for files and exits, 50 ms apart.
set -euo pipefail
# The caller's ddprun settings must not change what runs here: every flag it needs is given.
unset PYTHON_EXEC DDPRUN_TOKEN $(compgen -v | grep -E '^(PET|TORCHELASTIC)_' || true)
cd "$(dirname "$0")/.."

runs=5
smoke=0
build=${BUILD_DIR:-build}
output=docs/reliability.md
only=
python=/usr/bin/python3
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --smoke) smoke=1; runs=1; shift ;;
    --build) build=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "faults.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
ddprun=$build/launcher/ddprun
worker=$build/tests/fake_worker
for f in "$ddprun" "$worker"; do
  [[ -x $f ]] || { echo "faults.sh: $f is missing: build first (cmake --build $build)" >&2; exit 2; }
done
[[ -x $python ]] || python=python3

work=$(mktemp -d /tmp/ddprun-faults.XXXXXX)
cut_tag=  # the network namespaces of the node_cut faults, while they exist
trap 'kill_marked all; [[ -z $cut_tag ]] || scripts/netns-cluster.sh down "$cut_tag" >/dev/null 2>&1; rm -rf "$work"' EXIT

# ---- helpers -------------------------------------------------------------------------------

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Pids of processes whose environment holds FAULTS_RUN=$1 (or any run of this script: "all").
marked() {
  local pattern file pid
  if [[ $1 == all ]]; then pattern="FAULTS_RUN=$$-.*"; else pattern="FAULTS_RUN=$1"; fi
  for file in $(grep -lsxz -e "$pattern" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${file#/proc/}; pid=${pid%/environ}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    # zombies are gone already as far as anyone is concerned
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] || echo "$pid"
  done
}
kill_marked() { local p; for p in $(marked "$1"); do kill -9 "$p" 2>/dev/null || true; done; }

# Waits (bounded) until a file exists / a command succeeds; 1 when the limit passed.
wait_file() { local f=$1 limit=${2:-30} i; for ((i = 0; i < limit * 20; i++)); do [[ -e $f ]] && return 0; sleep 0.05; done; return 1; }
wait_text() { local f=$1 text=$2 limit=${3:-30} i; for ((i = 0; i < limit * 20; i++)); do grep -qF -- "$text" "$f" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
# Waits for a background pid (bounded); sets its exit status in $status (-1: still running).
wait_pid() {
  local pid=$1 limit=${2:-60} i
  for ((i = 0; i < limit * 20; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null && status=0 || status=$?; return 0; fi
    sleep 0.05
  done
  status=-1; kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
}
lines_in() { wc -l 2>/dev/null <"$1" || echo 0; }

# Starts ddprun in the background with the run's marker: pid in $agent, output in $dir/$name.out.
start() {
  local name=$1; shift
  FAULTS_RUN=$run_id "$ddprun" "$@" >"$dir/$name.out" 2>&1 &
  agent=$!
}
fake() { echo --no-python "$worker"; }

# A worker's pid (the fake_worker process of this run with RANK=$1).
worker_pid() {
  local p
  for p in $(marked "$run_id"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == fake_worker ]] || continue
    grep -qsxz "RANK=$1" "/proc/$p/environ" && { echo "$p"; return; }
  done
}

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# ---- the faults: each runs once in $dir and sets met (1/0), detect (ms or -), lost, note ----

fault_worker_exit() {
  FAKE_MODE=exit:3 start a --nproc-per-node=2 --master-port="$(free_port)" $(fake)
  wait_pid "$agent"
  [[ $status == 3 ]] && grep -q "Root cause" "$dir/a.out" && met=1
}
expect_worker_exit="exit 3, the root cause named"

fault_worker_segfault() {
  FAKE_MODE=segfault start a --nproc-per-node=2 --master-port="$(free_port)" $(fake)
  wait_pid "$agent"
  [[ $status == 139 ]] && grep -q "SIGSEGV" "$dir/a.out" && met=1
}
expect_worker_segfault="exit 139 (SIGSEGV named)"

fault_worker_sigkill() {
  FAKE_MODE=hang FAKE_TOUCH_DIR=$dir start a --nproc-per-node=2 --master-port="$(free_port)" $(fake)
  wait_file "$dir/started_1_0" && sleep 0.1
  local w t0; w=$(worker_pid 1); t0=$(now_ms)
  kill -9 "$w"
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  [[ $status == 137 ]] && met=1
}
expect_worker_sigkill="exit 137, the other worker stopped"

fault_worker_ignores_sigterm() {
  FAKE_MODE=stubborn FAKE_TOUCH_DIR=$dir start a --nproc-per-node=2 --shutdown-timeout=1 \
    --master-port="$(free_port)" $(fake)
  wait_file "$dir/started_1_0"
  local t0; t0=$(now_ms); kill -TERM "$agent"
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  [[ $status == 143 ]] && met=1
  note="includes --shutdown-timeout=1"
}
expect_worker_ignores_sigterm="exit 143 after the grace, SIGKILL"

fault_worker_sigstop() {
  # A worker stopped (SIGSTOP) while the other waits: a hang, whose verdict names the stop; the
  # stopped worker is continued so that SIGTERM ends it, not SIGKILL after the 30 s grace.
  FAKE_MODE=hang FAKE_TOUCH_DIR=$dir start a --nproc-per-node=2 --hang-timeout=2 \
    --master-port="$(free_port)" $(fake)
  wait_file "$dir/started_1_0"
  local w t0; w=$(worker_pid 1); t0=$(now_ms)
  kill -STOP "$w"
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  [[ $status == 122 ]] && grep -q "rank 1 (1 of 2): stopped by SIGSTOP" "$dir/a.out" &&
    ! grep -q "after the grace period" "$dir/a.out" && met=1
  note="--hang-timeout=2 (in detect), default 30 s grace"
}
expect_worker_sigstop="exit 122 naming the stop; no wait for the grace"

fault_worker_under_debugger() {
  # Rank 1 is held by a tracer that never lets go (a debugger left attached): once SIGKILLed it
  # is a zombie only that tracer may collect. Rank 0's death must still restart the job.
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start a --nproc-per-node=2 --max-restarts=1 \
    --shutdown-timeout=1 --master-port="$(free_port)" $(fake)
  wait_file "$dir/started_1_0" && wait_file "$dir/started_0_0"
  local tracer
  "$python" -c 'import ctypes, sys, time
libc = ctypes.CDLL(None)
sys.exit(1) if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0 else time.sleep(120)' \
    "$(worker_pid 1)" &
  tracer=$!
  wait_text "/proc/$(worker_pid 1)/status" "TracerPid:	$tracer" 10 || true
  local t0; t0=$(now_ms)
  kill -9 "$(worker_pid 0)"
  wait_file "$dir/started_0_1" 60; detect=$(( $(now_ms) - t0 ))
  touch "$dir/go"
  wait_pid "$agent"
  kill "$tracer" 2>/dev/null || true; wait "$tracer" 2>/dev/null || true
  [[ $status == 0 ]] && grep -q "traced by pid $tracer" "$dir/a.out" && met=1
  note="--shutdown-timeout=1, then 10 s for SIGKILL; detect: the kill to the next attempt's start"
}
expect_worker_under_debugger="the traced rank named and left behind; the job restarts and finishes (0)"

fault_restarts_exhausted() {
  FAKE_MODE=exit:3 start a --max-restarts=2 --master-port="$(free_port)" $(fake)
  wait_pid "$agent"
  [[ $status == 3 ]] && grep -q "restarts 2 of 2" "$dir/a.out" && met=1
}
expect_restarts_exhausted="3 attempts, then exit 3"

# Two workers in FAKE_MODE $1, each writing pids to $dir/pids; once $2 lines are there, signal
# $3 to the agent. met when it exits $4; detect: the signal to its exit. More ddprun flags after.
signalled_job() {
  local mode=$1 lines=$2 signal=$3 expect=$4; shift 4
  FAKE_MODE=$mode FAKE_PID_FILE=$dir/pids start a --nproc-per-node=2 --master-port="$(free_port)" \
    "$@" $(fake)
  local i; for ((i = 0; i < 600; i++)); do [[ $(lines_in "$dir/pids") -ge $lines ]] && break; sleep 0.05; done
  local t0; t0=$(now_ms); kill "-$signal" "$agent"
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  [[ $status == "$expect" ]] && met=1
}

fault_agent_sigterm() { signalled_job grandchild 4 TERM 143 --shutdown-timeout=1; }
expect_agent_sigterm="exit 143, workers and their children gone"

fault_agent_sigkill() { signalled_job grandchild 4 KILL 137; }
expect_agent_sigkill="workers and their children gone (guardian)"

# A static job of two nodes (keep-alive 1 s x 3) whose workers hang: agents in $a and $b, once
# both workers run.
two_static_nodes() {
  local port; port=$(free_port)
  local conf=--rdzv-conf=keep_alive_interval=1,keep_alive_max_attempt=3
  FAKE_MODE=hang FAKE_TOUCH_DIR=$dir start a --nnodes=2 --node-rank=0 --master-port="$port" "$conf" $(fake)
  a=$agent
  FAKE_MODE=hang FAKE_TOUCH_DIR=$dir start b --nnodes=2 --node-rank=1 --master-port="$port" "$conf" $(fake)
  b=$agent
  wait_file "$dir/started_1_0"
}

fault_agent_sigstop_static() {
  local a b; two_static_nodes
  local t0; t0=$(now_ms); kill -STOP "$b"
  wait_pid "$a" 30; detect=$(( $(now_ms) - t0 ))
  local sa=$status
  kill -CONT "$b"; wait_pid "$b" 30
  [[ $sa == 124 && $status != -1 ]] && met=1
  note="keep-alive 1 s x 3"
}
expect_agent_sigstop_static="the other node stops (124) after the keep-alive deadline; the paused one ends after SIGCONT"

# `ddprun status --json` of the c10d job at $1 (run id none) shows exactly these (state, ranks)
# of its nodes, sorted, as Python writes them: polled at most 10 s.
status_shows() {
  local i
  for ((i = 0; i < 100; i++)); do
    "$ddprun" status --json --rdzv-endpoint="$1" --rdzv-backend=c10d --rdzv-id=none \
        >"$dir/status.json" 2>/dev/null || true
    "$python" -c 'import json, sys
nodes = json.load(open(sys.argv[1]))["jobs"][0]["nodes"]
sys.exit(str(sorted((n["state"], len(n["ranks"])) for n in nodes)) != sys.argv[2])' \
      "$dir/status.json" "$2" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

fault_agent_sigkill_elastic() {
  local ep; ep=127.0.0.1:$(free_port)
  local flags=(--rdzv-backend=c10d --rdzv-endpoint="$ep" --nnodes=1:2)
  local conf=keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=0.5
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start a "${flags[@]}" --rdzv-conf=$conf,is_host=1 $(fake)
  local a=$agent
  wait_file "$dir/started_0_0"
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start b "${flags[@]}" --rdzv-conf=$conf,is_host=0 $(fake)
  local b=$agent
  wait_file "$dir/started_1_0"
  # Both nodes' records in the store, as ddprun status reads them, before one dies.
  local before=0 after=0
  status_shows "$ep" "[('running', 1), ('running', 1)]" && before=1
  local rounds t0; rounds=$(grep -c "ends:" "$dir/a.out" || true); t0=$(now_ms)
  kill -KILL "$b"
  local i; for ((i = 0; i < 600; i++)); do [[ $(grep -c "ends:" "$dir/a.out" || true) -gt $rounds ]] && break; sleep 0.05; done
  detect=$(( $(now_ms) - t0 ))
  # The dead node gone, without its ranks.
  status_shows "$ep" "[('gone', 0), ('running', 1)]" && after=1
  touch "$dir/go"
  wait_pid "$a"
  [[ $status == 0 && $before == 1 && $after == 1 ]] && met=1
  note="keep-alive 1 s x 3; detect: kill to the survivor's round ending"
}
expect_agent_sigkill_elastic="the survivor re-forms alone and finishes (exit 0); ddprun status shows the dead node gone, without ranks"

fault_store_host_death() {
  local a b; two_static_nodes
  local t0; t0=$(now_ms); kill -KILL "$a"
  wait_pid "$b" 60; detect=$(( $(now_ms) - t0 ))
  local sb=$status
  wait_pid "$a" 5
  [[ $sb == 124 ]] && met=1
}
expect_store_host_death="the other node stops (124), its workers too"

fault_join_and_leave() {
  local ep; ep=127.0.0.1:$(free_port)
  local flags=(--rdzv-backend=c10d --rdzv-endpoint="$ep" --nnodes=1:3)
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start a "${flags[@]}" --rdzv-conf=last_call_timeout=0.5,is_host=1 $(fake)
  local a=$agent
  wait_file "$dir/started_0_0"
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start b "${flags[@]}" --rdzv-conf=last_call_timeout=0.5,is_host=0 $(fake)
  local b=$agent
  wait_file "$dir/started_1_0"
  local t0; t0=$(now_ms); kill -TERM "$b"
  wait_pid "$b" 30; local sb=$status
  local i; for ((i = 0; i < 600; i++)); do [[ $(grep -c "ends:" "$dir/a.out" || true) -ge 2 ]] && break; sleep 0.05; done
  detect=$(( $(now_ms) - t0 ))
  touch "$dir/go"
  wait_pid "$a"
  [[ $status == 0 && $sb == 143 ]] && met=1
  note="detect: the leaver's SIGTERM to the survivor's round ending"
}
expect_join_and_leave="a node joins (re-form), leaves on SIGTERM (143), the other finishes (0)"

fault_setsid_daemons_end() {
  FAKE_MODE=daemon FAKE_PID_FILE=$dir/pids start a --nproc-per-node=2 --master-port="$(free_port)" $(fake)
  wait_pid "$agent"
  [[ $status == 0 ]] && grep -q "left running" "$dir/a.out" && met=1
}
expect_setsid_daemons_end="exit 0; the daemons ended and named"

fault_setsid_daemons_sigterm() { signalled_job daemon_hang 2 TERM 143 --shutdown-timeout=1; }
expect_setsid_daemons_sigterm="exit 143; the daemons ended"

fault_setsid_daemons_sigkill() {
  signalled_job daemon_hang 2 KILL 137
  note="the guardian finds the daemons by the marker in their environment"
}
expect_setsid_daemons_sigkill="exit 137; the daemons ended (guardian)"

fault_log_dir_full() {
  # A 64 KiB file-size limit stands in for a full disk (EFBIG where a disk gives ENOSPC).
  ( ulimit -f 64; FAKE_MODE=lines:5000 FAULTS_RUN=$run_id exec "$ddprun" -r 3 --log-dir="$dir/logs" \
      --master-port="$(free_port)" $(fake) ) >"$dir/a.out" 2>&1 &
  agent=$!
  wait_pid "$agent"
  [[ $status == 0 ]] && grep -q "output was lost" "$dir/a.out" && met=1
  lost=$(( 5000 - $(cat "$dir"/logs/*/attempt_0/0/stdout.log 2>/dev/null | wc -l) ))
  note="lines lost: what did not fit under the limit (reported)"
}
expect_log_dir_full="exit 0 (the job's result), the lost log named once and in the summary"

fault_port_taken() {
  local port; port=$(free_port)
  "$python" -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',$port)); s.listen(); time.sleep(30)" &
  local holder=$!
  sleep 0.3
  local t0; t0=$(now_ms)
  start a --nnodes=2 --node-rank=0 --master-port="$port" $(fake)
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null || true
  [[ $status == 124 ]] && grep -q "Address already in use" "$dir/a.out" && met=1
  note="detect: start to exit"
}
expect_port_taken="exit 124 at once, naming the address"

fault_foreign_program() {
  local port; port=$(free_port)
  "$python" -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1 &
  local web=$!
  local i; for ((i = 0; i < 100; i++)); do "$python" -c "import socket; socket.create_connection(('127.0.0.1',$port))" 2>/dev/null && break; sleep 0.05; done
  local t0; t0=$(now_ms)
  start a --nnodes=2 --node-rank=1 --master-port="$port" --rdzv-conf=join_timeout=60 $(fake)
  wait_pid "$agent"; detect=$(( $(now_ms) - t0 ))
  kill "$web" 2>/dev/null; wait "$web" 2>/dev/null || true
  [[ $status == 124 ]] && grep -q "not a ddprun store" "$dir/a.out" && met=1
  note="a web server on the port (silent: it waits for an HTTP line); detect: start to exit"
}
expect_foreign_program="exit 124 within the handshake timeout (10 s): not a ddprun store"

# Sends garbage, oversized headers and truncated frames to a store, 20 connections each.
abuse_store() {
  "$python" - "$1" "$2" <<'EOF'
import os, socket, struct, sys, time
port, kind = int(sys.argv[1]), sys.argv[2]
held = []
def conn():
    s = socket.create_connection(("127.0.0.1", port)); held.append(s); return s
if kind == "frames":
    for i in range(20):
        s = conn()
        s.sendall([os.urandom(4096), struct.pack(">Q", 1 << 62) + b"x" * 16,
                   struct.pack(">Q", 100) + b"\x01" * 10][i % 3])
elif kind == "flood":
    for i in range(2000):
        conn()
    time.sleep(2)  # held while the agent's memory is sampled
elif kind == "huge":
    # 12 connections, each announcing a 100 MiB frame and sending 10 MiB of it.
    for i in range(12):
        s = conn()
        s.sendall(struct.pack(">Q", 100 << 20) + b"\x02" + b"x" * (10 << 20))
    time.sleep(2)
elif kind == "slowloris":
    # One byte every 100 ms of a frame; prints how long until the store hangs up.
    s = conn()
    s.settimeout(0.1)
    start = time.monotonic()
    frame = struct.pack(">Q", 1 << 20) + b"\x02" * 1000
    for b in frame:
        try:
            s.send(bytes([b]))
            if s.recv(1) == b"":
                break
        except socket.timeout:
            continue
        except OSError:
            break
    print(int((time.monotonic() - start) * 1000))
elif kind == "forge":
    # A hello with no proof of the secret, then the forged outcome.
    def key(b): return struct.pack(">I", len(b)) + b
    # The store's protocol version (kProtocolVersion), so that what is refused is the proof.
    hello = b"\x01" + struct.pack(">IH", 0x44445052, 3) + key(b"none") + key(b"n" * 32)
    forged = b"\x02" + key(b"news/attempt/0/outcome") + key(b"success")
    s = conn()
    s.sendall(struct.pack(">Q", len(hello)) + hello + struct.pack(">Q", len(forged)) + forged)
    s.settimeout(5)
    try:
        while s.recv(4096): pass
    except OSError: pass
for s in held:
    s.close()
EOF
}

# A two-node job whose workers wait for $dir/go while `abuse_store KIND` works on the store that
# node 0's agent serves (one node alone keeps its store in memory and listens nowhere); that
# agent's RSS before, at its peak and after in rss_before/rss_peak/rss_after (KiB), the abuser's
# output in $dir/abuse.out; met when the job outlived the abuse and then ends as its workers do
# (exit 0 on both nodes). Extra arguments go to both agents.
abused_job() {
  local kind=$1; shift
  local port; port=$(free_port)
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start b --nnodes=2 --node-rank=1 \
    --master-port="$port" "$@" $(fake)
  local other=$agent
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start a --nnodes=2 --node-rank=0 \
    --master-port="$port" "$@" $(fake)
  wait_file "$dir/started_0_0"
  wait_file "$dir/started_1_0"
  rss_before=$(rss_kib "$agent"); rss_peak=$rss_before
  abuse_store "$port" "$kind" >"$dir/abuse.out" &
  local abuser=$! i r
  for ((i = 0; i < 600; i++)); do
    r=$(rss_kib "$agent"); ((r > rss_peak)) && rss_peak=$r
    kill -0 "$abuser" 2>/dev/null || break
    sleep 0.05
  done
  # The abuser must have reached the store: a refused connection fails the fault.
  local abused=0
  wait "$abuser" && abused=1
  rss_after=$(rss_kib "$agent")
  local alive=0
  # Neither node ended (nor was told the job succeeded) by the abuse.
  kill -0 "$agent" 2>/dev/null && kill -0 "$other" 2>/dev/null && alive=1
  touch "$dir/go"
  wait_pid "$other"; local other_status=$status
  wait_pid "$agent"
  [[ $status == 0 && $other_status == 0 && $alive == 1 && $abused == 1 ]] && met=1
}
mib() { echo $(( ($1 - rss_before) / 1024 )); }

fault_malformed_frames() { abused_job frames; }
expect_malformed_frames="the job unaffected (exit 0); each bad connection closed"

fault_idle_flood() {
  abused_job flood
  note="2000 idle connections: agent RSS +$(mib "$rss_peak") MiB at most"
}
expect_idle_flood="the job unaffected (exit 0), memory bounded"

fault_huge_frames() {
  abused_job huge
  note="12 x 10 MiB of 100 MiB frames: agent RSS +$(mib "$rss_peak") MiB at most, +$(mib "$rss_after") MiB after they closed"
}
expect_huge_frames="the job unaffected (exit 0); memory bounded and given back"

fault_slowloris() {
  abused_job slowloris --rdzv-conf=read_timeout=2
  detect=$(cat "$dir/abuse.out")
  [[ $detect -lt 10000 ]] || met=0
  note="one byte per 100 ms, read_timeout 2 s; detect: connect to the store hanging up"
}
expect_slowloris="the trickling client dropped about read_timeout after its frame began"

fault_wrong_secret() {
  local port; port=$(free_port)
  printf 'right-secret-0123456789\n' >"$dir/right"; printf 'wrong-secret-0123456789\n' >"$dir/wrong"
  chmod 600 "$dir/right" "$dir/wrong"
  start a --nnodes=2 --node-rank=0 --master-port="$port" --token-file="$dir/right" $(fake)
  local a=$agent
  local t0; t0=$(now_ms)
  start b --nnodes=2 --node-rank=1 --master-port="$port" --token-file="$dir/wrong" \
    --rdzv-conf=join_timeout=60 $(fake)
  wait_pid "$agent" 60; detect=$(( $(now_ms) - t0 ))
  local sb=$status
  kill -TERM "$a"; wait_pid "$a" 30
  [[ $sb == 124 ]] && grep -q "authentication failed" "$dir/b.out" && met=1
  note="detect: start to exit"
}
expect_wrong_secret="the node with the wrong secret exits 124 at once"

fault_missing_secret() {
  printf 'the-job-secret-0123456789\n' >"$dir/token"; chmod 600 "$dir/token"
  abused_job forge --token-file="$dir/token"
  # Refused for the missing proof, not for anything before it (a stale protocol version).
  grep -q "this store needs the job's secret" "$dir/a.out" || met=0
  note="a client without the secret sends the forged outcome"
}
expect_missing_secret="the forged outcome refused; the job ends as its worker does (0)"

fault_lines_under_crash() {
  FAKE_MODE=lines_crash:20000 start a --master-port="$(free_port)" $(fake)
  wait_pid "$agent"
  local got; got=$(grep -c "^\[default0\]:line " "$dir/a.out" || true)
  lost=$(( 20000 - got ))
  [[ $status == 134 && $lost == 0 ]] && met=1
}
expect_lines_under_crash="every line before the crash on the console, exit 134"

fault_log_dir_other_user() {
  # A --log-dir that belongs to another user, who could swap what the job writes there for
  # links to files only root may write.
  mkdir -p "$dir/theirs"; chown 65534:65534 "$dir/theirs"
  start a --log-dir="$dir/theirs" --tee=3 --master-port="$(free_port)" --no-python touch "$dir/started"
  wait_pid "$agent"
  [[ $status == 2 && ! -e $dir/started ]] && grep -q "belongs to user 65534" "$dir/a.out" &&
    [[ -z $(ls -A "$dir/theirs") ]] && met=1
  note="refused before anything starts; nothing written there"
}
expect_log_dir_other_user="exit 2 at once, naming the owner; no worker, no file"

fault_settings_mismatch() {
  local port; port=$(free_port)
  local t0; t0=$(now_ms)
  start a --nnodes=2 --node-rank=0 --max-restarts=3 --master-port="$port" $(fake)
  local a=$agent
  start b --nnodes=2 --node-rank=1 --max-restarts=0 --master-port="$port" $(fake)
  wait_pid "$agent" 60; local sb=$status
  wait_pid "$a" 60; local sa=$status
  detect=$(( $(now_ms) - t0 ))
  [[ $sa == 124 && $sb == 124 ]] && grep -q "different settings" "$dir/a.out" &&
    grep -q "different settings" "$dir/b.out" && met=1
  note="--max-restarts=3 and 0; detect: start to the last exit"
}
expect_settings_mismatch="both nodes exit 124 at once, naming both values"

fault_node_restarted() {
  # A 3-node static job: node 1 killed while it waits for node 2, and started again.
  local port; port=$(free_port)
  local flags=(--nnodes=3 --master-port="$port" --rdzv-conf=join_timeout=60)
  start a "${flags[@]}" --node-rank=0 $(fake)
  local a=$agent
  start b "${flags[@]}" --node-rank=1 $(fake)
  wait_text "$dir/b.out" "node 1 of 3 joined"
  kill -KILL "$agent"
  local t0; t0=$(now_ms)
  start b2 "${flags[@]}" --node-rank=1 $(fake)
  local b=$agent
  start c "${flags[@]}" --node-rank=2 $(fake)
  wait_pid "$agent" 60; local sc=$status
  wait_pid "$b" 60; local sb=$status
  wait_pid "$a" 60; local sa=$status
  detect=$(( $(now_ms) - t0 ))
  [[ $sa == 0 && $sb == 0 && $sc == 0 ]] && grep -q "this node takes its place" "$dir/b2.out" &&
    met=1
  note="SIGKILL; detect: the new start to the job's end (3 missed beats of 1 s)"
}
expect_node_restarted="the node started again takes its rank; the job forms and ends (exit 0)"

fault_duplicate_node_rank() {
  local port; port=$(free_port)
  local flags=(--nnodes=3 --master-port="$port")
  start a "${flags[@]}" --node-rank=0 $(fake)
  local a=$agent
  start b "${flags[@]}" --node-rank=1 $(fake)
  local b=$agent
  wait_text "$dir/b.out" "node 1 of 3 joined"
  local t0; t0=$(now_ms)
  start b2 "${flags[@]}" --node-rank=1 $(fake)
  wait_pid "$agent" 60; local s2=$status
  wait_pid "$b" 60; local sb=$status
  wait_pid "$a" 60; local sa=$status
  detect=$(( $(now_ms) - t0 ))
  [[ $sa == 124 && $sb == 124 && $s2 == 124 ]] && grep -q "already taken" "$dir/a.out" && met=1
  note="default join timeout (600 s); detect: the duplicate's start to the last exit"
}
expect_duplicate_node_rank="every node exits 124 at once, naming the rank"

fault_local_timeouts_differ() {
  # Each agent's own waits: torchrun runs such a job, and so does ddprun.
  local port; port=$(free_port)
  start a --nnodes=2 --node-rank=0 --rdzv-conf=join_timeout=60 --master-port="$port" $(fake)
  local a=$agent
  start b --nnodes=2 --node-rank=1 --rdzv-conf=join_timeout=20,last_call_timeout=2 \
    --master-port="$port" $(fake)
  wait_pid "$agent" 60; local sb=$status
  wait_pid "$a" 60; local sa=$status
  [[ $sa == 0 && $sb == 0 ]] && ! grep -q "different settings" "$dir/a.out" "$dir/b.out" && met=1
  note="join_timeout 60 s and 20 s, last_call_timeout default and 2 s"
}
expect_local_timeouts_differ="both nodes run the job (exit 0)"

fault_hang_without_gdb() {
  # --hang-timeout on a host without gdb: the verdict comes, and says why it has no stacks.
  mkdir -p "$dir/empty"
  PATH=$dir/empty FAKE_MODE=sleep:600000 start a --nproc-per-node=2 --hang-timeout=1 \
    --log-dir="$dir/logs" --master-port="$(free_port)" $(fake)
  local t0; t0=$(now_ms)
  wait_pid "$agent" 60
  detect=$(( $(now_ms) - t0 ))
  [[ $status == 122 ]] && grep -q "a hang will name its ranks without their stacks" "$dir/a.out" &&
    grep -q "no stacks of 2 of 2 live worker(s): no debugger" "$dir/a.out" &&
    ! grep -q "took the stacks" "$dir/a.out" && [[ -z $(find "$dir/logs" -name stacks.txt) ]] &&
    met=1
  note="gdb not on PATH; said at start and at the verdict; detect: start to exit (timeout 1 s)"
}
expect_hang_without_gdb="exit 122; no gdb said at start and at the verdict, no stacks claimed"

fault_staging_cache_swap() {
  # Root's --hosts job stages ddprun where ~/.cache is a link into a directory of user 65534,
  # which holds a good copy of this ddprun and swaps it for a program of its own, and back,
  # all the while. Each session gets a private /tmp/ddprun-<uid> of its own (mount namespace).
  command -v unshare >/dev/null || { note="no unshare"; return; }
  local plan v sha theirs=$dir/theirs home=$dir/home ssh=$dir/private_tmp_ssh
  plan=$("$ddprun" --dry-run=json --hosts=h --remote-ddprun=/nonexistent/ddprun --no-python true)
  v=$("$python" -c 'import json, sys; print(json.load(sys.stdin)["staging"]["version"])' <<<"$plan")
  sha=$("$python" -c 'import json, sys; print(json.load(sys.stdin)["staging"]["sha256"])' <<<"$plan")
  mkdir -p "$theirs/ddprun/$v-$sha" "$home"
  cp "$ddprun" "$theirs/good"
  printf '#!/bin/sh\ntouch %s/planted_ran\n' "$dir" >"$theirs/evil"
  chmod 755 "$theirs/good" "$theirs/evil"
  ln "$theirs/good" "$theirs/ddprun/$v-$sha/ddprun"
  chown -R 65534:65534 "$theirs"
  ln -s "$theirs" "$home/.cache"
  chmod 711 "$work"  # user 65534 reaches its directory
  cat >"$ssh" <<EOF
#!/bin/sh
exec unshare -m sh -c 'p=/tmp/ddprun-\$(id -u); mkdir -p -m 700 "\$p" &&
  mount -t tmpfs -o size=64m,mode=700 tmpfs "\$p" && exec "\$@"' private-tmp $PWD/testing/local_ssh.sh "\$@"
EOF
  chmod 700 "$ssh"
  ( FAULTS_RUN=$run_id exec setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '
      cd "$1" || exit 1; i=0
      while [ ! -e stop ] && [ $i -lt 20000 ]; do
        ln -f evil x && mv -f x "$2"; ln -f good x && mv -f x "$2"; i=$((i + 1))
      done' swap "$theirs" "ddprun/$v-$sha/ddprun" ) &
  local swapper=$!
  HOME=$home start a --hosts=127.0.0.1 --ssh-command="$ssh" --remote-ddprun=/nonexistent/ddprun \
    --master-port="$(free_port)" --no-python sh -c 'echo "agent runs $(readlink /proc/$PPID/exe)"'
  wait_pid "$agent"
  local job=$status
  touch "$theirs/stop"
  wait_pid "$swapper" 30
  [[ $job == 0 && ! -e $dir/planted_ran ]] &&
    grep -q "agent runs /tmp/ddprun-$(id -u)/cache/$v-$sha/ddprun" "$dir/a.out" && met=1
  note="the copy in the other user's tree neither run nor written; the user's private one runs"
}
expect_staging_cache_swap="exit 0; the planted program never runs"

fault_out_of_step() {
  # Three Gloo ranks (Debian's torch 1.13), rank 1 sleeping outside the all_reduce, the process
  # group's timeout 8 s, no --hang-timeout: the rank named is 1, not the first to time out.
  /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || { note="no torch"; return; }
  HANG_MODE=sleep PG_TIMEOUT=8 PYTHON_EXEC=/usr/bin/python3 start a --nproc-per-node=3 \
    --master-port="$(free_port)" --log-dir="$dir/logs" tests/python/hang.py
  wait_pid "$agent" 120
  [[ $status == 1 ]] && grep -q "job failed (exit code 1): rank 1 alive outside any collective" \
    "$dir/a.out" && met=1
  note="torch 1.13, Gloo; the worker's exit code kept"
}
expect_out_of_step="exit 1, rank 1 named as out of step"

fault_two_jobs_one_id() {
  # Two elastic jobs given one endpoint and run id by mistake, their programs' arguments differ.
  local ep; ep=127.0.0.1:$(free_port)
  local flags=(--rdzv-backend=c10d --rdzv-endpoint="$ep" --nnodes=1:2 --rdzv-id=shared
               --rdzv-conf=last_call_timeout=1)
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start a "${flags[@]}" $(fake) --job=a
  local a=$agent
  wait_file "$dir/started_0_0"
  local t0; t0=$(now_ms)
  FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir start b "${flags[@]}" $(fake) --job=b
  wait_pid "$agent" 60; local sb=$status
  detect=$(( $(now_ms) - t0 ))
  touch "$dir/go"
  wait_pid "$a" 60
  [[ $status == 0 && $sb == 124 ]] && grep -q "cannot join" "$dir/b.out" &&
    grep -q "membership changes 0" "$dir/a.out" && met=1
  note="the same program, --job=a and --job=b; detect: the second job's start to its exit"
}
expect_two_jobs_one_id="the second job refused (124), naming the arguments; the first goes on (0)"

fault_signal_store_gone() {
  # Node 1 stopped by SIGTERM; its worker writes an error file as it ends (as torch's does), but
  # only once node 0, the store's host, was killed: nothing to record there, no warning.
  local port; port=$(free_port)
  local gate=$dir/gate; exec {held}>"$gate"; flock "$held"
  local worker="trap 'flock -s $gate true; echo stopped > \"\$TORCHELASTIC_ERROR_FILE\"; kill \$!; exit 1' TERM; touch $dir/started_\$RANK; sleep 600 & wait"
  start a --nnodes=2 --node-rank=0 --master-port="$port" --no-python sh -c "$worker"
  local a=$agent
  start b --nnodes=2 --node-rank=1 --master-port="$port" --no-python sh -c "$worker"
  local b=$agent
  wait_file "$dir/started_0"; wait_file "$dir/started_1"
  local t0; t0=$(now_ms)
  kill -TERM "$b"
  wait_text "$dir/b.out" "stopping workers"
  kill -KILL "$a"; wait_pid "$a" 30
  flock -u "$held"; exec {held}>&-
  wait_pid "$b" 60
  detect=$(( $(now_ms) - t0 ))
  [[ $status == 143 ]] && ! grep -q "could not record the failure" "$dir/b.out" && met=1
  note="detect: SIGTERM to node 1's exit"
}
expect_signal_store_gone="exit 143, no warning about recording the failure"

fault_nnodes_mismatch() {
  local port; port=$(free_port)
  start a --nnodes=2 --node-rank=0 --master-port="$port" $(fake)
  local a=$agent
  wait_text "$dir/a.out" "waiting for the others"
  local t0; t0=$(now_ms)
  start b --nnodes=3 --node-rank=1 --master-port="$port" $(fake)
  wait_pid "$a" 60; local sa=$status
  detect=$(( $(now_ms) - t0 ))
  wait_pid "$agent" 60; local sb=$status
  [[ $sa == 124 && $sb == 124 ]] && grep -q "different node counts" "$dir/a.out" && met=1
  note="node 0 waiting with --nnodes=2 when a node with 3 comes; detect: to node 0's exit"
}
expect_nnodes_mismatch="both exit 124 at once (node 0 no longer waits out its join timeout)"

fault_progress_bar() {
  # tqdm's way of drawing: '\r' before every state. After three states the worker blocks reading
  # the FIFO $dir/go, written once the console showed one, so that state was shown live.
  mkfifo "$dir/go"
  local script="printf '\rstep 1'; printf '\rstep 2'; printf '\rstep 3';
    read line < $dir/go; i=0;
    while [ \$i -lt 2000 ]; do printf '\r%d' \$i; i=\$((i+1)); done; printf '\rdone\n'"
  local t0; t0=$(now_ms)
  start a --tee=3 --log-dir="$dir/logs" --master-port="$(free_port)" --no-python sh -c "$script"
  wait_text "$dir/a.out" "[default0]:step 2" 30 && detect=$(( $(now_ms) - t0 ))
  timeout 30 sh -c 'echo > "$1"' _ "$dir/go" || true  # bounded: a worker that died reads nothing
  wait_pid "$agent"
  local shown; shown=$(grep -c '^\[default0\]:' "$dir/a.out" || true)
  local bytes; bytes=$(cat "$dir"/logs/*/attempt_0/0/stdout.log | tr -cd '\r' | wc -c)
  [[ $status == 0 && $detect != - && $shown -lt 100 && $bytes == 2004 ]] &&
    grep -q '^\[default0\]:done' "$dir/a.out" && met=1
  note="2,003 redraws: shown live, $shown console lines; the log keeps every \\r"
}
expect_progress_bar="live and prefixed on the console, coalesced; the log byte-exact"

fault_hosts_odd_bytes() {
  # A working directory and a forwarded value that are not UTF-8, and 300 KiB of arguments,
  # over --hosts (the local ssh stand-in).
  local cwd=$dir/$'caf\xe9-\xff'; mkdir -p "$cwd"
  local big; big=$(head -c 102400 /dev/zero | tr '\0' a)
  local ddprun_path ssh; ddprun_path=$(realpath "$ddprun"); ssh=$PWD/testing/local_ssh.sh
  (cd "$cwd" && ODD_BYTES=$'\x01\t\xe9\xff end' FAULTS_RUN=$run_id exec "$ddprun_path" \
      --hosts=127.0.0.1,127.0.0.2 --ssh-command="$ssh" -x ODD_BYTES \
      --master-port="$(free_port)" --no-python sh -c \
      'printf %s "$ODD_BYTES" > "$0/value_$RANK"; printf %s "$1$2$3" | wc -c > "$0/arg_$RANK"' \
      "$dir" "$big" "$big" "$big") >"$dir/a.out" 2>&1 &
  agent=$!
  wait_pid "$agent"
  [[ $status == 0 && $(cat "$dir/value_1") == $'\x01\t\xe9\xff end' && $(cat "$dir/arg_1") == 307200 ]] && met=1
}
expect_hosts_odd_bytes="exit 0; bytes and 300 KiB of arguments exact on every host"

fault_process_limit() {
  # As user 65534 with at most 24 processes and threads, 64 workers cannot all start.
  ( FAULTS_RUN=$run_id exec setpriv --reuid=65534 --regid=65534 --clear-groups prlimit --nproc=24 \
      "$ddprun" --nproc-per-node=64 --max-restarts=1 --master-port="$(free_port)" --no-python \
      sleep 30 ) >"$dir/a.out" 2>&1 &
  agent=$!
  wait_pid "$agent"
  [[ $status == 121 ]] && grep -q "could not start another process" "$dir/a.out" &&
    grep -q "restarts 1 of 1" "$dir/a.out" && met=1
  note="the one restart spent, then 121"
}
expect_process_limit="exit 121 naming the limit, after a restart; not 126"

fault_oom_kill() {
  # A memory cgroup (v1) of 96 MiB for the job; the worker takes 512 MiB.
  local mine; mine=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  local cg=/sys/fs/cgroup/memory$mine/ddprun-faults-$$-$r
  mkdir "$cg" 2>/dev/null || { note="no writable cgroup v1 memory hierarchy"; return; }
  echo $((96 << 20)) >"$cg/memory.limit_in_bytes"
  echo $((96 << 20)) >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
  ( echo $BASHPID >"$cg/cgroup.procs"; FAULTS_RUN=$run_id exec "$ddprun" \
      --master-port="$(free_port)" --no-python "$python" -c "b = b'x' * (512 << 20)" ) \
    >"$dir/a.out" 2>&1 &
  agent=$!
  wait_pid "$agent"
  rmdir "$cg" 2>/dev/null || true
  [[ $status == 137 ]] && grep -q "out of memory (the kernel's OOM killer)" "$dir/a.out" && met=1
}
expect_oom_kill="exit 137, called out of memory"

fault_worker_limits() {
  ( ulimit -Sn 256; FAULTS_RUN=$run_id exec "$ddprun" --nproc-per-node=2 \
      --master-port="$(free_port)" --no-python sh -c 'echo "limit=$(ulimit -n)"' ) \
    >"$dir/a.out" 2>&1 &
  agent=$!
  wait_pid "$agent"
  [[ $status == 0 && $(grep -c ':limit=256$' "$dir/a.out") == 2 ]] && met=1
  note="the agent raises its own limit for its connections"
}
expect_worker_limits="every worker sees the open-files limit ddprun was started with"

# Two static nodes in network namespaces of their own (scripts/netns-cluster.sh: veths on a
# bridge kept in another namespace), keep-alive 1 s x 3, workers waiting for $dir/go; then node
# 2's link goes down. Sets $a and $b (the agents), $t0 (the cut), $cut_tag (the cluster).
cut_node_2() {
  local tag="fc$$$r"
  cut_tag=$tag
  "$cluster" up "$tag" 2 >/dev/null
  local m; m=$("$cluster" addr "$tag" 1)
  local conf=--rdzv-conf=keep_alive_interval=1,keep_alive_max_attempt=3
  local node
  for node in 1 2; do
    FAULTS_RUN=$run_id FAKE_MODE=after_file:go:0:0 FAKE_TOUCH_DIR=$dir "$cluster" exec "$tag" "$node" \
      "$ddprun" --nnodes=2 --node-rank=$((node - 1)) --master-addr="$m" --master-port=29500 \
      --local-addr="$("$cluster" addr "$tag" "$node")" "$conf" --shutdown-timeout=2 $(fake) \
      >"$dir/node$node.out" 2>&1 &
    if [[ $node == 1 ]]; then a=$!; else b=$!; fi
  done
  wait_file "$dir/started_0_0" 30
  wait_file "$dir/started_1_0" 30
  t0=$(now_ms)
  "$cluster" cut "$tag" 2
}
heal_node_2() {
  "$cluster" heal "$cut_tag" 2
  wait_pid "$a" 30; sa=$status
  wait_pid "$b" 30; sb=$status
  "$cluster" down "$cut_tag" >/dev/null 2>&1 || true
  cut_tag=
}

fault_node_cut_short() {
  local a b t0 sa sb; cut_node_2
  sleep 0.5  # the fault's length, not a wait for anything
  touch "$dir/go"
  heal_node_2
  [[ $sa == 0 && $sb == 0 ]] && met=1
  note="cut for 0.5 s, within the keep-alive deadline of 3 s"
}
expect_node_cut_short="the job goes on; both nodes finish (exit 0)"

fault_node_cut_long() {
  local a b t0 sa sb; cut_node_2
  # Cut until node 1 (the store's host) has declared node 2 dead and stopped; node 2 then finds
  # the store gone once its link is back.
  local i; for ((i = 0; i < 600; i++)); do kill -0 "$a" 2>/dev/null || break; sleep 0.05; done
  detect=$(( $(now_ms) - t0 ))
  heal_node_2
  [[ $sa == 124 && $sb == 124 ]] && met=1
  note="keep-alive deadline 3 s; healed once node 1 stopped; detect: cut to node 1's exit"
}
expect_node_cut_long="both nodes stop (124), their workers too"

faults=(worker_exit worker_segfault worker_sigkill worker_ignores_sigterm worker_sigstop
        worker_under_debugger restarts_exhausted
        agent_sigterm agent_sigkill agent_sigstop_static agent_sigkill_elastic store_host_death
        node_cut_short node_cut_long
        join_and_leave setsid_daemons_end setsid_daemons_sigterm setsid_daemons_sigkill
        log_dir_full port_taken foreign_program malformed_frames idle_flood huge_frames slowloris
        wrong_secret
        missing_secret lines_under_crash
        log_dir_other_user settings_mismatch local_timeouts_differ nnodes_mismatch progress_bar
        node_restarted duplicate_node_rank out_of_step two_jobs_one_id signal_store_gone
        hosts_odd_bytes hang_without_gdb staging_cache_swap
        process_limit oom_kill worker_limits)
if ((smoke)); then
  faults=(worker_exit agent_sigkill setsid_daemons_end foreign_program missing_secret)
fi
if [[ -n $only ]]; then IFS=, read -ra faults <<<"$only"; fi
cluster=scripts/netns-cluster.sh
netns_ok=1
if ! "$cluster" check; then
  netns_ok=0
  for i in "${!faults[@]}"; do [[ ${faults[$i]} == node_cut_* ]] && unset "faults[$i]"; done
  faults=("${faults[@]}")
fi

# ---- the matrix -----------------------------------------------------------------------------

rows=()
failed=0
# bash reports jobs that a fault killed ("Killed"): that is the fault working, not news.
exec 3>&2 2>>"$work/shell.log"
for f in "${faults[@]}"; do
  declare -F "fault_$f" >/dev/null || { echo "faults.sh: no fault named '$f'" >&3; exit 2; }
  ok=0 left_total=0 detects=() losts=() note_text=""
  for ((r = 1; r <= runs; r++)); do
    run_id="$$-$f-$r"
    dir=$work/$f-$r; mkdir -p "$dir"
    met=0 detect=- lost=- note=""
    "fault_$f" || true
    # Whatever the job left: give the guardian its moment (bounded), then count and clean up.
    for ((i = 0; i < 40; i++)); do [[ -z $(marked "$run_id") ]] && break; sleep 0.05; done
    left=$(marked "$run_id" | wc -l)
    kill_marked "$run_id"
    ((met)) && ok=$((ok + 1))
    left_total=$((left_total + left))
    [[ $detect != - ]] && detects+=("$detect")
    [[ $lost != - ]] && losts+=("$lost")
    [[ -n $note ]] && note_text=$note
    ((met)) || { echo "  $f run $r: not met; its output:" >&3; tail -n 5 "$dir"/*.out >&3 || true; }
  done
  median=-
  if ((${#detects[@]})); then
    median=$(printf '%s\n' "${detects[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    median="$median ms"
  fi
  lostv=-
  ((${#losts[@]})) && lostv=$(printf '%s\n' "${losts[@]}" | sort -n | tail -1)
  expect_var=expect_$f
  printf '%-28s %d/%d met, %d left behind, detect %s, lost %s\n' "$f" "$ok" "$runs" "$left_total" "$median" "$lostv"
  rows+=("| $f | $runs | ${!expect_var} | $ok/$runs | $left_total | $lostv | $median | $note_text |")
  ((ok == runs)) || failed=1
done

exec 2>&3
if ((smoke)); then
  ((failed == 0)) || { echo "faults.sh: a fault's expected outcome was not met" >&2; exit 1; }
  echo "faults.sh: smoke run: every expected outcome met"
  exit 0
fi

# The fuzzing record below the matrix is written by hand (a long libFuzzer run): kept as it is.
kept=
[[ -f $output ]] && kept=$(sed -n '/^## Fuzzing/,$p' "$output")
{
  echo "# Reliability: the fault matrix"
  echo
  echo "Written by \`scripts/faults.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -r));"
  echo "$runs runs per fault, real ddprun agents on 127.0.0.1 (node_cut_*: two network namespaces) with the project's fake worker."
  echo "\"Left behind\": processes of the run (found by an environment marker every process of"
  echo "the run inherits) still alive after ddprun exited, over all runs. \"Detect\": the median"
  echo "time from the fault to ddprun acting on it (its exit, or the survivor's round ending)."
  echo
  echo "| fault | runs | expected | met | left behind | lines lost | detect | note |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Not in this matrix here:"
  # The probe runs in a namespace of its own: the machine's own links are never touched.
  probe="ddp-netem-$$"
  if ((netns_ok)) && ip netns add "$probe" 2>/dev/null &&
     ip netns exec "$probe" tc qdisc add dev lo root netem loss 1% 2>/dev/null; then
    echo "- packet loss: \`tc netem\` works here but no case uses it yet."
  else
    echo "- packet loss on a node's link: \`tc netem\` is not available on this machine (the"
    echo "  kernel has no sch_netem), so this fault was not injected."
  fi
  ip netns del "$probe" 2>/dev/null || true
  if ((!netns_ok)); then
    echo "- a node cut off the network and healed (node_cut_short, node_cut_long): network"
    echo "  namespaces cannot be made here (needs root and iproute2), so they were not run."
  fi
  if [[ -n $kept ]]; then echo; printf '%s\n' "$kept"; fi
} >"$output"
echo "faults.sh: wrote $output"
exit $failed
