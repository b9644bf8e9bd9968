#!/bin/bash
# The CUDA backend's checks and benchmarks on the GPU machine, in one command (issue 5):
#   . .devrt/env.sh && bench/gpu_session.sh BIN_DIR CASES_DIR SET150.h5 OUT_DIR [N_IMAGES]
# BIN_DIR holds shardinfer, run_onnx_cases, test_gpu_engine and test_gpu_resize built here, and
# e2e/ (build/testdata/e2e: the e2e and hostile sets and tiny.onnx); CASES_DIR the ONNX node
# tests and onnxruntime cases (build/testdata/cases); SET150.h5 the 150 photos of
# datasets/make_bench_set.py packed by `shardinfer pack`. Logs go to OUT_DIR; a table is last.
# SECTIONS (default "parity models compute e2e resize"; also "transformers", "e2e_clip",
# "gpu_decode" (its tests, FUZZ_S seconds of fuzz), "decode_bench" (issue 16's table)) picks
# what runs; CASES_DIR may be a
# .tar.xz of that folder (the GPU machine takes 64 MiB of carried files).
set -u
BIN=$(realpath "$1"); CASES=$(realpath "$2"); SET150=$(realpath "$3"); OUT=$4; N=${5:-20000}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; M=/tmp/si_models; W=/tmp/si_work; mkdir -p $M $W
PY=python3
step() { echo "== $1: $(date +%T)"; }
row() { printf '%-60s %s\n' "$1" "$2" | tee -a "$OUT/table.txt"; }
: > "$OUT/table.txt"
SECTIONS=${SECTIONS:-parity models compute e2e resize}
case "$CASES" in *.tar.xz) mkdir -p $W/cases && tar xJf "$CASES" -C $W/cases --strip-components=1 && CASES=$W/cases ;; esac
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }
SAN=""; command -v compute-sanitizer >/dev/null && SAN="compute-sanitizer --tool memcheck --error-exitcode 9"

if want parity; then
step "op parity and ONNX node tests on the GPU"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp32 --prefix test_ \
  --expect-unsupported $HERE/tests/onnx_node_unsupported.txt --expect-unsupported $HERE/tests/onnx_gpu_unsupported.txt $CASES > $OUT/gpu_onnx_node_tests.log 2>&1
row "gpu_onnx_node_tests (fp32, ONNX refs)" "rc=$? $(tail -1 $OUT/gpu_onnx_node_tests.log)"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp32 --vs-cpu 1e-5 --no-ref \
  --expect-unsupported $HERE/tests/onnx_node_unsupported.txt --expect-unsupported $HERE/tests/onnx_gpu_unsupported.txt $CASES > $OUT/gpu_parity_fp32.log 2>&1
row "gpu_parity_fp32 (vs cpu, 1e-5)" "rc=$? $(tail -2 $OUT/gpu_parity_fp32.log | tr '\n' ' ')"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp16 --vs-cpu 2e-2 --no-ref \
  --expect-unsupported $HERE/tests/onnx_node_unsupported.txt --expect-unsupported $HERE/tests/onnx_gpu_unsupported.txt \
  --skip $HERE/tests/onnx_gpu_fp16_skip.txt $CASES > $OUT/gpu_parity_fp16.log 2>&1
row "gpu_parity_fp16 (vs cpu, 2e-2)" "rc=$? $(tail -2 $OUT/gpu_parity_fp16.log | tr '\n' ' ')"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision bf16 --vs-cpu 5e-2 --no-ref \
  --prefix si_dwconv $CASES > $OUT/gpu_parity_bf16_depthwise.log 2>&1
row "gpu_parity_bf16_depthwise (vs cpu, 5e-2)" "rc=$? $(tail -2 $OUT/gpu_parity_bf16_depthwise.log | tr '\n' ' ')"
SI_CUDNN_DEPTHWISE=1 timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp16 --vs-cpu 2e-2 \
  --no-ref --prefix si_ --expect-unsupported $HERE/tests/onnx_gpu_unsupported.txt $CASES > $OUT/gpu_parity_fp16_cudnn_depthwise.log 2>&1
