#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds, and runs a two-node job on
# this machine with ddprun: node 0 with 2 workers, node 1 with 1 worker. Each worker is
# ddp_resnet (libtorch, Gloo on CPU) training a ResNet-18 on a learnable synthetic task; rank 2
# (on node 1) fails at step 7 of the first attempt, ddprun restarts all three workers, they resume
# from the checkpoint of step 6 and finish in sync: the output ends with a summary (the failure,
# the resumptions, the last epoch's throughput, the final parameter checksum, identical on every
# rank) and the run's duration. 10-20 s on 2 cores, after the build (5-10 minutes the first
# time, for ddp_resnet).
# Without libtorch (no ddp_resnet target), it runs the previous demo: a PyTorch gloo all_reduce,
# or a shell worker, with the same failure and restart.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
jobs=$(nproc)
targets=(ddprun ddprun-store)
# CMake records whether the ddp_resnet target exists (libtorch and Gloo's headers found).
if grep -qx 'DDPRUN_HAVE_DDP_RESNET:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  targets+=(ddp_resnet)
  # libtorch translation units need about 1.5 GB of memory each
  mem_jobs=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 1600000 ))
  (( mem_jobs >= 1 && mem_jobs < jobs )) && jobs=$mem_jobs
fi
echo "== building ${targets[*]} (first time: a few minutes for ddp_resnet)"
cmake --build "$BUILD_DIR" -j "$jobs" --target "${targets[@]}" >/dev/null

ddprun="$BUILD_DIR/launcher/ddprun"
port=$((29500 + RANDOM % 1000))
log=$(mktemp /tmp/ddprun-demo.XXXXXX)
trap 'rm -rf "$log" "${model_dir:-}"' EXIT

if [[ -x "$BUILD_DIR/workers/ddp_resnet" ]]; then
  model_dir=$(mktemp -d /tmp/ddprun-demo-ckpt.XXXXXX)
  export OMP_NUM_THREADS=1   # 3 workers on this machine: one intra-op thread each
  program=(--no-python "$BUILD_DIR/workers/ddp_resnet" --backend gloo --arch resnet18
           --syn_learnable --image_size 32 --batch_size 16 --steps_syn 4 --num_epochs 3
           --learning_rate 0.01 --log_every 2 --checkpoint_every 3 --fail_at_step 7
           --verify_sync --model_dir "$model_dir")
  what="ddp_resnet: ResNet-18, 3 ranks x batch 16, Gloo on CPU; rank 2 fails at step 7 on attempt 0"
else
  export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
  export ALLREDUCE_FAIL_RANK=2   # rank 2 (node 1) fails on attempt 0; ddprun restarts everyone
  if "$PYTHON_EXEC" -c 'import torch.distributed' 2>/dev/null; then
    program=(tests/python/allreduce.py)
    what="libtorch not found: a PyTorch gloo all_reduce instead"
  else
    program=(--no-python sh -c 'echo "rank $RANK of $WORLD_SIZE on node $GROUP_RANK, attempt $TORCHELASTIC_RESTART_COUNT";
              [ "$RANK" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3; exit 0')
    what="neither libtorch nor $PYTHON_EXEC with torch: a shell worker instead"
  fi
fi

echo "== two agents on 127.0.0.1:$port (2 + 1 workers), --max-restarts=1"
echo "== $what"
start=$(date +%s)
# agent NODE_RANK NPROC: one ddprun agent, its output on the terminal and in $log. The pipeline
# runs in the background as one job: waiting for it waits for tee too, so $log is complete.
agent() {
  "$ddprun" --nproc-per-node="$2" --nnodes=2 --node-rank="$1" --master-addr=127.0.0.1 \
    --master-port=$port --max-restarts=1 --log-line-prefix='[node{node} rank{rank}]:' \
    "${program[@]}" 2>&1 | tee -a "$log"
}
agent 0 2 &
node0=$!
agent 1 1 &
node1=$!
status=0
wait $node0 || status=$?
wait $node1 || status=$?

if [[ -n "${model_dir:-}" ]]; then
  echo "== summary"
  grep -E 'injected failure|resumed from' "$log" | sed 's/^/   /' | head -4 || true
  grep -E 'samples_per_sec' "$log" | tail -1 | sed 's/^.*samples_per_sec/   last epoch: samples_per_sec/' || true
  grep -E 'param_checksum' "$log" | sed 's/^.*param_checksum/   final param_checksum/' || true
fi
echo "== demo finished in $(( $(date +%s) - start ))s with exit code $status"
exit $status
