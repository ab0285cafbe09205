#!/usr/bin/env bash
# GPU throughput of ddp_resnet against scripts/reference_ddp.py (PyTorch DDP, eager and under
# torch.compile), one GPU, NCCL, synthetic 224x224 images, bf16 autocast, channels_last; both
# under ddprun. Results go to docs/benchmarks.md (Figure 9, in the analysis).
#
#   scripts/gpu_bench.sh DDPRUN DDP_RESNET [options]
#     --python PY          interpreter with torch+torchvision (default python3)
#     --archs "A B"        default "resnet50 resnet152"
#     --batches-resnet50 "1024 768 512 256"   tried largest first: the first that fits is used
#     --batches-resnet152 "512 384 256 128"
#     --steps N            steps per epoch (default 15); 3 epochs, the first is warm-up
#     --out DIR            logs (default a temporary directory, printed)
#     --budget S           start no run after S seconds (default 540)
#     --reference-args "A B"   extra flags for reference_ddp.py (e.g. --pin_memory)
#     --only-reference     skip ddp_resnet's runs (use --batches-* to give the batch)
#     --no-compile / --profile
# Prints one line per run and a table at the end.
set -uo pipefail

ddprun=${1:?usage: gpu_bench.sh DDPRUN DDP_RESNET [options]}
worker=${2:?usage: gpu_bench.sh DDPRUN DDP_RESNET [options]}
shift 2
python=python3 archs="resnet50 resnet152" steps=15 out="" budget=540 compile=1 profile=0
reference_args=() only_reference=0
declare -A batches=([resnet50]="1024 768 512 256" [resnet152]="512 384 256 128")
while [[ $# -gt 0 ]]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --archs) archs=$2; shift 2 ;;
    --batches-*) batches[${1#--batches-}]=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --reference-args) read -ra reference_args <<<"$2"; shift 2 ;;
    --only-reference) only_reference=1; shift ;;
    --no-compile) compile=0; shift ;;
    --profile) profile=1; shift ;;
    *) echo "gpu_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
reference=$here/reference_ddp.py
out=${out:-$(mktemp -d /tmp/gpu-bench.XXXXXX)}
mkdir -p "$out"
start=$SECONDS
results=()

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
torch_version=$("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())')
echo "gpu_bench: $gpu; torch $torch_version; logs in $out"

# run LABEL ARCH BATCH PROGRAM ARGS...: one job of 3 epochs; prints images/s of epochs 2-3 (the
# mean of their samples_per_sec lines) or a reason it has none.
run() {
  local label=$1 arch=$2 batch=$3; shift 3
  local log=$out/$label-$arch-$batch.log
  if (( SECONDS - start > budget )); then echo "skipped (time budget)"; return 1; fi
  timeout --kill-after=10 600 "$ddprun" --standalone --nproc-per-node=1 "$@" --backend=nccl \
    --use_syn --arch="$arch" --batch_size="$batch" --precision=bf16 --channels_last \
    --steps_syn="$steps" --num_epochs=3 --model_dir="$out/models" >"$log" 2>&1
  local rc=$?
  local rate
  rate=$(grep -o 'samples_per_sec: [0-9.]*' "$log" | awk 'NR > 1 { s += $2; n++ } END { if (n) printf "%.1f", s / n }')
  if [[ $rc -ne 0 || -z $rate ]]; then
    if grep -q -i 'out of memory' "$log"; then echo "out of memory"; else echo "failed (exit $rc, see $log)"; fi
    return 1
  fi
  echo "$rate"
}

for arch in $archs; do
  chosen="" ours="" again="-"
  if [[ $only_reference -eq 1 ]]; then read -r chosen _ <<<"${batches[$arch]}"; ours="-"; fi
  for batch in ${batches[$arch]}; do
    [[ -n $chosen ]] && break
    ours=$(run ddp_resnet "$arch" "$batch" --no-python "$worker") && { chosen=$batch; break; }
    echo "  $arch batch $batch: ddp_resnet $ours"
  done
  if [[ -z $chosen ]]; then results+=("$arch | - | ddp_resnet: $ours | | |"); continue; fi
  echo "  $arch batch $chosen: ddp_resnet $ours images/s"
  eager=$(PYTHON_EXEC=$python run reference "$arch" "$chosen" "$reference" "${reference_args[@]}") || true
  echo "  $arch batch $chosen: reference eager ${reference_args[*]} $eager"
  if [[ $only_reference -eq 0 ]]; then
    again=$(run ddp_resnet-again "$arch" "$chosen" --no-python "$worker") || true
    echo "  $arch batch $chosen: ddp_resnet again $again"
  fi
  compiled="not run"
  if [[ $compile -eq 1 ]]; then
    compiled=$(PYTHON_EXEC=$python run reference-compile "$arch" "$chosen" "$reference" --compile "${reference_args[@]}") || true
    echo "  $arch batch $chosen: reference torch.compile $compiled"
  fi
  ratio=$(awk -v a="$ours" -v b="$eager" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }')
  results+=("$arch | $chosen | $ours / $again | $eager | $ratio | $compiled")
  if [[ $profile -eq 1 ]]; then
    PYTHON_EXEC=$python run reference-profile "$arch" "$chosen" "$reference" --profile "${reference_args[@]}" >/dev/null || true
    sed -n '/profile of 5 steps/,/Self CUDA time total\|Self CPU time total/p' \
      "$out/reference-profile-$arch-$chosen.log" | head -40
  fi
done

echo
echo "model | batch/GPU | ddp_resnet images/s (two runs) | reference eager | ratio | reference torch.compile"
printf '%s\n' "${results[@]}"
echo "gpu_bench: $((SECONDS - start)) s"
