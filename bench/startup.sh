#!/bin/bash
# A whole command's fixed cost on the GPU machine (issue 16): the same `shardinfer run` with the
# autotune cache off, cold, warm, and warm with --backend left to auto, for each model; prints
# the engine set-up, time to first result, steady rate, wall time and fixed cost (wall - images /
# steady rate), and the start-up line's breakdown.
#   . .devrt/env.sh && bench/startup.sh SHARDINFER SET150.h5 OUT_DIR [N_IMAGES] [MODELS]
# MODELS (default "resnet50 mobilenet_v2") are exported with tests/export_models.py.
set -u
BIN=$(realpath "$1"); SET150=$(realpath "$2"); OUT=$3; N=${4:-20000}; MODELS=${5:-resnet50 mobilenet_v2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/si_startup; M=/tmp/si_models; mkdir -p "$OUT" $W $M
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$OUT/table.txt"; }
python3 $HERE/tests/export_models.py --output-dir $M --models "$(echo $MODELS | tr ' ' ,)" > $OUT/export.log 2>&1
python3 $HERE/bench/repeat_set.py $SET150 $W/set.h5 --count $N > $OUT/set.log 2>&1
for m in $MODELS; do
  C=$W/cache_$m; rm -rf $C
  for tag in off cold warm warm_auto; do
    ac=$C; [ $tag = off ] && ac=off
    be="--backend cuda"; [ $tag = warm_auto ] && be=""
    t0=$(date +%s.%N)
    timeout 300 $BIN run --model $M/$m/model.onnx --input $W/set.h5 --output $W/o_${m}_$tag.h5 \
      --overwrite --batch 256 --progress none --autotune-cache $ac $be > $OUT/run_${m}_$tag.log 2>&1
    rc=$?; t1=$(date +%s.%N)
    L=$OUT/run_${m}_$tag.log
    wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    steady=$(grep -o 'steady state [0-9.]* images/s' $L | grep -o '[0-9.]*')
    row "$m $tag (rc $rc)" "ready $(grep -o 'engine ready in [0-9.]* s' $L | grep -o '[0-9.]*') s, first $(grep -o 'time to first result [0-9.]*' $L | grep -o '[0-9.]*$') s, steady ${steady} /s, wall ${wall} s, fixed $(python3 -c "print(f'{$wall - $N / ${steady:-1}:.2f}')") s, [$(grep -o '[0-9]* of [0-9]* convolutions' $L)]"
    grep -o 'start-up.*' $L | sed 's/^/    /' | tee -a "$OUT/table.txt"
  done
done
