#!/usr/bin/env bash
# The autotune cache keeps each attention node's choice between cuDNN's fused SDPA and our kernel
# (cuda/sdpa.cu): a cold start times both and writes it, a warm one takes it from the cache
# (the same kernel, so the same bits) without timing, and `off` leaves it to the timing again.
# On ViT-B's attention case in FP16 (cuDNN's SDPA takes it; the two tie within a few percent).
# usage: autotune_attention.sh SHARDINFER CASES_DIR
set -uo pipefail
si=$1 cases=$2
model=$cases/si_attention_vit_b/model.onnx
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go() { # cache-dir: the bench's output, verbose
  "$si" bench --model "$model" --backend cuda --precision fp16 --batch 2 --iters 2 --verbose \
    --autotune-cache "$1" 2>&1
}
cold=$(go "$dir/cache"); rc=$?
echo "$cold" | grep -E "attention|autotune_cached"
[ "$rc" -eq 0 ] || { grep -q "no CUDA device" <<<"$cold" && exit 77; exit "$rc"; }
grep -q "backend=cuda" <<<"$cold" || exit 77
cold_n=$(grep -o '[0-9]*/[0-9]* attention' <<<"$cold")
cold_by=$(grep -o "attention by [a-zA-Z' ]*" <<<"$cold" | head -1)
warm=$(go "$dir/cache") || exit 1
echo "$warm" | grep -E "attention|autotune_cached"
warm_n=$(grep -o '[0-9]*/[0-9]* attention' <<<"$warm")
warm_by=$(grep -o "attention by [a-zA-Z' ]*" <<<"$warm" | head -1)
off=$(go off) || exit 1
off_n=$(grep -o '[0-9]*/[0-9]* attention' <<<"$off")
n=${cold_n#*/}; n=${n% attention}
if [ "$cold_n" != "0/$n attention" ] || [ "$n" -lt 1 ]; then
  echo "FAIL: a cold start must time every attention node ($cold_n)"; exit 1
fi
if [ "$warm_n" != "$n/$n attention" ] || ! grep -q "the autotune cache's choice" <<<"$warm"; then
  echo "FAIL: a warm start must take all $n choices from the cache ($warm_n)"; exit 1
fi
if [ "$cold_by" != "$warm_by" ]; then
  echo "FAIL: the warm start chose '$warm_by', the cold one '$cold_by'"; exit 1
fi
if [ "$off_n" != "0/$n attention" ]; then
  echo "FAIL: --autotune-cache off must time again ($off_n)"; exit 1
fi
echo "autotune attention: OK ($cold_by, $n node(s))"
