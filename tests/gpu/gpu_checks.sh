#!/usr/bin/env bash
# ddp_resnet and ddprun on a real GPU: ctest "gpu: ..." when ddp_resnet has the NCCL path, or by
# hand on a GPU machine:
#   tests/gpu/gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]
# Exits 77 (ctest: skipped) when no GPU is visible, 1 when a check fails. Each check prints
# one line, PASS or FAIL; a failing check's output follows it.
set -uo pipefail

ddprun=${1:?usage: gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]}
worker=${2:?usage: gpu_checks.sh DDPRUN DDP_RESNET [PYTHON]}
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
reference=$here/../../scripts/reference_ddp.py

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

if "$python" -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null; then
  check "torch $("$python" -c 'import torch; print(torch.__version__)') script under ddprun: DDP over NCCL, in sync" 0 \
    "backend nccl, device cuda:0" "(in sync across $gpus ranks)" -- \
    env PYTHON_EXEC="$python" "$ddprun" --standalone --nproc-per-node=gpu "$reference" \
    --backend=nccl "${syn[@]}" --batch_size=16 --arch=resnet18 --image_size=64 --verify_sync \
    --model_dir="$work/m6"
else
  echo "SKIP torch script under ddprun: $python has no torch with CUDA"
fi

exit $failed
