#!/usr/bin/env bash
# The autotune cache keeps each attention node's choice between cuDNN's fused SDPA and our kernel
# (cuda/sdpa.cu): a cold start times both and writes it, a warm one takes it from the cache
# (the same kernel, so the same bits) without timing, and `off` leaves it to the timing again.
# Where cuDNN's SDPA is the choice its plan is serialized beside the cache, and a warm start loads
# it instead of building it (the runtime-compiled kernel is most of a warm start's time); a
# damaged plan file is built again and rewritten, the run unharmed.
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
plans=("$dir"/cache/*.sdpa-*)
if [[ "$cold_by" == "attention by cuDNN"* ]]; then
  if [ ! -s "${plans[0]}" ]; then
    echo "FAIL: a cold start that chose cuDNN's SDPA must keep its plan beside the cache"; exit 1
  fi
  if ! grep -q "its plan loaded from the cache" <<<"$warm"; then
    echo "FAIL: a warm start must load cuDNN's plan from the cache"; exit 1
  fi
  printf '\377\377\377\377\377\377\377\377' | dd of="${plans[0]}" bs=1 seek=64 conv=notrunc status=none # 8 bytes of the plan overwritten
  hurt=$(go "$dir/cache") || { echo "FAIL: a damaged plan file failed the run"; exit 1; }
  echo "$hurt" | grep -E "attention by"
  if ! grep -q "its plan built" <<<"$hurt" || [ "$(grep -o "attention by [a-zA-Z' ]*" <<<"$hurt" | head -1)" != "$cold_by" ]; then
    echo "FAIL: a damaged plan file must be built again, the choice kept"; exit 1
  fi
  again=$(go "$dir/cache") || exit 1
  if ! grep -q "its plan loaded from the cache" <<<"$again"; then
    echo "FAIL: the plan built after the damaged one must be rewritten and loaded"; exit 1
  fi
  echo "autotune attention: OK ($cold_by, $n node(s); its plan kept, loaded, rebuilt when damaged)"
else
  if [ -e "${plans[0]}" ] || grep -q "its plan" <<<"$warm"; then
    echo "FAIL: with our kernel chosen no cuDNN plan is kept or built"; exit 1
  fi
  echo "autotune attention: OK ($cold_by, $n node(s); no cuDNN plan kept)"
fi
# a choice timed against the wgmma kernel does not answer a run with SI_ATTN90=0 (another kernel
# of ours); both entries then stand side by side
if grep -q "our wgmma kernel" <<<"$cold"; then
  other=$(SI_ATTN90=0 go "$dir/cache") || exit 1
  other_n=$(grep -o '[0-9]*/[0-9]* attention' <<<"$other")
  if [ "$other_n" != "0/$n attention" ] || grep -q "our wgmma kernel" <<<"$other"; then
    echo "FAIL: SI_ATTN90=0 must time its own kernel, not take the wgmma kernel's choice ($other_n)"; exit 1
  fi
  both=$(SI_ATTN90=0 go "$dir/cache") || exit 1
  again=$(go "$dir/cache") || exit 1
  if [ "$(grep -o '[0-9]*/[0-9]* attention' <<<"$both")" != "$n/$n attention" ] ||
     [ "$(grep -o '[0-9]*/[0-9]* attention' <<<"$again")" != "$n/$n attention" ]; then
    echo "FAIL: each kernel's choice must stay in the cache beside the other's"; exit 1
  fi
  echo "SI_ATTN90=0 timed its own choice ($(grep -o "our [a-z.]* *[a-z.]* kernel" <<<"$other" | head -1)); both kept"
fi
