#!/usr/bin/env bash
# bench/hosts_launch.sh: the time from the command to all workers running with
# `ddprun --hosts`, against Open MPI's mpirun on the same hosts.
#
#   ssh hosts        N = 2, 8, 32: network namespaces (scripts/netns-cluster.sh), node 1 runs the
#                    command, nodes 2..N+1 run a real sshd; one worker per host. Per round, in
#                    this order: one `ssh host true` alone (the floor), ddprun and mpirun (tree
#                    spawn, its default) with /bin/true, mpirun without tree spawn, then both
#                    with a worker that writes its start time to a file per rank.
#   simulated hosts  N = 256, 1024: testing/local_ssh.sh as --ssh-command (every agent runs
#                    on this machine), /bin/true; the time, and the peak number of processes. Per
#                    round, flat fan-out (--tree-threshold above N) and the tree (--tree-threshold=1)
#                    one after the other. --sim-delay S puts S seconds of waiting before every
#                    simulated login (bench/delayed_ssh.sh): the part of a real login that is
#                    network round trips and the remote host's CPU, which costs the command's
#                    host nothing, so the fan-out's depth shows apart from this machine's CPU.
#
#   bench/hosts_launch.sh [--ssh-hosts 2,8,32|none] [--simulated 256,1024|none] [--sim-delay 0]
#                         [--runs 5] [--warmup 1] [--ddprun PATH] [--ddprun-flag FLAG]...
#                         [--mpirun PATH|none] [--keep-results DIR] [--charts DIR]
#   --ddprun-flag adds FLAG to every ddprun command.
#   --charts DIR draws the medians with gnuplot (Debian's gnuplot-nox): DIR/hosts-ssh.svg (time
#   to all workers running over the number of ssh hosts, each launcher and the login alone) and
#   DIR/hosts-simulated.svg (all hosts ready, flat fan-out and tree), for docs/benchmarks.md.
#
# Every series is the median of --runs recorded rounds after --warmup rounds, with min and max;
# the rounds interleave the launchers. The tables (Markdown) go to stdout, progress to stderr.
# Needs root for the namespaces and OpenSSH's sshd (the ssh part is skipped without them).
# Timings need a quiet machine: hold the build lock, e.g.
#   flock /tmp/ddprun-build.lock bench/hosts_launch.sh
# 10-15 minutes on 2 cores with the defaults, more on a busy machine.
set -euo pipefail
export LC_ALL=C  # $EPOCHREALTIME with a decimal point
here=$(cd "$(dirname "$0")/.." && pwd)
self="$here/bench/hosts_launch.sh"
cluster="$here/scripts/netns-cluster.sh"
limit=180  # seconds: the bound on one launch (ddprun's own --connect-timeout is 30 s)

# run_bounded LIMIT OUT ERR CMD...: CMD with its output in files, killed (its process group, by
# timeout) after LIMIT seconds; in the background, so that a signal to this script is handled at
# once. Its exit status in $rc.
current="" sampler=""
run_bounded() {
  local lim=$1 out=$2 err=$3
  shift 3
  timeout -k 5 "$lim" "$@" </dev/null >"$out" 2>"$err" &
  current=$!
  rc=0
  wait "$current" || rc=$?
  current=""
}
stop_own() {  # end what this script started and is still waiting for (runs under set -e)
  local pid
  for pid in $current $sampler; do kill -TERM "$pid" 2>/dev/null || true; done
  # Both end within seconds (timeout passes the TERM on, then sends SIGKILL after -k 5), and
  # must have ended before their directory is removed.
  for pid in $sampler $current; do wait "$pid" 2>/dev/null || true; done
  current="" sampler=""
}
trap 'stop_own; exit 130' INT TERM

