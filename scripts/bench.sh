#!/usr/bin/env bash
# The benchmark suite: ddprun side by side with torchrun (Debian's python3-torch
# 1.13), c10d's TCPStore and the Python DDP reference, on this machine, in one run. Writes
# docs/benchmarks.md (or --output): the machine, the targets met or missed, a table per figure.
#
#   scripts/bench.sh                 the full suite (every series: median of 5 after 1 warm-up,
#                                    figures 10 and 12 of 3, figure 13 of 20, its ddp_resnet
#                                    rows of 5, figure 14's 720,000 lines once, figure 15 of 3
#                                    and 20; about 70 minutes on 2 cores)
#   scripts/bench.sh --quick         smoke mode: small sizes, one run each, well under a minute
#   options: --output FILE  --build DIR (default $BUILD_DIR or build)  --no-build
#            --figures 1,2,...  (only these)  --budget SECONDS (default 1200: optional parts are
#            skipped when they would not fit; default 2100)  --keep-results DIR (keep the raw series and the
#            machine description there)  --report-only DIR (measure nothing: write the report
#            from a kept DIR)
#
# Timings need a quiet machine: run it while no compile runs, e.g.
#   flock /tmp/ddprun-build.lock scripts/bench.sh
# It is not part of the test run; ctest runs only `--quick` as a smoke test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