row "gpu_parity_fp16_cudnn_depthwise (vs cpu, 2e-2)" "rc=$? $(tail -2 $OUT/gpu_parity_fp16_cudnn_depthwise.log | tr '\n' ' ')"
timeout 100 $BIN/test_gpu_resize > $OUT/test_gpu_resize.log 2>&1
row "test_gpu_resize (kernel vs CPU resize, bound 0)" "rc=$? $(tail -1 $OUT/test_gpu_resize.log)"
rm -rf $W/e2e && cp -r $BIN/e2e $W/e2e
timeout 300 $PY $HERE/tests/e2e.py --shardinfer $BIN/shardinfer --dir $W/e2e gpu-resize \
  > $OUT/gpu_e2e_resize.log 2>&1
row "gpu_e2e_resize (gpu = cpu resize = cpu backend)" "rc=$? $(tail -1 $OUT/gpu_e2e_resize.log)"

fi
if want models; then
step "whole models"
timeout 200 $PY $HERE/tests/export_models.py --output-dir $M \
  --models resnet50,mobilenet_v2,efficientnet_b0 > $OUT/export.log 2>&1 || row export "failed"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp32 --max-rel 1e-4 --vs-cpu 1e-4 $M \
  > $OUT/gpu_models_fp32.log 2>&1
row "gpu_models_fp32 (vs onnxruntime and cpu, 1e-4)" "rc=$? $(tail -2 $OUT/gpu_models_fp32.log | tr '\n' ' ')"
timeout 200 $BIN/run_onnx_cases --backend cuda --precision fp16 --no-ref --vs-cpu 1e-2 $M \
  > $OUT/gpu_models_fp16.log 2>&1
row "gpu_models_fp16 (vs cpu, 1e-2)" "rc=$? $(tail -2 $OUT/gpu_models_fp16.log | tr '\n' ' ')"
timeout 300 $BIN/test_gpu_engine $M/mobilenet_v2/model.onnx > $OUT/test_gpu_engine.log 2>&1
row "test_gpu_engine" "rc=$? $(tail -1 $OUT/test_gpu_engine.log)"
if [ -n "$SAN" ]; then
  SI_TEST_UNDER_SANITIZER=1 timeout 300 $SAN $BIN/test_gpu_engine $M/mobilenet_v2/model.onnx \
    > $OUT/test_gpu_engine_memcheck.log 2>&1
  row "test_gpu_engine under compute-sanitizer memcheck" "rc=$? $(grep 'ERROR SUMMARY' $OUT/test_gpu_engine_memcheck.log)"
  SI_TEST_UNDER_SANITIZER=1 timeout 300 $SAN $BIN/run_onnx_cases --backend cuda --precision fp32 \
    --prefix si_ --atol 1e-5 --expect-unsupported $HERE/tests/onnx_gpu_unsupported.txt $CASES > $OUT/ort_cases_memcheck.log 2>&1
  row "onnxruntime op cases (cuda) under memcheck" "rc=$? $(grep 'ERROR SUMMARY' $OUT/ort_cases_memcheck.log)"
fi

fi
if want compute; then
[ -f $M/resnet50/model.onnx ] || timeout 200 $PY $HERE/tests/export_models.py --output-dir $M \
  --models resnet50,mobilenet_v2,efficientnet_b0 > $OUT/export.log 2>&1
step "compute only, batch 256: shardinfer vs PyTorch"
for m in resnet50 mobilenet_v2 efficientnet_b0; do
  timeout 100 $BIN/shardinfer bench --model $M/$m/model.onnx --backend cuda --batch 256 \
    --compute-only --iters 100 >> $OUT/bench_compute.log 2>&1
done
timeout 200 $PY $HERE/bench/torch_compute.py --iters 50 > $OUT/torch_compute.log 2>&1
for m in resnet50 mobilenet_v2 efficientnet_b0; do
  s=$(grep "model=$M/$m/" $OUT/bench_compute.log | grep -o 'images_per_s=[0-9.]*' | cut -d= -f2)
  t=$(grep "model=$m " $OUT/torch_compute.log | grep best_mode | grep -o 'images_per_s=[0-9.]*' | cut -d= -f2)
  row "compute $m b256 fp16: shardinfer / torch img/s" "$s / $t = $($PY -c "print(f'{${s:-0}/${t:-1}:.2f}x')")"
