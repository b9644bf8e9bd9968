#!/usr/bin/env bash
# cuDNN's fused SDPA as the attention node (cuda/sdpa.cu), forced where it runs and agrees with
# our kernel (SI_CUDNN_SDPA=1): the attention cases within FP16's and BF16's bounds of the CPU
# backend, and on an sm_90 GPU the engine saying, for each node it may take (no bias, head size
# 32, 64 or 128), that cuDNN ran it or that init's check refused cuDNN's result (init's timing
# alone would leave the small cases to our kernel, and a silent fallback would pass the parity).
# cuDNN 9.14 accepts K given as K^T (its head dim strided, a layout its SDPA does not support) and
# computes it wrongly: cuda/sdpa.cu must refuse that one before asking cuDNN, and the five others
# (head size 128, Q/K/V from Slice and Split of a packed projection, ViT-B's and DINOv2's shapes)
# run on cuDNN, none left to the agreement check.
# usage: sdpa_check.sh RUN_ONNX_CASES CASES_DIR
set -uo pipefail
run=$1 cases=$2
for prec in fp16:2e-2 bf16:5e-2; do
  out=$(SI_CUDNN_SDPA=1 "$run" --backend cuda --precision "${prec%%:*}" --vs-cpu "${prec##*:}" \
        --no-ref --verbose --prefix si_attention "$cases" 2>&1)
  rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || exit "$rc" # 77: no GPU, skipped
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  if [ "$cc" = "9.0" ]; then
    by=$(grep -c "by cuDNN's fused SDPA" <<<"$out")
    refused=$(grep -c "K given transposed" <<<"$out")
    disagreed=$(grep -c "disagrees with our kernel" <<<"$out")
    # head sizes 40 and 24 (the Gather case), the relative-position bias and the window mask
    # stay ours untried
    if [ "$by" -ne 5 ] || [ "$refused" -ne 1 ] || [ "$disagreed" -ne 0 ]; then
      echo "FAIL: ${prec%%:*}: cuDNN ran $by attention nodes, was refused K^T on $refused and" \
           "disagreed on $disagreed; expected 5, 1 and 0"
      exit 1
    fi
  fi
done
echo "sdpa: OK"
