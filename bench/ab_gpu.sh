#!/bin/bash
# Two builds of shardinfer on the GPU machine, in one command: the same result files and the same
# speed (a refactoring's proof). Runs of the two builds alternate, so a GPU whose clock drifts
# affects both alike; each figure is the median of the repeats.
#   . .devrt/env.sh && bench/ab_gpu.sh OLD_BIN NEW_BIN DATA_DIR OUT_DIR [N_IMAGES]
# OLD_BIN, NEW_BIN: the two shardinfer binaries. DATA_DIR: e2e/ (set.h5, tiny.onnx), post/
# (post_e2e.py's set.h5 and models/) and set150.h5 (the 150 photos of
# datasets/make_bench_set.py, packed). ResNet-50, MobileNetV2 and EfficientNet-B0 are exported
# here by tests/export_models.py. SECTIONS (default "results compute e2e").
set -u
OLD=$(realpath "$1"); NEW=$(realpath "$2"); D=$(realpath "$3"); OUT=$4; N=${5:-20000}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; W=/tmp/si_ab; M=/tmp/si_models; mkdir -p $W $M
PY=python3
SECTIONS=${SECTIONS:-results compute e2e}
REPS=${REPS:-3}          # runs of each build per figure
AB_NP=${AB_NP:-1 2}      # rank counts of the result comparison
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }
row() { printf '%-64s %s\n' "$1" "$2" | tee -a "$OUT/ab_table.txt"; }
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: > "$OUT/ab_table.txt"
rm -f $W/*.txt # figures of an earlier call on a machine still warm
[ -f $M/resnet50/model.onnx ] || timeout 200 $PY $HERE/tests/export_models.py --output-dir $M \
  --models resnet50,mobilenet_v2,efficientnet_b0 > $OUT/ab_export.log 2>&1

if want results; then
  echo "== the same result files on the GPU: $(date +%T)"
  CASES=(
    --case classify $D/e2e/tiny.onnx $D/e2e/set.h5 "--batch 4"
    --case mobilenet_v2 $M/mobilenet_v2/model.onnx $D/post/set.h5 "--batch 8"
    --case mnv2_cpu_resize $M/mobilenet_v2/model.onnx $D/post/set.h5 "--batch 8 --resize-on cpu"
    --case effnet_b0_fp32 $M/efficientnet_b0/model.onnx $D/post/set.h5 "--batch 8 --precision fp32"
    --case resnet50_bf16 $M/resnet50/model.onnx $D/post/set.h5 "--batch 8 --precision bf16"
    --case detect $D/post/models/detect.onnx $D/post/set.h5 "--batch 4 --post detect --exact-preprocess"
    --case embed $D/post/models/embed.onnx $D/post/set.h5 "--batch 4 --post embed"
  )
  # old against old first: the CUDA backend picks its convolution algorithms by timing them at
  # load, so two runs of one build may differ; then old against new
  timeout 300 $PY $HERE/bench/ab_results.py --a $OLD --b $OLD --dir $W/aa --np 1 --backend cuda \
    "${CASES[@]}" > $OUT/ab_results_old_old.log 2>&1
  row "results, old vs old build, --backend cuda -np 1" "$(tail -1 $OUT/ab_results_old_old.log)"
  timeout 400 $PY $HERE/bench/ab_results.py --a $OLD --b $NEW --dir $W/ab --np $AB_NP --backend cuda \
    "${CASES[@]}" > $OUT/ab_results_old_new.log 2>&1
  row "results, old vs new build, --backend cuda -np $AB_NP" "$(tail -1 $OUT/ab_results_old_new.log)"
fi

if want compute; then
  echo "== compute only, batch 256, fp16: $(date +%T)"
  for m in resnet50 mobilenet_v2 efficientnet_b0; do
    for rep in $(seq $REPS); do for v in old new; do
      bin=$OLD; [ $v = new ] && bin=$NEW
      timeout 100 $bin bench --model $M/$m/model.onnx --backend cuda --batch 256 --compute-only \
        --iters 100 2>&1 | grep -o 'images_per_s=[0-9.]*' | cut -d= -f2 >> $W/compute_${m}_$v.txt
    done; done
    o=$(med < $W/compute_${m}_old.txt); n=$(med < $W/compute_${m}_new.txt)
    row "compute $m: old / new img/s (median of $REPS each), new/old" \
      "$o / $n = $($PY -c "print(f'{$n/$o:.3f}')") (old: $(tr '\n' ' ' < $W/compute_${m}_old.txt)new: $(tr '\n' ' ' < $W/compute_${m}_new.txt))"
  done
fi

if want e2e; then
  echo "== end to end, resnet50 fp16, $N photos: $(date +%T)"
  $PY $HERE/bench/repeat_set.py $D/set150.h5 $W/set.h5 --count $N > $OUT/ab_set.log 2>&1
  ONNX=$M/resnet50/model.onnx
  for rep in $(seq $REPS); do for v in old new; do
    bin=$OLD; [ $v = new ] && bin=$NEW
    timeout 200 $bin run --model $ONNX --input $W/set.h5 --output $W/e2e_$v.h5 --overwrite \
      --backend cuda --batch 256 --progress none > $OUT/ab_e2e_${v}_$rep.log 2>&1
    grep -o '[0-9.]* images/s$' $OUT/ab_e2e_${v}_$rep.log | cut -d' ' -f1 >> $W/e2e_$v.txt
    grep -o 'steady state [0-9.]*' $OUT/ab_e2e_${v}_$rep.log | cut -d' ' -f3 >> $W/steady_$v.txt
  done; done
  o=$(med < $W/e2e_old.txt); n=$(med < $W/e2e_new.txt)
  row "e2e resnet50 whole command: old / new img/s (median of $REPS), new/old" \
    "$o / $n = $($PY -c "print(f'{$n/$o:.3f}')") (old: $(tr '\n' ' ' < $W/e2e_old.txt)new: $(tr '\n' ' ' < $W/e2e_new.txt))"
  o=$(med < $W/steady_old.txt); n=$(med < $W/steady_new.txt)
  row "e2e resnet50 steady state: old / new img/s (median of $REPS), new/old" \
    "$o / $n = $($PY -c "print(f'{$n/$o:.3f}')")"
fi
echo "== done: $(date +%T)"; cat $OUT/ab_table.txt