# CPU time used on the whole machine (both cores, every process) so far, in seconds.
hz=$(getconf CLK_TCK)
cpu_busy() { awk -v hz="$hz" '/^cpu / {printf "%.2f", ($2 + $3 + $4 + $7 + $8) / hz}' /proc/stat; }
cpu_since() { awk -v a="$1" -v b="$(cpu_busy)" 'BEGIN{printf "%.2f", b - a}'; }
# CPU time the hypervisor gave to others while this VM had work (steal), both cores, seconds.
cpu_steal() { awk -v hz="$hz" '/^cpu / {printf "%.2f", $9 / hz}' /proc/stat; }
steal_since() { awk -v a="$1" -v b="$(cpu_steal)" 'BEGIN{printf "%.2f", b - a}'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.4f", b - a}'; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$work/samples.tsv"; }  # size series value
failed_run() {  # failed_run SIZE SERIES ERRFILE WHY
  printf '%s\t%s\t%s\n' "$1" "$2" "$4" >>"$work/failures.tsv"
  mkdir -p "$work/failed"
  cp "$3" "$work/failed/$2-$1-$(date +%s%N).err" 2>/dev/null || true
  echo "   $2, $1 hosts: $4" >&2
}
# The time ddprun's command line logged for "all N hosts are ready (Xs after the start)".
ready_time() { sed -n 's/.*hosts are ready (\([0-9.]*\)s after the start).*/\1/p' "$1" | head -n 1; }
# The latest start time that the stamp workers wrote, minus START; empty unless COUNT wrote one.
last_start() {  # last_start DIR COUNT START
  local n
  n=$(find "$1" -type f | wc -l)
  ((n == $2)) || return 0
  cat "$1"/* | awk -v s="$3" 'BEGIN{m=0} {if ($1 > m) m = $1} END{printf "%.4f", m - s}'
}

# --- in node 1 of the cluster: the ssh rounds ------------------------------------------------
if [[ ${1:-} == --in-node ]]; then
  ddprun_flags=()
  [[ -n $ddprun_flags_text ]] && mapfile -t ddprun_flags <<<"$ddprun_flags_text"
  ssh_cmd="ssh -F $sshdir/ssh_config"
  IFS=, read -ra sizes <<<"$ssh_sizes"
  for n in "${sizes[@]}"; do
    hosts=""  # ADDR:1,... serves both launchers
    for i in $(seq 2 $((n + 1))); do
      v=NODE_${i}_ADDR
      hosts+="${!v}:1,"
    done
    hosts=${hosts%,}
    # shellcheck disable=SC2054  # the commas are inside values (btl self,tcp)
    mpirun_args=(--allow-run-as-root --oversubscribe -H "$hosts" -np "$n"
                 --mca plm_rsh_agent "$ssh_cmd" --mca btl self,tcp)
    echo "== $n ssh hosts: $((warmup + runs)) rounds" >&2
    t_size=$SECONDS
    for round in $(seq 1 $((warmup + runs))); do
      keep=$((round > warmup))
      o=$work/run
      # The floor: one login to the first host, nothing else running.
      c0=$(cpu_busy) s0=$(cpu_steal) t0=$EPOCHREALTIME
      run_bounded 30 "$o.out" "$o.err" ssh -F "$sshdir/ssh_config" "$NODE_2_ADDR" true
      t=$(since "$t0") c=$(cpu_since "$c0") st=$(steal_since "$s0")
      if ((rc != 0)); then
        failed_run "$n" ssh_floor "$o.err" "exit code $rc"
      elif ((keep)); then
        record "$n" ssh_floor "$t"
        record "$n" ssh_floor.cpu "$c"
        record "$n" ssh_floor.steal "$st"
      fi

      for subject in ddprun mpirun mpirun_flat ddprun_stamp mpirun_stamp; do
        [[ $subject == mpirun* && $mpirun == none ]] && continue
        stamps=$work/stamps
        rm -rf "$stamps" && mkdir -p "$stamps"
        worker=(/bin/true)
        [[ $subject == *_stamp ]] && worker=("$work/stamp.sh" "$stamps")
        case $subject in
          ddprun*) cmd=("$ddprun" --hosts="$hosts" --ssh-command="$ssh_cmd" --nproc-per-node=1
                        "${ddprun_flags[@]}" --no-python "${worker[@]}") ;;
          mpirun_flat) cmd=("$mpirun" "${mpirun_args[@]}" --mca plm_rsh_no_tree_spawn 1
                            "${worker[@]}") ;;
          mpirun*) cmd=("$mpirun" "${mpirun_args[@]}" "${worker[@]}") ;;
        esac
        c0=$(cpu_busy) s0=$(cpu_steal) t0=$EPOCHREALTIME
        run_bounded "$limit" "$o.out" "$o.err" "${cmd[@]}"
        t=$(since "$t0") c=$(cpu_since "$c0") st=$(steal_since "$s0")
        if ((rc != 0)); then
          failed_run "$n" "$subject" "$o.err" "exit code $rc after $t s ($st s of CPU stolen by the hypervisor)"
          continue
        fi
        ((keep)) || continue
        record "$n" "$subject.wall" "$t"
        record "$n" "$subject.cpu" "$c"
        record "$n" "$subject.steal" "$st"
        if [[ $subject == ddprun* ]]; then
          r=$(ready_time "$o.err")
          if [[ -n $r ]]; then record "$n" "$subject.ready" "$r"; fi
        fi
        if [[ $subject == *_stamp ]]; then
          l=$(last_start "$stamps" "$n" "$t0")
          if [[ -n $l ]]; then record "$n" "$subject.last_start" "$l"
          else failed_run "$n" "$subject" "$o.err" "not every worker wrote its start time"; fi
        fi
      done
    done
    echo "   $((SECONDS - t_size)) s" >&2
  done
  exit 0
fi

# --- inside `netns-cluster.sh run`: sshd on nodes 2..N+1, then the rounds in node 1 -----------
if [[ ${1:-} == --in-cluster ]]; then
  t0=$EPOCHREALTIME
  "$cluster" sshd "$NETNS_TAG" "$sshdir" $(seq 2 "$NETNS_NODES")
  echo "== sshd accepts logins on nodes 2..$NETNS_NODES ($(since "$t0") s to start them)" >&2
  "$cluster" exec "$NETNS_TAG" 1 "$self" --in-node
  exit
fi

# --- the command line --------------------------------------------------------------------------
ssh_sizes=2,8,32
sim_sizes=256,1024
sim_delay=0
runs=5
warmup=1
ddprun=${BUILD_DIR:-$here/build}/launcher/ddprun
mpirun=/usr/bin/mpirun
keep_results=
charts=
ddprun_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --ssh-hosts) ssh_sizes=$2; shift ;;
    --ssh-hosts=*) ssh_sizes=${1#*=} ;;
    --simulated) sim_sizes=$2; shift ;;
    --simulated=*) sim_sizes=${1#*=} ;;
    --sim-delay) sim_delay=$2; shift ;;
    --sim-delay=*) sim_delay=${1#*=} ;;
    --runs) runs=$2; shift ;;
    --runs=*) runs=${1#*=} ;;
    --warmup) warmup=$2; shift ;;
    --warmup=*) warmup=${1#*=} ;;
    --ddprun) ddprun=$2; shift ;;
    --ddprun=*) ddprun=${1#*=} ;;
    --mpirun) mpirun=$2; shift ;;
    --mpirun=*) mpirun=${1#*=} ;;
    --keep-results) keep_results=$2; shift ;;
    --keep-results=*) keep_results=${1#*=} ;;
    --charts) charts=$2; shift ;;
    --charts=*) charts=${1#*=} ;;
    --ddprun-flag) ddprun_flags+=("$2"); shift ;;
    --ddprun-flag=*) ddprun_flags+=("${1#*=}") ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "hosts_launch.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $ssh_sizes == none ]] && ssh_sizes=""
[[ $sim_sizes == none ]] && sim_sizes=""
ddprun=$(realpath "$ddprun")
[[ -x $ddprun ]] || { echo "hosts_launch.sh: $ddprun is missing; build the ddprun target" >&2; exit 2; }
if [[ $mpirun != none && ! -x $mpirun ]]; then
  echo "hosts_launch.sh: $mpirun is missing (Debian: openmpi-bin); not compared" >&2
  mpirun=none
fi
if [[ -n $ssh_sizes ]] && ! { "$cluster" check && "$cluster" check-sshd; }; then
  echo "hosts_launch.sh: no network namespaces or no OpenSSH server here (needs root, iproute2," \
    "openssh-server): the ssh part is skipped" >&2
  ssh_sizes=""
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-hosts-bench.XXXXXX")
chmod 755 "$work"  # the workers on the hosts write into it
trap 'stop_own; rm -rf "$work"' EXIT
: >"$work/samples.tsv"
: >"$work/failures.tsv"
printf '%s\n' '#!/bin/bash' \
  '# Writes the time this worker started (realtime, seconds) to DIR/RANK and exits.' \
  'printf "%s\n" "$EPOCHREALTIME" > "$1/${RANK:-$OMPI_COMM_WORLD_RANK}"' >"$work/stamp.sh"
chmod 755 "$work/stamp.sh"
start=$SECONDS
steal_at_start=$(cpu_steal)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $ddprun == "$here"/* ]]; then
  built_from="git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git -C "$here" diff --quiet HEAD -- 2>/dev/null || built_from+=" (with uncommitted changes)"
else
  built_from="$ddprun"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [[ -n $ssh_sizes ]]; then
  max=$(tr , '\n' <<<"$ssh_sizes" | sort -n | tail -n 1)
  # The flags cross into the cluster's processes as one word each line.
  ddprun_flags_text=$(printf '%s\n' "${ddprun_flags[@]}")
  export work ddprun mpirun ssh_sizes runs warmup limit ddprun_flags_text sshdir="$work/ssh"
  # Torn down by `run` even when this fails or is interrupted.
  "$cluster" run "hl$$" $((max + 1)) "$self" --in-cluster ||
    echo "hosts_launch.sh: the ssh part failed (exit code $?)" >&2
fi

# --- simulated hosts: every agent on this machine ---------------------------------------------
count_processes() { local p=(/proc/[0-9]*); echo "${#p[@]}"; }
if [[ -n $sim_sizes ]]; then
  ssh_sim=("$here/testing/local_ssh.sh")
  if [[ $sim_delay != 0 ]]; then ssh_sim=("$here/bench/delayed_ssh.sh" "$sim_delay"); fi
  IFS=, read -ra sizes <<<"$sim_sizes"
  for n in "${sizes[@]}"; do
    hosts=$(seq -f 'h%g' 1 "$n" | paste -sd,)
    echo "== $n simulated hosts: $((warmup + runs)) rounds, flat and tree" >&2
    t_size=$SECONDS
    for round in $(seq 1 $((warmup + runs))); do
      for shape in flat tree; do
        o=$work/run
        threshold=1
        [[ $shape == flat ]] && threshold=$((n + 1))
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        base=$(count_processes)
        # The peak number of processes, looked at every 50 ms (about 1 ms of CPU each time).
        ( peak=0
          trap 'echo "$peak" >"$work/peak"; exit 0' TERM
          while :; do
            p=(/proc/[0-9]*)
            ((${#p[@]} > peak)) && peak=${#p[@]}
            sleep 0.05
          done ) &
        sampler=$!
        c0=$(cpu_busy) s0=$(cpu_steal) t0=$EPOCHREALTIME
        run_bounded "$limit" "$o.out" "$o.err" "$ddprun" --hosts="$hosts" \
          --ssh-command="${ssh_sim[*]}" --master-addr=127.0.0.1 \
          --master-port="$port" --connect-timeout=120 --nproc-per-node=1 \
          --tree-threshold="$threshold" "${ddprun_flags[@]}" --no-python /bin/true
        t=$(since "$t0") c=$(cpu_since "$c0") st=$(steal_since "$s0")
        kill -TERM "$sampler"
        wait "$sampler" || true
        sampler=""
        if ((rc != 0)); then
          failed_run "$n" "sim_$shape" "$o.err" "exit code $rc after $t s ($st s of CPU stolen by the hypervisor)"
          continue
        fi
        ((round > warmup)) || continue
        record "$n" "$shape.wall" "$t"
        record "$n" "$shape.cpu" "$c"
        record "$n" "$shape.steal" "$st"
        r=$(ready_time "$o.err")
        if [[ -n $r ]]; then record "$n" "$shape.ready" "$r"; fi
        record "$n" "$shape.procs" "$(($(cat "$work/peak") - base))"
      done
    done
    echo "   $((SECONDS - t_size)) s" >&2
  done
fi

# --- the tables -------------------------------------------------------------------------------
# series_stat SIZE SERIES FIELD: median | min | max | count of the recorded values ("" if none)
series_stat() {
  awk -F'\t' -v n="$1" -v s="$2" '$1 == n && $2 == s {print $3}' "$work/samples.tsv" | sort -g |
    awk -v f="$3" '{v[NR] = $1} END {
      if (NR == 0) exit
      med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      if (f == "median") print med; else if (f == "min") print v[1]; else if (f == "max") print v[NR]
      else if (f == "count") print NR }'
}
fmt() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN{printf (v >= 10 ? "%.1f" : "%.2f"), v}' || echo "-"; }
cell() {  # median (min-max), in seconds
  local m
  m=$(series_stat "$1" "$2" median)
  [[ -n $m ]] || { echo "-"; return; }
  echo "$(fmt "$m") ($(fmt "$(series_stat "$1" "$2" min)")-$(fmt "$(series_stat "$1" "$2" max)"))"
}
ratio() {  # median of B / median of A
  local a b
  a=$(series_stat "$1" "$2" median) b=$(series_stat "$1" "$3" median)
  [[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", b / a}' || echo "-"
}

echo
echo "Taken $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average at start $load_at_start, at end $(cut -d' ' -f1-3 /proc/loadavg); ddprun $("$ddprun" --version | awk '{print $2}') ($built_from); $([[ $mpirun == none ]] && echo "no mpirun" || "$mpirun" --version | head -n 1); $(ssh -V 2>&1). Medians of $runs rounds after $warmup warm-up round(s), min-max in brackets, seconds; $((SECONDS - start)) s in all, of which the hypervisor took $(awk -v s="$(steal_since "$steal_at_start")" -v t="$((SECONDS - start))" -v c="$(nproc)" 'BEGIN{printf "%.0f%%", (t > 0 ? 100 * s / (t * c) : 0)}') of the CPU time (steal)."
if [[ -n $ssh_sizes ]]; then
  echo
  echo "| hosts | ssh login alone | ddprun | mpirun | mpirun / ddprun | mpirun, no tree spawn |"
  echo "|--:|--:|--:|--:|--:|--:|"
  IFS=, read -ra sizes <<<"$ssh_sizes"
  for n in "${sizes[@]}"; do
    echo "| $n | $(cell "$n" ssh_floor) | $(cell "$n" ddprun.wall) | $(cell "$n" mpirun.wall) | $(ratio "$n" ddprun.wall mpirun.wall) | $(cell "$n" mpirun_flat.wall) |"
  done
  echo
  echo "| hosts | ddprun: all hosts ready | ddprun: last worker started | mpirun: last worker started | mpirun / ddprun | ddprun, end to end | mpirun, end to end |"
  echo "|--:|--:|--:|--:|--:|--:|--:|"
  for n in "${sizes[@]}"; do
    echo "| $n | $(cell "$n" ddprun_stamp.ready) | $(cell "$n" ddprun_stamp.last_start) | $(cell "$n" mpirun_stamp.last_start) | $(ratio "$n" ddprun_stamp.last_start mpirun_stamp.last_start) | $(cell "$n" ddprun_stamp.wall) | $(cell "$n" mpirun_stamp.wall) |"
  done
  echo
  echo "CPU time used on the machine during a launch (both cores, every process: the command, ssh, sshd, the shells, the agents or orted, the workers):"
  echo
  echo "| hosts | ssh login alone | ddprun | mpirun | mpirun, no tree spawn | ddprun per host | ddprun, CPU time / wall time | stolen during ddprun's runs |"
  echo "|--:|--:|--:|--:|--:|--:|--:|--:|"
  for n in "${sizes[@]}"; do
    per=$(awk -v c="$(series_stat "$n" ddprun.cpu median)" -v n="$n" 'BEGIN{if (c == "") print "-"; else printf "%.3f", c / n}')
    use=$(awk -v c="$(series_stat "$n" ddprun.cpu median)" -v w="$(series_stat "$n" ddprun.wall median)" 'BEGIN{if (c == "" || w == "") print "-"; else printf "%.2f", c / w}')
    echo "| $n | $(cell "$n" ssh_floor.cpu) | $(cell "$n" ddprun.cpu) | $(cell "$n" mpirun.cpu) | $(cell "$n" mpirun_flat.cpu) | $per | $use | $(cell "$n" ddprun.steal) |"
  done
fi
if [[ -n $sim_sizes ]]; then
  echo
  echo "Simulated hosts, $(if [[ $sim_delay == 0 ]]; then echo "no delay in the stand-in"; else echo "the stand-in waiting ${sim_delay} s before every login"; fi):"
  echo
  echo "| simulated hosts | flat: end to end | flat: all hosts ready | tree: end to end | tree: all hosts ready | flat / tree, ready | CPU time used: flat; tree | peak processes: flat; tree |"
  echo "|--:|--:|--:|--:|--:|--:|--:|--:|"
  IFS=, read -ra sizes <<<"$sim_sizes"
  for n in "${sizes[@]}"; do
    echo "| $n | $(cell "$n" flat.wall) | $(cell "$n" flat.ready) | $(cell "$n" tree.wall) | $(cell "$n" tree.ready) | $(ratio "$n" tree.ready flat.ready) | $(fmt "$(series_stat "$n" flat.cpu median)"); $(fmt "$(series_stat "$n" tree.cpu median)") | $(series_stat "$n" flat.procs median); $(series_stat "$n" tree.procs median) |"
  done
fi
if [[ -s $work/failures.tsv ]]; then
  echo
  echo "Failed runs (not in the figures):"
  awk -F'\t' '{printf "- %s hosts, %s: %s\n", $1, $2, $3}' "$work/failures.tsv"
fi
# chart NAME TITLE XLABEL SIZES SERIES:LABEL...: one line per series, its median at each size.
chart() {
  local name=$1 title=$2 xlabel=$3 sizes=$4 plots=() spec series label data n m
  shift 4
  for spec in "$@"; do
    series=${spec%%:*} label=${spec#*:}
    data="$charts/$name-$series.dat"
    : >"$data"
    IFS=, read -ra ns <<<"$sizes"
    for n in "${ns[@]}"; do
      m=$(series_stat "$n" "$series" median)
      [[ -n $m ]] && echo "$n $m" >>"$data"
    done
    (($(wc -l <"$data") >= 2)) && plots+=("\"$data\" using 1:2 with linespoints linewidth 2 pointtype 7 title \"$label\"")
  done
  ((${#plots[@]})) || return 0
  local IFS=,
  gnuplot <<GP
set terminal svg size 720,420 dynamic noenhanced font 'sans,12' background '#ffffff'
set output "$charts/$name.svg"
set title "$title"
set xlabel "$xlabel"
set ylabel "seconds, median of the rounds"
set logscale x 2
set grid
set key top left
set yrange [0:*]
plot ${plots[*]}
GP
  rm -f "$charts/$name"-*.dat
  echo "chart: $charts/$name.svg" >&2
}
if [[ -n $charts ]]; then
  if ! command -v gnuplot >/dev/null; then
    echo "hosts_launch.sh: no charts (gnuplot is not installed; scripts/install-deps.sh --tests installs gnuplot-nox)" >&2
  else
    mkdir -p "$charts"
    [[ -n $ssh_sizes ]] && chart hosts-ssh "Launch across hosts over ssh (a real sshd per host): the command with /bin/true, start to end" \
      hosts "$ssh_sizes" ssh_floor:"one ssh login alone (the floor)" ddprun.wall:ddprun \
      mpirun.wall:"mpirun (tree spawn)" mpirun_flat.wall:"mpirun, no tree spawn"
    [[ -n $sim_sizes ]] && chart hosts-simulated "Simulated hosts (every agent on this machine): command to all hosts ready" \
      "simulated hosts" "$sim_sizes" flat.ready:"ddprun, flat fan-out" tree.ready:"ddprun, tree fan-out"
  fi
fi
if [[ -n $keep_results ]]; then
  mkdir -p "$keep_results"
  cp -r "$work/samples.tsv" "$work/failures.tsv" "$keep_results/"
  [[ -d $work/failed ]] && cp -r "$work/failed" "$keep_results/"
fi
exit 0
