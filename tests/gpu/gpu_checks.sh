#!/usr/bin/env bash
# ddp_resnet and ddprun on a real GPU: ctest "gpu: ..." when ddp_resnet has the NCCL path, or by
# hand on a GPU machine:
#   tests/gpu/gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]
# DDP_RESNET "-" runs ddprun's own checks alone (placement, device visibility, torch scripts).
# Exits 77 (ctest: skipped) when no GPU is visible, 1 when a check fails. Each check prints
# one line, PASS or FAIL; a failing check's output follows it.
set -uo pipefail

ddprun=${1:?usage: gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]}
worker=${2:?usage: gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]}
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
reference=$here/../../scripts/reference_ddp.py
cases=$here/../python/launcher_cases.py

gpus=0
if command -v nvidia-smi >/dev/null; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') ; fi
if [[ $gpus -eq 0 ]]; then
  echo "gpu_checks: no GPU visible (nvidia-smi -L lists none): skipped"
  exit 77
fi
work=$(mktemp -d /tmp/ddprun-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0
syn=(--use_syn --num_epochs=2 --steps_syn=4)

# check NAME EXPECTED_RC PATTERN... -- COMMAND...: runs COMMAND (10 minutes at most), then wants
# its exit code and every fixed-string PATTERN in its output.
check() {
  local name=$1 want_rc=$2; shift 2
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  local log=$work/log.$RANDOM rc problems=()
  local start=$SECONDS
  timeout --kill-after=10 600 "$@" >"$log" 2>&1
  rc=$?
  [[ $rc -eq $want_rc ]] || problems+=("exit code $rc, expected $want_rc")
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$log" || problems+=("no line with: $p")
  done
  if [[ ${#problems[@]} -eq 0 ]]; then
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name ($((SECONDS - start)) s): ${problems[*]}"
    sed 's/^/    | /' "$log" | tail -60
    failed=1
  fi
}

echo "gpu_checks: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

if [[ $worker == - ]]; then
  echo "SKIP ddp_resnet's checks: no worker given"
else
  check "--nproc-per-node=gpu counts the GPUs; NCCL, resnet152, bf16, channels_last, in sync" 0 \
    "x $gpus ranks, backend nccl, device cuda:0, bf16" "(in sync across $gpus ranks)" \
    "num_steps_per_gpu: 4" -- \
    "$ddprun" --standalone --nproc-per-node=gpu --no-python "$worker" --backend=nccl "${syn[@]}" \
    --batch_size=32 --arch=resnet152 --precision=bf16 --channels_last --verify_sync \
    --model_dir="$work/m1"

  check "NCCL at world size 1, fp32" 0 "x 1 ranks, backend nccl, device cuda:0, fp32" \
    "(in sync across 1 ranks)" -- \
    "$ddprun" --standalone --nproc-per-node=1 --no-python "$worker" --backend=nccl "${syn[@]}" \
    --batch_size=16 --arch=resnet50 --image_size=112 --verify_sync --model_dir="$work/m2"

  check "Gloo over CUDA tensors, 2 ranks sharing GPU 0" 0 \
    "x 2 ranks, backend gloo, device cuda:0" "(in sync across 2 ranks)" -- \
    "$ddprun" --standalone --nproc-per-node=2 --no-python "$worker" --backend=gloo --device=cuda "${syn[@]}" \
    --batch_size=16 --arch=resnet18 --image_size=64 --verify_sync --model_dir="$work/m3"

  check "NCCL: a rank fails at step 5, ddprun restarts the job, it resumes from step 4" 0 \
    "injected failure (--fail_at_step 5)" "resumed from $work/m4/resnet_distributed.pth" \
    "global step 4" "(in sync across $gpus ranks)" -- \
    "$ddprun" --standalone --nproc-per-node=gpu --max-restarts=1 --no-python "$worker" --backend=nccl \
    --syn_learnable --num_epochs=3 --steps_syn=4 --batch_size=8 --image_size=32 --arch=resnet18 \
    --checkpoint_every=2 --fail_at_step=5 --log_every=2 --verify_sync --model_dir="$work/m4"

  if [[ $gpus -eq 1 ]]; then
    check "NCCL refuses two ranks on one GPU, in one clear line (exit 2)" 2 \
      "NCCL needs a GPU per rank" -- \
      "$ddprun" --standalone --nproc-per-node=2 --no-python "$worker" --backend=nccl "${syn[@]}" \
      --batch_size=8 --arch=resnet18 --image_size=32 --model_dir="$work/m5"
  fi

fi

if "$python" -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null; then
  check "torch $("$python" -c 'import torch; print(torch.__version__)') script under ddprun: DDP over NCCL, in sync" 0 \
    "backend nccl, device cuda:0" "(in sync across $gpus ranks)" -- \
    env PYTHON_EXEC="$python" "$ddprun" --standalone --nproc-per-node=gpu "$reference" \
    --backend=nccl "${syn[@]}" --batch_size=16 --arch=resnet18 --image_size=64 --verify_sync \
    --model_dir="$work/m6"
else
  echo "SKIP torch script under ddprun: $python has no torch with CUDA"
fi

# Placement: local rank 0's GPU is the driver's device 0 (nvidia-smi's bus id), and the CPUs the
# agent planned for it are the CPUs the worker's process runs on.
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f')
bus=${bus#0000}  # 00000000:18:00.0 -> 0000:18:00.0
placement_check() {
  local mode=$1 log=$work/placement.$RANDOM start=$SECONDS rc planned actual
  env PYTHON_EXEC="$python" TEST_SENTINEL_PARENT=gpu timeout 120 "$ddprun" --standalone \
    --nproc-per-node=1 --numa-binding="$mode" "$cases" --print-placement >"$log" 2>&1
  rc=$?
  planned=$(sed -n 's/.*local rank 0: GPU 0 (\([^)]*\)), NUMA nodes\{0,1\} [^,]*, CPUs \(.*\)$/\1 \2/p' "$log" | head -1)
  actual=$(sed -n 's/.*local rank 0: cpus=\([^ ]*\) .*/\1/p' "$log" | head -1)
  if [[ $rc -eq 0 && -n $planned && ${planned#* } == "$actual" && ${planned%% *} == "$bus" ]]; then
    echo "PASS --numa-binding=$mode: GPU 0 at $bus, worker on CPUs $actual ($((SECONDS - start)) s)"
  else
    echo "FAIL --numa-binding=$mode: exit $rc, planned '$planned', worker on '$actual', nvidia-smi $bus"
    sed 's/^/    | /' "$log" | tail -40
    failed=1
  fi
}
for mode in node socket exclusive core-complex; do placement_check "$mode"; done
check "--numa-binding with more workers than GPUs stops before any starts (exit 2)" 2 \
  "local rank $gpus has no GPU of its own: $gpus visible here" -- \
  "$ddprun" --standalone --nproc-per-node=$((gpus + 1)) --numa-binding=node --no-python true

# --node-check on a GPU node: NVML read for every visible GPU, its figures in the events file;
# a GPU another process holds named with that process's pid; more workers than GPUs named.
events=$work/node_check.jsonl
check "--node-check: a GPU node with idle GPUs, nothing found" 0 "nothing found; $gpus GPU(s)" -- \
  "$ddprun" --standalone --nproc-per-node=gpu --node-check=refuse --events-file="$events" \
  --no-python true
check "--node-check: NVML's figures of the $gpus GPU(s) in the events file" 0 "gpus=$gpus " -- \
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") != "node_check":
        continue
    s = e["figures"]["gpus"]
    print("skipped=%r error=%r" % (s["skipped"], s["error"]))
    print("gpus=%d " % len(s["gpus"]))
    for g in s["gpus"]:
        print({k: g[k] for k in ("index", "name", "memory_used_bytes", "memory_total_bytes",
              "processes", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate",
              "retired_pages", "remapped_rows_uncorrectable", "remap_pending", "remap_failed")})
' "$events"
check "--node-check: more workers than GPUs is named, and warn goes on" 0 \
  "$((gpus + 1)) workers, but $gpus GPU(s) visible to them" -- \
  "$ddprun" --standalone --nproc-per-node=$((gpus + 1)) --node-check=warn --no-python true
if "$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  # The holder says "ready" once its memory is on GPU 0, and holds it until it is ended. Its
  # output is read through a descriptor of this shell's own, which outlives the holder if it
  # fails early (bash then drops the coproc's).
  coproc HOLDER { exec "$python" -c '
import sys, torch
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
'; }
  holder=$HOLDER_PID
  exec {holder_out}<&"${HOLDER[0]}"
  if read -t 120 -r ready <&"$holder_out" && [[ $ready == ready ]]; then
    # NVML gives the pids of the machine's own namespace, which in a container are not this
    # shell's: the pid to expect is nvidia-smi's.
    listed=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader -i 0 | tr -d ' ')
    held_by=$(grep -x "$holder" <<<"$listed" || head -1 <<<"$listed")
    echo "gpu_checks: GPU 0 held by pid $holder (nvidia-smi: ${held_by:-none listed})"
    check "--node-check=refuse: a GPU another process holds is named with its pid (exit 120)" \
      120 "GPU 0 holds" "of pid ${held_by:-$holder}" "--node-check=refuse" -- \
      "$ddprun" --standalone --nproc-per-node=1 --node-check=refuse --no-python true
    if [[ $gpus -ge 2 ]]; then
      check "--node-check: a held GPU the workers do not see is not named" 0 "nothing found" -- \
        env CUDA_VISIBLE_DEVICES=1 "$ddprun" --standalone --nproc-per-node=1 \
        --node-check=refuse --no-python true
    fi
  else
    echo "FAIL --node-check with a held GPU: the holder did not take GPU 0's memory in 120 s"
    failed=1
  fi
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  exec {holder_out}<&-
else
  echo "SKIP --node-check with a held GPU: $python has no torch with CUDA"
fi

# --virtual-local-rank: every worker is LOCAL_RANK 0 and sees exactly one device, its own; the
# agent's list may name a GPU by UUID.
if "$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  check "--virtual-local-rank: two workers, each sees one device (by UUID, by index)" 0 \
    "[default0]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=$uuid device_count=1" \
    "[default1]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0 device_count=1" -- \
    env CUDA_VISIBLE_DEVICES="$uuid,0" PRINT_CUDA_DEVICE_COUNT=1 PYTHON_EXEC="$python" \
    TEST_SENTINEL_PARENT=gpu "$ddprun" --standalone --nproc-per-node=2 --virtual-local-rank \
    "$cases" --print-devices
  check "--virtual-local-rank, no CUDA_VISIBLE_DEVICES: device 0 for local rank 0" 0 \
    "[default0]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0 device_count=1" -- \
    env -u CUDA_VISIBLE_DEVICES PRINT_CUDA_DEVICE_COUNT=1 PYTHON_EXEC="$python" \
    TEST_SENTINEL_PARENT=gpu "$ddprun" --standalone --nproc-per-node=1 --virtual-local-rank \
    "$cases" --print-devices
  # torchrun's launcher cases that need torch, with this machine's torch.
  check "init_method env:// under ddprun, 4 ranks, Gloo" 0 "rank 3/4: all_reduce done" -- \
    env PYTHON_EXEC="$python" TEST_SENTINEL_PARENT=gpu "$ddprun" --standalone \
    --nproc-per-node=4 "$cases" --init-method=env://
  check "a script written for mpirun under --mpi-env, 4 ranks, Gloo" 0 \
    "rank 3/4: all_reduce done" -- \
    env PYTHON_EXEC="$python" TEST_SENTINEL_PARENT=gpu "$ddprun" --standalone \
    --nproc-per-node=4 --mpi-env "$cases" --mpi
  check "is_torchelastic_launched() under ddprun --run-path" 0 "True" -- \
    bash -c 'PYTHON_EXEC="$1" TEST_SENTINEL_PARENT=gpu "$2" --run-path --nproc-per-node=1 \
      "$3" --out-file="$4" && cat "$4"' _ "$python" "$ddprun" "$cases" "$work/elastic_out"
else
  echo "SKIP device visibility and torch scripts: $python has no torch with CUDA"
fi

exit $failed
