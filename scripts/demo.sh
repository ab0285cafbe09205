#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds, and runs a two-node job on
# this machine with ddprun: node 0 with 2 workers, node 1 with 1 worker, a real PyTorch (gloo)
# all_reduce when Debian's python3-torch is present. One worker fails on the first attempt and
# the whole job restarts together. (The libtorch DDP ResNet demo replaces this once the worker
# lands.)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target ddprun ddprun-store

ddprun="$BUILD_DIR/launcher/ddprun"
port=$((29500 + RANDOM % 1000))
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
export ALLREDUCE_FAIL_RANK=2   # rank 2 (node 1) fails on attempt 0; ddprun restarts everyone

if "$PYTHON_EXEC" -c 'import torch.distributed' 2>/dev/null; then
  program=(tests/python/allreduce.py)
else
  echo "demo: $PYTHON_EXEC has no torch; running a shell worker instead"
  program=(--no-python sh -c 'echo "rank $RANK of $WORLD_SIZE on node $GROUP_RANK, attempt $TORCHELASTIC_RESTART_COUNT";
            [ "$RANK" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3; exit 0')
fi

echo "== two agents on 127.0.0.1:$port (2 + 1 workers), --max-restarts=1"
"$ddprun" --nproc-per-node=2 --nnodes=2 --node-rank=0 --master-addr=127.0.0.1 \
  --master-port=$port --max-restarts=1 "${program[@]}" &
node0=$!
"$ddprun" --nproc-per-node=1 --nnodes=2 --node-rank=1 --master-addr=127.0.0.1 \
  --master-port=$port --max-restarts=1 "${program[@]}" &
node1=$!
status=0
wait $node0 || status=$?
wait $node1 || status=$?
echo "== demo finished with exit code $status"
exit $status
