#!/bin/bash
# Why a rank slows when the other ranks of its node run (issue 37): the node's CPUs measured
# (host_probe: which CPUs share a core, all-core rate, memory bandwidth), the CPU decoder's rate
# per thread at 16, 32 and 64 threads in one process, then `shardinfer run` (ResNet-50 FP16,
# batch 256, --decode gpu) alone on one GPU and its cores, and as 4 ranks of one mpirun, for each
# count of host threads making the hardware decoder's calls (--decode-parts), in one command:
#   . .devrt/env.sh && bench/rank_contention.sh BIN_DIR SET.h5 OUT_DIR
# BIN_DIR holds shardinfer and host_probe (cc -O2 -fopenmp -pthread bench/host_probe.c); SET.h5
# a small packed set of photos repeated into the sets measured (bench/repeat_set.py). Env:
#   SI_PARTS   the part counts measured (1 2 4 8)    SI_IMAGES  images per rank (48000)
#   SI_RANKS   the rank counts (1 4)                 SI_EXTRA   more runs: "NAME:RANKS:ENV=V,..:ARGS;..."
#   SI_ENV     VAR=V ... for every run               SI_PROBES  0: skip the host probes and CPU decoder
#   SI_ARGS    run options for every run (--decode-wait: every batch splits alike)
set -u
BIN=$(realpath "$1")
SET_SRC=$(realpath "$2")
mkdir -p "$3/logs"
OUT=$(realpath "$3")
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${SI_PYTHON:-python3}
N=${SI_IMAGES:-48000}
PARTS=${SI_PARTS:-1 2 4 8}
RANKS=${SI_RANKS:-1 4}
W=${SI_WORK:-/tmp/si_contention}
mkdir -p "$W"
G=$(nvidia-smi -L | grep -c '^GPU')
CORES=$(nproc)
C=$((CORES / G))

{
    date -Is
    lscpu
    echo "--- thread siblings (the guest's view)"
    cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list \
        /sys/devices/system/cpu/cpu1/topology/thread_siblings_list 2>/dev/null
    nvidia-smi topo -m
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    free -g
} >"$OUT/machine.txt" 2>&1
[ "${SI_PROBES:-1}" = 0 ] || {
echo "== host probes"
{
    "$BIN/host_probe" smt
    for n in 1 16 32 48 64; do [ "$n" -le "$CORES" ] && "$BIN/host_probe" spin "$n"; done
    "$BIN/host_probe" bw
} >"$OUT/host.txt" 2>&1
grep -E '^(smt|spin|bw):' "$OUT/host.txt"
}

echo "== model and set"
ONNX=$W/resnet50.onnx
[ -s "$ONNX" ] || timeout 300 "$PY" "$HERE/bench/torch_peer.py" --arch resnet50 \
    --export-onnx "$ONNX" >"$OUT/logs/export.log" 2>&1 || { echo "export failed"; exit 1; }
SET=$W/set_$N.h5
[ -s "$SET" ] || "$PY" "$HERE/bench/repeat_set.py" "$SET_SRC" "$SET" --count "$N" \
    >"$OUT/logs/set.log" 2>&1
for r in $RANKS; do # r ranks read r links to the one set: N images each
    : >"$W/list_$r.txt"
    for i in $(seq 1 "$r"); do
        ln -sf "$SET" "$W/link_$i.h5"
        echo "$W/link_$i.h5" >>"$W/list_$r.txt"
    done
done

if [ "${SI_PROBES:-1}" != 0 ]; then
    echo "== the CPU decoder alone (libjpeg-turbo, --resize-on gpu's share)"
    "$BIN/shardinfer" bench decode "$SET_SRC" --threads "1,$C,$((2 * C)),$CORES" \
        --resize-on gpu --seconds 2 >"$OUT/decode_cpu.txt" 2>&1
    grep -iE 'threads|images/s' "$OUT/decode_cpu.txt" | head -12
fi

# run NAME RANKS [ENV...] -- [ARGS...]
run() {
    local name=$1 r=$2 env=() args=() v
    shift 2
    for v in ${SI_ENV:-}; do env+=(-x "$v"); done
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env+=(-x "$1"); shift; done
    [ $# -gt 0 ] && shift
    args=("$@")
    local log=$OUT/logs/$name.log in=$SET
    [ "$r" -gt 1 ] && in=$W/list_$r.txt
    local t0=$SECONDS
    # shellcheck disable=SC2068
    timeout 200 mpirun -np "$r" --map-by "slot:PE=$C" --bind-to core ${env[@]+"${env[@]}"} \
        -x OMP_NUM_THREADS="$C" "$BIN/shardinfer" run --model "$ONNX" --input "$in" \
        --output "$W/$name.h5" --overwrite --backend cuda --precision fp16 --batch 256 \
        --threads "$C" --progress none --decode gpu ${SI_ARGS:-} ${args[@]+"${args[@]}"} >"$log" 2>&1
    local rc=$?
    printf '%-14s ranks=%s rc=%s %3ss %s | %s | hw %s | calls %s\n' "$name" "$r" "$rc" \
        $((SECONDS - t0)) "$(grep -m1 -oE 'in [0-9.]+ s: [0-9.]+ images/s' "$log")" \
        "$(grep -m1 -oE 'steady state [0-9.]+' "$log")" \
        "$(grep -m1 -oE '[0-9]+ images decoded by the GPU' "$log" | cut -d' ' -f1)" \
        "$(grep -m1 -oE '[0-9.]+ s of the decode stage' "$log" | cut -d' ' -f1)"
}

echo "== warm-up (autotune cache)"
run warm 1 -- --decode-parts 1 >/dev/null
echo "== runs"
for r in $RANKS; do
    for p in $PARTS; do run "r${r}_p$p" "$r" -- --decode-parts "$p"; done
done
IFS=';' read -r -a extra <<<"${SI_EXTRA:-}"
for e in ${extra[@]+"${extra[@]}"}; do
    IFS=':' read -r name r envs args <<<"$e"
    IFS=',' read -r -a ev <<<"$envs"
    # shellcheck disable=SC2086
    run "$name" "$r" ${ev[@]+"${ev[@]}"} -- $args
done
