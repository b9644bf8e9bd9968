#!/usr/bin/env bash
# Linear + bias + GELU as one CUTLASS GEMM (cuda/linear_sm90.cu) on an sm_90 GPU: the MLP cases
# within FP16's and BF16's bounds of the CPU backend, and the engine saying that it fused them
# (a silent fallback to cuBLASLt and the activation pass would pass the parity alone).
# usage: linear90_check.sh RUN_ONNX_CASES CASES_DIR
set -uo pipefail
run=$1 cases=$2
for prec in fp16:2e-2 bf16:5e-2; do
  out=$("$run" --backend cuda --precision "${prec%%:*}" --vs-cpu "${prec##*:}" --no-ref --verbose \
        --prefix si_linear_gelu "$cases" 2>&1)
  rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || exit "$rc" # 77: no GPU, skipped
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  if [ "$cc" = "9.0" ]; then
    fused=$(grep -c "as one GEMM" <<<"$out")
    # the erf, tanh, QuickGELU and SiLU MLPs fuse; the 36-feature one cannot (72-byte rows)
    if [ "$fused" -ne 4 ]; then
      echo "FAIL: ${prec%%:*}: $fused Linear + GELU layers fused, expected 4"
      exit 1
    fi
  fi
done
echo "linear90: OK"