done
for m in mobilenet_v2 efficientnet_b0; do # our depthwise kernel against cuDNN's (the switch)
  for rep in 1 2 3; do for dw in 0 1; do
    SI_CUDNN_DEPTHWISE=$dw timeout 100 $BIN/shardinfer bench --model $M/$m/model.onnx \
      --backend cuda --batch 256 --compute-only --iters 100 > $OUT/bench_ab_${m}_$dw.log 2>&1
    row "compute $m b256 fp16, SI_CUDNN_DEPTHWISE=$dw, run $rep" "$(grep -o 'images_per_s=[0-9.]*' $OUT/bench_ab_${m}_$dw.log)"
  done; done
  timeout 100 $BIN/shardinfer bench --model $M/$m/model.onnx --backend cuda --batch 256 \
    --iters 5 --profile > $OUT/profile_$m.log 2>&1
done

fi
if want transformers; then
step "transformer-family models (timm), both exporters: parity and compute vs PyTorch"
TM=/tmp/si_tmodels; TMODELS=${TMODELS:-transformers}
timeout 900 $PY $HERE/tests/export_models.py --output-dir $TM --models $TMODELS \
  > $OUT/export_transformers.log 2>&1 || row "export transformers" "failed"
for p in "fp32 --max-rel 1e-4 --vs-cpu 1e-4" "fp16 --no-ref --vs-cpu 1e-2" "bf16 --no-ref --vs-cpu 3e-2"; do
  set -- $p
  timeout 600 $BIN/run_onnx_cases --backend cuda --precision $p $TM > $OUT/tmodels_$1.log 2>&1
  row "transformers cuda $1 (${*:2})" "rc=$? $(tail -1 $OUT/tmodels_$1.log)"
