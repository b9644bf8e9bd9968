#!/usr/bin/env bash
# Builds a libFuzzer target with clang (address + undefined sanitizers) and runs it.
#   scripts/fuzz.sh model [SECONDS]   the ONNX reader, graph builder and shape inference
#   scripts/fuzz.sh decode [SECONDS]  JPEG decode, EXIF orientation, resize and crop
# The seed corpus is every model.onnx (model) or every JPEG (decode) the tests generate (run the
# tests once first); findings land in build-fuzz/crash-*. Needs clang and libclang-rt
# (apt-get install clang libclang-rt-14-dev).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${1:-model}
secs=${2:-600}
out=$root/build-fuzz
mkdir -p "$out/corpus-$target"
case "$target" in
  model)
    srcs=(src/base/common.c src/engine/onnx.c src/engine/graph.c src/engine/import.c src/engine/ops_conv.c src/engine/ops_tensor.c src/engine/ops_math.c src/engine/ops_norm.c src/engine/attention.c src/engine/attention_views.c src/engine/concat_views.c src/engine/ops_host.c src/engine/memplan.c
          tests/fuzz/fuzz_model.c)
    find "$root/build/testdata" -name model.onnx -size -2M 2>/dev/null | head -400 |
      while read -r f; do cp "$f" "$out/corpus-$target/$(echo "$f" | md5sum | cut -c1-16).onnx"; done
    ;;
  decode)
    srcs=(src/base/common.c io/jpeg.c tests/fuzz/fuzz_decode.c)
    libs=(-lturbojpeg)
    # io_ref.py's and make_e2e_set.py's JPEGs (good, oriented, large, hostile), under 256 KiB
    find "$root/build/testdata" -name '*.jpg' -size -256k 2>/dev/null | head -400 |
      while read -r f; do cp "$f" "$out/corpus-$target/$(echo "$f" | md5sum | cut -c1-16).jpg"; done
    ;;
  *) echo "fuzz.sh: unknown target '$target' (targets: model, decode)" >&2; exit 2 ;;
esac
(cd "$root" && clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I. -Isrc -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  "${srcs[@]}" -lcrypto ${libs[@]+"${libs[@]}"} -lm -o "$out/fuzz_$target")
cd "$out"
# -rss_limit_mb: a case that makes us allocate past 2 GB is a finding, not a host problem
exec ./"fuzz_$target" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=262144 \
  "corpus-$target"