quick=0
output=docs/benchmarks.md
build=${BUILD_DIR:-build}
do_build=1
figures=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
budget=2100
python=${PYTHON:-/usr/bin/python3}
keep_results=
report_only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --output) output=$2; shift ;;
    --output=*) output=${1#*=} ;;
    --build) build=$2; shift ;;
    --build=*) build=${1#*=} ;;
    --no-build) do_build=0 ;;
    --figures) figures=$2; shift ;;
    --figures=*) figures=${1#*=} ;;
    --budget) budget=$2; shift ;;
    --budget=*) budget=${1#*=} ;;
    --keep-results) keep_results=$2; shift ;;
    --keep-results=*) keep_results=${1#*=} ;;
    --report-only) report_only=$2; shift ;;
    --report-only=*) report_only=${1#*=} ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $output = /* ]] || output=$root/$output
[[ $build = /* ]] || build=$root/$build

# What the binaries are built from: the commit, and whether the working tree differs from it
# (taken before the build; the tree may change while the suite runs).
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || git_rev="$git_rev (with uncommitted changes)"
if [[ $do_build = 1 ]]; then
  [[ -f $build/CMakeCache.txt ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target bench_programs >/dev/null
fi
b=$build/bench
ddprun=$build/launcher/ddprun
store=$build/store/ddprun-store
for f in "$ddprun" "$store" "$b/bench_worker" "$b/spawn_floor" "$b/bench_launch" "$b/bench_report"; do
  [[ -x $f ]] || { echo "bench.sh: $f is missing; build the bench_programs target" >&2; exit 2; }
done

# The report from a directory holding results.jsonl, machine.tsv and report.args, and with
# gnuplot (Debian's gnuplot-nox) the scaling figures as SVG charts in charts/ next to it,
# linked from the report.
report() {
  local charts=() dir
  dir="$(dirname "$output")/charts"
  mkdir -p "$(dirname "$output")"
  if command -v gnuplot >/dev/null; then
    # Only this suite's own charts are redrawn: others there (bench/hosts_launch.sh's) stay.
    mkdir -p "$dir" && rm -f "$dir"/figure*.svg "$dir"/figure*.gp "$dir"/figure*.dat
    charts=(--charts "$dir")
  else
    echo "== charts: not drawn (gnuplot is not installed; scripts/install-deps.sh --tests installs gnuplot-nox)"
  fi
  # shellcheck disable=SC2046  # report.args holds plain words
  "$b/bench_report" --results "$1/results.jsonl" --machine "$1/machine.tsv" --output "$output" \
    "${charts[@]}" $(cat "$1/report.args")
  if ((${#charts[@]})); then
    local gp
    for gp in "$dir"/*.gp; do
      [[ -e $gp ]] || continue
      gnuplot "$gp"
      echo "== chart: ${gp%.gp}.svg"
    done
    rm -f "$dir"/*.gp "$dir"/*.dat
  fi
}
if [[ -n $report_only ]]; then
  report "$report_only"
  echo "== wrote $output from $report_only"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
: > "$results"
start=$SECONDS
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $quick = 0 ]] && awk '{exit !($1 > 1.0)}' /proc/loadavg; then
  echo "bench.sh: warning: load average $load_at_start; something else runs, timings will suffer" >&2
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [[ $quick = 1 ]]; then
  runs=(--runs 1 --warmup 0); report_runs=(--runs 1 --warmup 0)
  torchrun_launch=fast; torchrun_memory=fast; torchrun_first_step=none
  store_args=(--clients 1 16 --seconds 0.1 --diagnostic); rdzv_args=(--agents 64 256)
  etcd_rdzv_args=(--agents 64 256)
  worker_sleep=0.5; keepalive=(--interval 0.3 --attempts 3 --last-call 0.1)
  recovery_nodes=(2 16); recovery_torchrun_nodes=(); recovery_death_nodes=(2)
  recovery_runs=(--runs 1 --warmup 0); first_step_runs=(--runs 1 --warmup 0 --ddp-resnet-runs 1)
  console_args=(--quick)
else
  runs=(--runs 5 --warmup 1); report_runs=(--runs 5 --warmup 1)
  torchrun_launch=default,fast; torchrun_memory=fast; torchrun_first_step=default,fast
  store_args=(--clients 1 16 64 --seconds 1 --diagnostic)
  rdzv_args=(--agents 256 1024 4096 16384); etcd_rdzv_args=(--agents 256 1024 4096)
  worker_sleep=2; keepalive=(--interval 1 --attempts 3 --last-call 0.1)
  recovery_nodes=(2 8 16 128 256 512 1024); recovery_torchrun_nodes=(2 8 16)
  recovery_death_nodes=(16 128 1024); recovery_runs=(--runs 3 --warmup 1)
  # The median and the worst of 20, as Figure 13's targets ask; ddp_resnet's runs last seconds.
  first_step_runs=(--runs 20 --warmup 1 --ddp-resnet-runs 5)
  # 1,024 ranks, and 720,000 lines over 3 minutes once with and once without folding.
  console_args=(--ranks 1024 --distinct 100 --stream-lines 90000 --stream-runs 1)
fi

torch_version=
if "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  torch_version=$("$python" -c 'import torch; print(torch.__version__)')
else
  echo "bench.sh: $python has no torch: torchrun is not compared" >&2
  torchrun_launch=none; torchrun_memory=none; torchrun_first_step=none
fi

# A series that says why it was not measured.
not_measured() {  # figure, case, metric, subject, unit, lower_is_better, note, target
  printf '{"figure":%s,"case":"%s","metric":"%s","subject":"%s","unit":"%s","lower_is_better":%s,"samples":[],"note":"%s","measured":false,"target_text":"%s"}\n' \
    "$@" >> "$results"
}

status=0
want() { [[ ,$figures, == *,$1,* ]]; }
step() {  # name, command...
  local name=$1 t0=$SECONDS; shift
  echo "== $name"
  if "$@"; then
    echo "   $((SECONDS - t0)) s"
  else
    echo "bench.sh: $name failed" >&2
    status=1
  fi
}
launch=("$b/bench_launch" --ddprun "$ddprun" --python "$python" --worker "$b/bench_worker"
        --results "$results" "${runs[@]}")

# Open MPI's mpirun (Debian's openmpi-bin) is figure 1's peer when it is installed.
mpirun_arg=()
command -v mpirun >/dev/null && mpirun_arg=(--mpirun "$(command -v mpirun)")
want 1 && step "figure 1: launch overhead" "${launch[@]}" --figure launch --torchrun "$torchrun_launch" \
  --floor "$b/spawn_floor" "${mpirun_arg[@]}"
want 2 && step "figure 2: restart latency" "${launch[@]}" --figure restart --torchrun "$torchrun_launch"
want 3 && step "figure 3: two-node start" "${launch[@]}" --figure two-node --torchrun "$torchrun_launch"
want 4 && step "figure 4: agent memory" "$b/bench_memory" --ddprun "$ddprun" --python "$python" \
  --worker "$b/bench_worker" --torchrun "$torchrun_memory" --sleep "$worker_sleep" \
  --results "$results" "${runs[@]}"
if want 5; then
  store_bench=$b/bench_store_c10d
  if [[ ! -x $store_bench ]]; then
    store_bench=$b/bench_store
    not_measured 5 "64 clients" throughput "c10d TCPStore (libtorch 1.13)" ops/s false \
      "not measured: libtorch not found at build time, bench_store_c10d not built" ""
  fi
  step "figure 5: store throughput" "$store_bench" --store "$store" "${store_args[@]}" \
    --results "$results" "${runs[@]}"
fi
# The etcd backend's figures (6 and 7 over a 3-member etcd on loopback) need Debian's etcd.
have_etcd=0
command -v etcd >/dev/null && have_etcd=1
etcd_missing="not measured: etcd is not installed (scripts/install-deps.sh --tests installs etcd-server)"
if want 6; then
  step "figure 6: rendezvous at scale" "$b/bench_rendezvous" --store "$store" \
    "${rdzv_args[@]}" --results "$results" "${runs[@]}"
  if [[ $have_etcd = 1 ]]; then
    step "figure 6: rendezvous at scale, over etcd" "$b/bench_rendezvous" --etcd-members 3 \
      "${etcd_rdzv_args[@]}" --results "$results" "${runs[@]}"
  else
    not_measured 6 "256 agents" "release to every agent holding its rank" \
      "ddprun over etcd (3 members)" s true "$etcd_missing" ""
  fi
fi
if want 7; then
  step "figure 7: node-death detection" "$b/bench_node_death" --ddprun "$ddprun" \
    --worker "$b/bench_worker" "${keepalive[@]}" --results "$results" "${runs[@]}"
  if [[ $have_etcd = 1 ]]; then
    step "figure 7: node-death detection, over etcd (leases)" "$b/bench_node_death" \
      --etcd-members 3 --ddprun "$ddprun" --worker "$b/bench_worker" "${keepalive[@]}" \
      --results "$results" "${runs[@]}"
  fi
fi
if want 8; then
  if [[ $quick = 1 ]]; then
    not_measured 8 "ResNet-18 CPU" "training throughput" "ddp_resnet (libtorch C++)" samples/s \
      false "not run in --quick" ">= 1.0x the Python reference"
  else
    step "figure 8: training throughput, CPU" "$b/bench_train" --ddprun "$ddprun" \
      --ddp-resnet "${DDP_RESNET:-$build/workers/ddp_resnet}" \
      --reference "$root/scripts/reference_ddp.py" --python "$python" --threads 1 \
      --steps 10 --epochs 2 --results "$results" "${runs[@]}"
  fi
fi
if want 9; then
  why="not measured here: no GPU (scripts/gpu_bench.sh on a GPU machine; see the analysis, Figure 9)"
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    why="not measured by this suite: run scripts/gpu_bench.sh (see the analysis, Figure 9)"
  fi
  for arch in ResNet-50 ResNet-152; do
    not_measured 9 "$arch, bf16, channels_last, NCCL" "training throughput" \
      "ddp_resnet (libtorch C++)" images/s false "$why" ">= 1.1x the Python reference"
  done
fi
if want 10; then
  if [[ $quick = 1 ]]; then
    not_measured 10 "3 Python ranks, one out of step" "verdict after onset + timeout" ddprun s \
      true "not run in --quick" "<= 2 s"
  elif command -v gdb >/dev/null && "$python" -c 'import torch.distributed' 2>/dev/null; then
    step "figure 10: hangs" "$python" "$root/bench/hang_bench.py" --ddprun "$ddprun" \
      --python "$python" --script "$root/tests/python/hang.py" --results "$results" \
      --runs 3 --ranks 2 4 8 --torchrun-wait 30
  else
    not_measured 10 "3 Python ranks, one out of step" "verdict after onset + timeout" ddprun s \
      true "not measured: gdb or torch is missing (scripts/install-deps.sh --tests installs both)" "<= 2 s"
  fi
fi
if want 11; then
  watch_agents=1024
  [[ $quick = 1 ]] && watch_agents=64
  step "figure 11: watching a job" "$b/bench_watch" --ddprun "$ddprun" --store "$store" \
    --worker "$b/bench_worker" --agents "$watch_agents" --results "$results" "${runs[@]}"
fi
if want 12; then
  recovery=("$b/bench_recovery" --worker "$b/bench_worker" --results "$results" "${recovery_runs[@]}")
  step "figure 12: recovery at scale, c10d" "${recovery[@]}" --ddprun "$ddprun" --backend c10d \
    --nodes "${recovery_nodes[@]}"
  step "figure 12: recovery at scale, static" "${recovery[@]}" --ddprun "$ddprun" --backend static \
    --nodes "${recovery_nodes[@]}"
  if [[ $have_etcd = 1 ]]; then
    step "figure 12: recovery at scale, etcd" "${recovery[@]}" --ddprun "$ddprun" --backend etcd \
      --nodes "${recovery_nodes[@]}"
  else
    not_measured 12 "1024 nodes" "failure to every worker running again" "ddprun, etcd (3 members)" \
      s true "$etcd_missing" ""
  fi
  step "figure 12: recovery at scale, node death" "${recovery[@]}" --ddprun "$ddprun" \
    --backend c10d --node-death "${keepalive[@]}" --nodes "${recovery_death_nodes[@]}"
  if [[ -n $torch_version ]] && ((${#recovery_torchrun_nodes[@]})); then
    for interval in 0.1 default; do
      mi=(--monitor-interval "$interval"); [[ $interval = default ]] && mi=()
      step "figure 12: recovery, torchrun ${interval}" "${recovery[@]}" --torchrun "$python" \
        "${mi[@]}" --nodes "${recovery_torchrun_nodes[@]}"
    done
  fi
fi
if want 13; then
  if [[ -n $torch_version ]]; then
    first_step=("$b/bench_first_step" --ddprun "$ddprun" --python "$python"
                --script "$root/bench/first_step.py" --torchrun "$torchrun_first_step"
                --results "$results" "${first_step_runs[@]}")
    resnet=${DDP_RESNET:-$build/workers/ddp_resnet}
    if [[ -x $resnet ]]; then
      first_step+=(--ddp-resnet "$resnet")
    else
      not_measured 13 "ddp_resnet, ResNet-18 32x32, 2 ranks, Gloo, a checkpoint every 3 steps, rank 1 fails at step 5, --max-restarts=1" \
        "failure to every rank's first step" ddprun ms true \
        "not measured: $resnet is not built (libtorch)" ""
    fi
    # Two nodes too (not in the smoke mode), where network namespaces can be made (root): the
    # run happens inside a cluster of 2 that the script takes down after it. A cluster that
    # cannot be set up costs the two-node rows only.
    cluster=$root/scripts/netns-cluster.sh
    first_step_in_cluster() {
      "$cluster" run "fstep$$" 2 "${first_step[@]}" --netns-cluster "$cluster" && return
      echo "bench.sh: figure 13 in a cluster of network namespaces failed: again on one node" >&2
      "${first_step[@]}"
    }
    if [[ $quick = 0 ]] && "$cluster" check; then
      step "figure 13: failure to the next training step (one and two nodes)" first_step_in_cluster
    else
      step "figure 13: failure to the next training step" "${first_step[@]}"
    fi
  else
    not_measured 13 "3 ranks, Gloo, rank 1 SIGKILLed at step 20, --max-restarts=1" \
      "failure to every rank's first step" ddprun ms true "not measured: $python has no torch" ""
  fi
fi
if want 14; then
  step "figure 14: the console of many ranks" "$b/bench_console" --ddprun "$ddprun" \
    --worker "$b/console_worker" --local-ssh "$root/testing/local_ssh.sh" --results "$results" \
    "${runs[@]}" "${console_args[@]}"
fi
if want 15; then
  if [[ $quick = 1 ]]; then
    not_measured 15 "64 nodes, network namespaces" "time the check adds to the start" \
      "ddprun --node-check=warn --node-check-mib=4" s true "not run in --quick" "<= 3 s"
  elif "$root/scripts/netns-cluster.sh" check && command -v tc >/dev/null; then
    step "figure 15: the node check" "$python" "$root/bench/node_check_bench.py" \
      --ddprun "$ddprun" --cluster "$root/scripts/netns-cluster.sh" \
      --links-test "$root/tests/netns/node_check_links.sh" --results "$results" --runs 3 \
      --netns-nodes 64 --loopback-agents 256 --detection-runs 20
  else
    not_measured 15 "64 nodes, network namespaces" "time the check adds to the start" \
      "ddprun --node-check=warn --node-check-mib=4" s true "not measured: network namespaces or tc need root and iproute2" "<= 3 s"
  fi
fi
# Optional: figure 7 at torchrun's default keep-alive (5 s x 3), when the budget allows it
# (about 150 s).
if want 7 && [[ $quick = 0 ]]; then
  if (( SECONDS - start + 150 <= budget )); then
    step "figure 7: node-death detection, default keep-alive" "$b/bench_node_death" \
      --ddprun "$ddprun" --worker "$b/bench_worker" --interval 5 --attempts 3 --last-call 0.1 \
      --results "$results" "${runs[@]}"
  else
    echo "== figure 7 at the default keep-alive (5 s x 3): skipped, not enough of the ${budget} s budget left"
  fi
fi

{
  printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'CPU\t%s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  printf 'cores\t%s\n' "$(nproc)"
  printf 'memory\t%s GiB\n' "$(awk '/MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo)"
  printf 'kernel\t%s\n' "$(uname -r)"
  # shellcheck disable=SC1091
  printf 'OS\t%s\n' "$(. /etc/os-release && echo "$PRETTY_NAME")"
  printf 'compiler\t%s\n' "$(c++ --version | head -1)"
  printf 'build\t%s\n' "$(grep -m1 '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" | cut -d= -f2)"
  printf 'ddprun\t%s, git %s\n' "$("$ddprun" --version)" "$git_rev"
  printf 'torchrun\t%s\n' "${torch_version:+torch $torch_version (Debian python3-torch $(dpkg-query -W -f='${Version}' python3-torch 2>/dev/null)), $("$python" --version 2>&1), always with -r 1 -t 1}"
  [[ $quick = 1 ]] || printf 'training programs\t%s, %s\n' "${DDP_RESNET:-$build/workers/ddp_resnet}" scripts/reference_ddp.py
  printf 'load average at start, at end\t%s; %s\n' "$load_at_start" "$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$work/machine.tsv" 2>/dev/null || true
echo "--mode $([[ $quick = 1 ]] && echo quick || echo full) ${report_runs[*]} --elapsed $((SECONDS - start))" \
  > "$work/report.args"
report "$work"
if [[ -n $keep_results ]]; then
  mkdir -p "$keep_results"
  cp "$work/results.jsonl" "$work/machine.tsv" "$work/report.args" "$keep_results/"
fi
echo "== wrote $output ($((SECONDS - start)) s)"
exit $status