done
for d in $TM/*.legacy; do
  m=$(basename $d .legacy)
  timeout 120 $BIN/shardinfer bench --model $d/model.onnx --backend cuda --batch 256 \
    --compute-only --iters 50 > $OUT/tbench_$m.log 2>&1
  s=$(grep -o 'images_per_s=[0-9.]*' $OUT/tbench_$m.log | head -1 | cut -d= -f2)
  timeout 300 $PY $HERE/bench/torch_compute.py --models $m --iters 20 --modes ${TMODES:-eager,graph} \
    > $OUT/ttorch_$m.log 2>&1
  t=$(grep best_mode $OUT/ttorch_$m.log | grep -o 'images_per_s=[0-9.]*' | cut -d= -f2)
  row "compute $m b256 fp16: shardinfer / torch img/s" "$s / $t = $($PY -c "print(f'{${s:-0}/${t:-1}:.2f}x')") ($(grep -o 'best_mode=[a-z]*' $OUT/ttorch_$m.log))"
done

fi
if want e2e_clip; then
step "end to end: CLIP ViT-B/16 embeddings (bicubic, CLIP mean/std, float16) vs the PyTorch pipeline"
[ -f $W/set.h5 ] || $PY $HERE/bench/repeat_set.py $SET150 $W/set.h5 --count $N > $OUT/set.log 2>&1
timeout 500 $PY $HERE/bench/peer_harness.py --set $W/set.h5 --arch clip_vit_b_16 --ranks 1 \
  --batch 256 --torch-python "$(command -v python3)" --shardinfer $BIN/shardinfer --device cuda \
  --work $W/peer_clip --post embed --embed-dtype float16 --interpolation bicubic --resize 224 \
  --mean 0.4815,0.4578,0.4082 --std 0.2686,0.2613,0.2758 \
  --si-args "--backend cuda --precision fp16" > $OUT/peer_clip.log 2>&1
row "e2e CLIP embed 1 GPU (peer_harness)" "rc=$? $(grep 'shardinfer / PyTorch' $OUT/peer_clip.log)"
timeout 100 $BIN/shardinfer bench decode $SET150 --threads 16 --interpolation bicubic --resize 224 \
  > $OUT/decode_clip.log 2>&1
row "decode alone, bicubic 224, 16 threads" "$(grep -o 'threads=16 images_per_s=[0-9.]*' $OUT/decode_clip.log)"
timeout 100 $BIN/shardinfer bench --model $W/peer_clip/clip_vit_b_16.onnx --backend cuda --batch 256 \
  --iters 20 > $OUT/gpu_alone_clip.log 2>&1
row "CLIP GPU alone with copies (bench)" "$(grep -o 'images_per_s=[0-9.]*' $OUT/gpu_alone_clip.log)"

fi
if want e2e; then
step "end to end: JPEGs in HDF5 -> scores in HDF5, resnet50, vs the PyTorch pipeline"
$PY $HERE/bench/repeat_set.py $SET150 $W/set.h5 --count $N > $OUT/set.log 2>&1
timeout 400 $PY $HERE/bench/peer_harness.py --set $W/set.h5 --arch resnet50 --ranks 1 --batch 256 \
  --torch-python "$(command -v python3)" --shardinfer $BIN/shardinfer --device cuda \
  --work $W/peer --si-args "--backend cuda --precision fp16" > $OUT/peer_e2e.log 2>&1
row "e2e resnet50 1 GPU (peer_harness)" "rc=$? $(grep 'shardinfer / PyTorch' $OUT/peer_e2e.log)"
ONNX=$W/peer/resnet50.onnx
timeout 100 $BIN/shardinfer bench decode $SET150 --threads 16 > $OUT/decode_alone.log 2>&1
row "decode alone, 16 threads" "$(grep -o 'threads=16 images_per_s=[0-9.]*' $OUT/decode_alone.log)"
timeout 100 $BIN/shardinfer bench --model $ONNX --backend cuda --batch 256 --iters 20 > $OUT/gpu_alone.log 2>&1
row "GPU alone with copies (bench, no --compute-only)" "$(grep -o 'images_per_s=[0-9.]*' $OUT/gpu_alone.log)"
for np in 1 2; do
  timeout 200 mpirun -np $np --bind-to none $BIN/shardinfer run --model $ONNX --input $W/set.h5 \
    --output $W/np$np.h5 --overwrite --backend cuda --batch 256 --progress none > $OUT/run_np$np.log 2>&1
  row "run --backend cuda -np $np (one GPU)" "rc=$? $(grep '^shardinfer:' $OUT/run_np$np.log | cut -c1-150)"
done
$PY - $W/np1.h5 $W/np2.h5 $W/peer/shardinfer.h5 <<'PYEOF' >> $OUT/table.txt 2>&1
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
sa, sb = a["status"][:], b["status"][:]
ca, cb = a["topk_class"][:], b["topk_class"][:]
pa, pb = a["topk_prob"][:], b["topk_prob"][:]
print(f"np1 vs np2: statuses equal {np.mean(sa == sb) * 100:.2f}%, top-5 classes equal "
      f"{np.mean(np.all(ca == cb, axis=1)) * 100:.2f}%, max |score diff| {np.abs(pa - pb).max():.3g}")
PYEOF
timeout 200 $BIN/shardinfer run --model $ONNX --input $W/set.h5 --output $W/fp32.h5 --overwrite \
  --backend cuda --precision fp32 --batch 256 --progress none > $OUT/run_fp32.log 2>&1
$PY - $W/fp32.h5 $W/np1.h5 <<'PYEOF' >> $OUT/table.txt 2>&1
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
ok = (a["status"][:] == 0) & (b["status"][:] == 0)
print(f"fp16 vs fp32 (GPU) on {ok.sum()} photos: top-1 agreement "
      f"{np.mean(a['topk_class'][:, 0][ok] == b['topk_class'][:, 0][ok]) * 100:.2f}%")
PYEOF
fi
if want resize; then
step "--resize-on cpu vs gpu"
[ -f $W/set.h5 ] || $PY $HERE/bench/repeat_set.py $SET150 $W/set.h5 --count $N > $OUT/set.log 2>&1
ONNX=$W/peer/resnet50.onnx; mkdir -p $W/peer
[ -f $ONNX ] || $PY $HERE/bench/torch_peer.py --arch resnet50 --export-onnx $ONNX > $OUT/export_r50.log 2>&1
for r in cpu gpu; do
  timeout 100 $BIN/shardinfer bench decode $SET150 --threads 16 --resize-on $r > $OUT/decode_$r.log 2>&1
  row "decode stage alone, 16 threads, --resize-on $r" "$(grep -o 'threads=16 images_per_s=[0-9.]*' $OUT/decode_$r.log)"
done
run1() { # tag, extra args: one 1-GPU run of the set
  local tag=$1; shift
  timeout 200 $BIN/shardinfer run --model $ONNX --input $W/set.h5 --output $W/r_$tag.h5 \
    --overwrite --backend cuda --batch 256 --progress none --timeline $OUT/timeline_$tag.csv "$@" \
    > $OUT/run_$tag.log 2>&1
  row "run $tag" "rc=$? $(grep -o '[0-9.]* images/s$' $OUT/run_$tag.log) steady $(grep -o 'steady state [0-9.]*' $OUT/run_$tag.log | cut -d' ' -f3)"
}
for rep in a b; do run1 cpu_$rep --resize-on cpu; run1 gpu_$rep --resize-on gpu; done
OMP_WAIT_POLICY=passive run1 gpu_passive --resize-on gpu
run1 gpu_post2 --resize-on gpu --post-threads 2
OMP_WAIT_POLICY=passive run1 cpu_passive --resize-on cpu
$PY - $W/r_cpu_a.h5 $W/r_gpu_a.h5 <<'PYEOF' >> $OUT/table.txt 2>&1
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
ok = (a["status"][:] == 0) & (b["status"][:] == 0)
print(f"--resize-on cpu vs gpu on {ok.sum()} photos: top-1 equal "
      f"{np.mean(a['topk_class'][:, 0][ok] == b['topk_class'][:, 0][ok]) * 100:.2f}%, top-5 equal "
      f"{np.mean(np.all(a['topk_class'][ok] == b['topk_class'][ok], axis=1)) * 100:.2f}%, "
      f"max |prob diff| {np.abs(a['topk_prob'][ok] - b['topk_prob'][ok]).max():.3g}")
PYEOF
fi
if want gpu_decode; then
step "--decode gpu: statuses and scores against --decode cpu, recycled slots, rejected batches, fuzz, memcheck"
rm -rf $W/e2e && cp -r $BIN/e2e $W/e2e
timeout 500 $PY $HERE/tests/e2e.py --shardinfer $BIN/shardinfer --dir $W/e2e gpu-decode \
  > $OUT/gpu_e2e_decode.log 2>&1
row "gpu_e2e_decode (statuses = cpu, slots 1 = 3, np2, rejected)" "rc=$? $(tail -1 $OUT/gpu_e2e_decode.log)"
timeout 500 $PY $HERE/tests/e2e.py --shardinfer $BIN/shardinfer --dir $W/e2e gpu-decode-fuzz \
  --seconds ${FUZZ_S:-240} > $OUT/gpu_decode_fuzz.log 2>&1
rc=$?; row "gpu_decode_fuzz (${FUZZ_S:-240} s)" "rc=$rc $(tail -1 $OUT/gpu_decode_fuzz.log | cut -c1-200)"
[ $rc -eq 0 ] || tar czf $OUT/fuzz_kept.tgz -C $W/e2e fuzz 2>/dev/null
if [ -n "$SAN" ]; then
  timeout 300 $SAN $BIN/shardinfer run --model $W/e2e/tiny.onnx --input $W/e2e/gpu_decode_big.h5 \
    --output $W/san.h5 --overwrite --backend cuda --decode gpu --batch 32 --progress none \
    > $OUT/memcheck_decode.log 2>&1
  row "compute-sanitizer memcheck, --decode gpu" "rc=$? $(grep -o 'ERROR SUMMARY: [0-9]* errors' $OUT/memcheck_decode.log) $(grep -o '[0-9]* images decoded by the GPU' $OUT/memcheck_decode.log)"
fi

fi
if want decode_bench; then
step "end to end with --decode gpu and cpu: ResNet-50 and MobileNetV2 FP16, peers beside"
[ -f $W/set.h5 ] || $PY $HERE/bench/repeat_set.py $SET150 $W/set.h5 --count $N > $OUT/set.log 2>&1
mkdir -p $W/peer
for a in resnet50 mobilenet_v2; do
  [ -f $W/peer/$a.onnx ] || $PY $HERE/bench/torch_peer.py --arch $a --export-onnx $W/peer/$a.onnx \
    > $OUT/export_$a.log 2>&1
  timeout 100 $BIN/shardinfer bench --model $W/peer/$a.onnx --backend cuda --batch 256 --iters 30 \
    --compute-only > $OUT/compute_$a.log 2>&1
  row "$a compute only (bench --compute-only)" "$(grep -o 'images_per_s=[0-9.]*' $OUT/compute_$a.log)"
done
if [ -x $BIN/test_gpu_engine ]; then # the slot ring's steady state, the JPEG path's included
  [ -f $M/mobilenet_v2/model.onnx ] || timeout 200 $PY $HERE/tests/export_models.py \
    --output-dir $M --models mobilenet_v2 > $OUT/export_models.log 2>&1
  timeout 300 $BIN/test_gpu_engine $M/mobilenet_v2/model.onnx > $OUT/test_gpu_engine.log 2>&1
  row "test_gpu_engine (mobilenet_v2; jpeg steady state)" "rc=$? $(grep '^jpeg:' $OUT/test_gpu_engine.log | cut -c1-150)"
fi
wall() { $PY -c "import sys; print(f'{$N / ($2 - $1):.1f} images/s, wall {$2 - $1:.2f} s')"; }
run1() { # tag, model, extra args: one 1-GPU run of the set; the whole command timed from outside
  local tag=$1 a=$2 t0 rc; shift 2
  t0=$(date +%s.%N)
  timeout 200 $BIN/shardinfer run --model $W/peer/$a.onnx --input $W/set.h5 --output $W/r_$tag.h5 \
    --overwrite --backend cuda --batch 256 --progress none --timeline $OUT/tl_$tag.csv "$@" \
    > $OUT/run_$tag.log 2>&1
  rc=$?
  row "run $tag" "rc=$rc whole $(wall $t0 $(date +%s.%N)), steady $(grep -o 'steady state [0-9.]*' $OUT/run_$tag.log | cut -d' ' -f3) $(grep -o '[0-9]* images decoded by the GPU' $OUT/run_$tag.log)"
}
run1 r50_gpu resnet50 --decode gpu
run1 r50_gpu_share0 resnet50 --decode gpu --decode-cpu-share 0
run1 r50_gpu_exact resnet50 --decode gpu-exact
run1 r50_cpu resnet50 --decode cpu
run1 mnv2_gpu mobilenet_v2 --decode gpu
run1 mnv2_cpu mobilenet_v2 --decode cpu
t0=$(date +%s.%N)
timeout 200 mpirun -np 2 --bind-to none $BIN/shardinfer run --model $W/peer/resnet50.onnx \
  --input $W/set.h5 --output $W/r_np2.h5 --overwrite --backend cuda --batch 256 --progress none \
  --decode gpu > $OUT/run_r50_np2.log 2>&1
row "run r50_gpu, 2 ranks on the one GPU" "rc=$? whole $(wall $t0 $(date +%s.%N)), steady $(grep -o 'steady state [0-9.]*' $OUT/run_r50_np2.log | cut -d' ' -f3)"
t0=$(date +%s.%N)
timeout 300 $PY $HERE/bench/torch_gpu_peer.py --arch resnet50 --input $W/set.h5 \
  --output $W/torch_gpu.h5 > $OUT/torch_gpu_peer.log 2>&1
row "PyTorch GPU-decode peer (torch_gpu_peer.py)" "rc=$? whole $(wall $t0 $(date +%s.%N)); its own $(grep -o 'images_per_s=[0-9.]*' $OUT/torch_gpu_peer.log | tr '\n' ' ')"
# the DataLoader peer over the same images (its start weighs as much as ours does: a smaller set
# would understate its rate)
t0=$(date +%s.%N)
timeout 300 torchrun --nproc-per-node 1 $HERE/bench/torch_peer.py --arch resnet50 \
  --input $W/set.h5 --output $W/torch_dl.h5 --workers 16 > $OUT/torch_dl_peer.log 2>&1
row "PyTorch DataLoader peer (torch_peer.py)" "rc=$? whole $(wall $t0 $(date +%s.%N)); its own count $(grep -o "[0-9.]* images/s" $OUT/torch_dl_peer.log | tail -1)"
fi
echo "== done: $(date +%T)"; cat $OUT/table.txt
