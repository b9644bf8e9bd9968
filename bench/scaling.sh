#!/bin/bash
# Strong and weak scaling of `shardinfer run --backend cuda` over 1, 2, 4, 8 ... GPUs of one
# machine, the PyTorch peer at each count, the per-rank stage breakdown, the NCCL/host gather
# bench and stage timelines, in one command on the GPU machine:
#   . .devrt/env.sh && bench/scaling.sh BIN_DIR SET150.h5 OUT_DIR
# BIN_DIR holds shardinfer (and gather_bench, if built) as for bench/gpu_session.sh; SET150.h5 a
# small packed set (datasets/make_bench_set.py's photos), repeated by bench/repeat_set.py into the
# sets measured. OUT_DIR gets logs/, scaling.csv, stages.csv, gather.csv, timeline_*.csv and
# table.txt (printed last); bench/plot_perf.py OUT_DIR --out docs/img draws them. The device tool
# returns only a few files from its $OUT: write OUT_DIR elsewhere and tar it into $OUT, e.g.
#   bench/scaling.sh BIN SET150.h5 /tmp/scal; tar czf $OUT/scal.tgz -C /tmp scal
# With the defaults, 2 H200 and 32 cores took 132 s (the peer 90 s of them).
# Sizes and choices, from the environment:
#   SI_STRONG_IMAGES  images of the strong-scaling set, the same at every GPU count (50000)
#   SI_WEAK_IMAGES    images per GPU of the weak-scaling sets (25000)
#   SI_GPU_COUNTS     the GPU counts measured (1 2 4 8 ... up to the GPUs found, and that count)
#   SI_ARCH, SI_BATCH torchvision architecture exported by bench/torch_peer.py (resnet50), batch (256)
#   SI_RUN_ARGS       more `shardinfer run` options (e.g. "--precision fp16")
#   SI_BIND           auto: each rank bound to its own cores/G cores (--map-by slot:PE=c) when
#                     mpirun accepts it, else --bind-to none; none: always --bind-to none
#   SI_PEER           1 (default): the PyTorch peer at each count; 0: skip it
#   SI_PEER_IMAGES    images of the peer's set (SI_STRONG_IMAGES: the peer reads and decodes on
#                     the CPU, so a smaller set keeps a call within the device's 10 minutes)
#   SI_PEER_ARGS      more bench/peer_harness.py options (--post embed ... for the CLIP tower)
#   SI_BASE_IMAGES    a set of more images is an input list naming one set of this many (a
#                     multiple) through links, for sizes the disk would not hold (125000)
#   SI_GATHER_ARGS    gather_bench options (its defaults: --rows 256,4096,65536 --dims 512,2048)
#   SI_BUDGET_S       seconds for the whole script (540: the GPU machine stops a command at 600);
#                     steps that would start later are skipped and marked so in the table
#   SI_WORK           scratch for the sets, model and results (/tmp/si_scaling)
#   SI_PYTHON         the python with torch, torchvision and h5py (python3); SI_PEER_DEVICE (cuda)
set -u
if [ $# -lt 3 ]; then
    sed -n '2,11p' "$0"
    exit 2
fi
BIN=$(realpath "$1")
SET_SRC=$(realpath "$2")
mkdir -p "$3/logs"
OUT=$(realpath "$3")
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${SI_PYTHON:-python3}
N_STRONG=${SI_STRONG_IMAGES:-50000}
N_WEAK=${SI_WEAK_IMAGES:-25000}
ARCH=${SI_ARCH:-resnet50}
BATCH=${SI_BATCH:-256}
RUN_ARGS=${SI_RUN_ARGS:-}
BIND=${SI_BIND:-auto}
BUDGET=${SI_BUDGET_S:-540}
W=${SI_WORK:-/tmp/si_scaling}
mkdir -p "$W/peer"
T_START=$SECONDS
RUNS=$OUT/runs.txt # one line per measured run, read by the summary at the end
: >"$RUNS"
: >"$OUT/skipped.txt"

step() { echo "== $1: $(date +%T) ($((SECONDS - T_START)) s of $BUDGET)"; }
# seconds left in the budget; a step needs at least $1 of them
left() { echo $((BUDGET - (SECONDS - T_START))); }
can_start() {
    if [ "$(left)" -lt "$1" ]; then
        echo "$2: skipped, $(left) s left in SI_BUDGET_S" | tee -a "$OUT/skipped.txt"
        return 1
    fi
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

# --- the machine -------------------------------------------------------------------------------
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    G=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
elif command -v nvidia-smi >/dev/null; then
    G=$(nvidia-smi -L | grep -c '^GPU')
else
    G=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi
if [ "$G" -lt 1 ]; then
    echo "scaling.sh: no GPU found" >&2
    exit 77
fi
CORES=$(nproc)
CPG=${SI_CORES_PER_GPU:-$((CORES / G))}
if [ -n "${SI_GPU_COUNTS:-}" ]; then
    COUNTS=$SI_GPU_COUNTS
else
    COUNTS=""
    for g in 1 2 4 8 16 32 64; do [ "$g" -le "$G" ] && COUNTS="$COUNTS $g"; done
    case " $COUNTS " in *" $G "*) ;; *) COUNTS="$COUNTS $G" ;; esac
fi
GMAX=$(echo "$COUNTS" | tr ' ' '\n' | sort -n | tail -1)
{
    echo "date: $(date -Is)"
    echo "host: $(hostname), $CORES cores, $G GPUs, $CPG cores per GPU; counts measured: $COUNTS"
    nvidia-smi -L 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1
    nvidia-smi topo -m 2>/dev/null
    mpirun --version 2>/dev/null | head -1
    echo "strong $N_STRONG images; weak $N_WEAK per GPU; $ARCH batch $BATCH; run args: $RUN_ARGS"
} >"$OUT/machine.txt" 2>&1
head -2 "$OUT/machine.txt" | tail -1

# threads and binding per rank: every GPU comes with its share of the machine's cores (cores /
# GPUs found, or SI_CORES_PER_GPU) at every count, so a count of g GPUs measures g GPUs and
# their cores, not one GPU with the whole machine's CPUs
threads_for() { echo $((CPG > 0 ? CPG : 1)); }
declare -A BINDS
bind_for() {
    local g=$1 c
    c=$(threads_for "$g")
    if [ -z "${BINDS[$g]:-}" ]; then
        BINDS[$g]="--bind-to none"
        if [ "$BIND" = auto ] && timeout 30 mpirun -np "$g" --map-by "slot:PE=$c" --bind-to core \
            true >/dev/null 2>&1; then
            BINDS[$g]="--map-by slot:PE=$c --bind-to core"
        fi
    fi
    echo "${BINDS[$g]}"
}

# --- the model and the sets --------------------------------------------------------------------
step "model and sets"
ONNX=$W/peer/$ARCH.onnx # where peer_harness.py looks for it, so it exports only once
if [ ! -s "$ONNX" ]; then
    timeout 300 "$PY" "$HERE/bench/torch_peer.py" --arch "$ARCH" --export-onnx "$ONNX" \
        >"$OUT/logs/export.log" 2>&1 || { echo "scaling.sh: export failed, see $OUT/logs/export.log" >&2; exit 1; }
fi
BASE=${SI_BASE_IMAGES:-125000}
make_set() { # make_set COUNT -> prints the path of a set (or input list) of COUNT images
    local f=$W/set_$1.h5 k b
    if [ "$1" -gt "$BASE" ] && [ $(($1 % BASE)) = 0 ]; then
        b=$(make_set "$BASE")
        f=$W/list_$1.txt
        : >"$f"
        for k in $(seq 1 $(($1 / BASE))); do
            ln -sf "$b" "$W/link_${1}_$k.h5"
            echo "$W/link_${1}_$k.h5" >>"$f"
        done
        echo "$f"
        return
    fi
    if [ ! -s "$f" ]; then
        "$PY" "$HERE/bench/repeat_set.py" "$SET_SRC" "$f.tmp" --count "$1" >>"$OUT/logs/sets.log" 2>&1 &&
            mv "$f.tmp" "$f"
    fi
    echo "$f"
}
SET_STRONG=$(make_set "$N_STRONG")
TIMELINE=0
if timeout 60 "$BIN/shardinfer" run --help 2>&1 | grep -q -- '--timeline'; then TIMELINE=1; fi
echo "shardinfer run --timeline: $([ $TIMELINE = 1 ] && echo supported || echo 'not supported')"

# si_run KIND G SET IMAGES: one `mpirun -np G shardinfer run`, its full log kept
si_run() {
    local kind=$1 g=$2 set=$3 n=$4 c bind log t0 rc parts extra=()
    c=$(threads_for "$g")
    bind=$(bind_for "$g")
    log=$OUT/logs/${kind}_g$g.log
    can_start 30 "$kind g=$g" || { echo "$kind $g $n skipped - - - -" >>"$RUNS"; return; }
    if [ $TIMELINE = 1 ] && [ "$kind" = strong ] && { [ "$g" = 1 ] || [ "$g" = "$GMAX" ]; }; then
        extra=(--timeline "$OUT/timeline_g$g.csv")
    fi
    t0=$(now)
    # shellcheck disable=SC2086 # $bind and $RUN_ARGS are word lists
    timeout "$(left)" mpirun -np "$g" $bind -x OMP_NUM_THREADS="$c" "$BIN/shardinfer" run \
        --model "$ONNX" --input "$set" --output "$W/${kind}_g$g.h5" --overwrite --backend cuda \
        --batch "$BATCH" --threads "$c" --progress none "${extra[@]}" $RUN_ARGS >"$log" 2>&1
    rc=$?
    if [ ${#extra[@]} -gt 0 ] && compgen -G "${extra[1]}.rank*" >/dev/null; then
        # more than one rank: FILE.rank0, FILE.rank1, ... (src/cli/run.c) joined into FILE
        parts=("${extra[1]}".rank*)
        { head -n 1 "${parts[0]}"; tail -q -n +2 "${parts[@]}"; } >"${extra[1]}" && rm -f "${parts[@]}"
    fi
    echo "$kind $g $n $rc $(since "$t0") $log $c ${bind// /_}" >>"$RUNS"
    printf '  %-6s g=%-2s %6s images rc=%s %s\n' "$kind" "$g" "$n" "$rc" \
        "$(grep -m1 -o ' in [0-9.]* s: [0-9.]* images/s' "$log")"
}

step "strong scaling: $N_STRONG images"
for g in $COUNTS; do si_run strong "$g" "$SET_STRONG" "$N_STRONG"; done

step "weak scaling: $N_WEAK images per GPU"
for g in $COUNTS; do
    can_start 40 "weak set g=$g" || { echo "weak $g $((g * N_WEAK)) skipped - - - -" >>"$RUNS"; continue; }
    si_run weak "$g" "$(make_set $((g * N_WEAK)))" $((g * N_WEAK))
done

step "gather: NCCL vs host MPI"
if [ -x "$BIN/gather_bench" ]; then
    for g in $COUNTS; do
        [ "$g" -ge 2 ] || continue
        can_start 60 "gather_bench g=$g" || continue
        # shellcheck disable=SC2086
        timeout "$(left)" mpirun -np "$g" --bind-to none -x OMP_NUM_THREADS="$(threads_for "$g")" \
            "$BIN/gather_bench" --csv "$OUT/gather_g$g.csv" ${SI_GATHER_ARGS:-} \
            >"$OUT/logs/gather_g$g.log" 2>&1
        echo "  gather_bench g=$g rc=$?"
    done
else
    echo "  no gather_bench in $BIN" | tee -a "$OUT/skipped.txt"
fi

if [ "${SI_PEER:-1}" = 1 ]; then
    N_PEER=${SI_PEER_IMAGES:-$N_STRONG}
    SET_PEER=$(make_set "$N_PEER")
    step "the PyTorch peer: $N_PEER images"
    for g in $COUNTS; do
        log=$OUT/logs/peer_g$g.log
        can_start 90 "peer g=$g" || { echo "peer $g $N_PEER skipped - - - -" >>"$RUNS"; continue; }
        t0=$(now)
        # shellcheck disable=SC2086 # SI_PEER_ARGS is a word list
        timeout "$(left)" "$PY" "$HERE/bench/peer_harness.py" --set "$SET_PEER" --arch "$ARCH" \
            --ranks "$g" --batch "$BATCH" --torch-python "$(command -v "$PY")" \
            --shardinfer "$BIN/shardinfer" --device "${SI_PEER_DEVICE:-cuda}" --work "$W/peer" \
            --threads "$(threads_for "$g")" --workers "$(threads_for "$g")" \
            --si-args "--backend cuda $RUN_ARGS" ${SI_PEER_ARGS:-} >"$log" 2>&1
        rc=$?
        echo "peer $g $N_PEER $rc $(since "$t0") $log - -" >>"$RUNS"
        echo "  peer g=$g rc=$rc $(grep -m1 'shardinfer / PyTorch' "$log" | cut -d';' -f1)"
    done
fi

# --- the CSVs and the table --------------------------------------------------------------------
step "summary"
"$PY" - "$OUT" "$W" <<'PYEOF'
"""runs.txt + the logs -> scaling.csv, stages.csv, gather.csv, table.txt"""
import csv, glob, os, re, sys

out, work = sys.argv[1], sys.argv[2]
runs = [l.split() for l in open(os.path.join(out, "runs.txt")) if l.strip()]
num = r"([0-9.]+)"


def grab(pat, text, cast=float):
    m = re.search(pat, text, re.M)
    return cast(m.group(1)) if m else None


def stage_rows(text):
    """The per-rank table of shardinfer's summary, read by its header (src/cli/run.c,
    print_summary): rank images failed first-result [s] busy%: STAGES... total [s] peak-MB."""
    lines = text.splitlines()
    for k, l in enumerate(lines):
        h = l.split()
        if h[:2] == ["rank", "images"] and "busy%:" in h:
            break
    else:
        return []
    b, t = h.index("busy%:"), h.index("total")
    names = {"images": "rank_images", "first-result": "first_result_s", "total": "total_s",
             "peak-MB": "peak_mb"}
    cols = [names.get(x, x) for x in h[:b]] + [x + "_pct" for x in h[b + 1:t]] + \
           [names.get(x, x) for x in h[t:]]
    rows = []
    for l in lines[k + 1:]:
        v = [x for x in l.split() if x != "s"]
        if not v or not v[0].isdigit() or len(v) != len(cols):
            break
        rows.append(dict(zip(cols, v)))
    return rows


scal, stages, first = [], [], {}
for kind, g, n, rc, wall, log, threads, bind in runs:
    g, n = int(g), int(n)
    row = {"kind": kind, "gpus": g, "images": n, "rc": rc, "log": os.path.relpath(log, out)
           if log != "-" else "", "threads_per_rank": threads, "bind": bind.replace("_", " ")}
    if rc == "skipped":
        scal.append(row)
        continue
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    if kind == "peer":
        tw = grab(r"^PyTorch peer\s+[0-9.]+\s+" + num, text)
        row.update(seconds=tw, images_per_s=n / tw if tw else None,
                   si_images_per_s=grab(r"^shardinfer\s+" + num + r"\s+[0-9.]+\s*$", text),
                   vs_shardinfer=grab(r"shardinfer / PyTorch = " + num + "x", text),
                   top1_agreement=grab(r"top-1 agreement " + num + "%", text))
    else:
        wall = float(wall)
        si_s = grab(r"^shardinfer: \d+ images .* in " + num + " s: ", text)
        row.update(seconds=wall, images_per_s=n / wall if rc == "0" else None,
                   si_seconds=si_s, si_images_per_s=n / si_s if si_s and rc == "0" else None,
                   steady_images_per_s=grab(r"steady state " + num + " images/s", text),
                   first_result_s=grab(r"time to first result " + num + " s", text),
                   setup_s=grab(r"after " + num + " s of engine set-up", text))
        for r in stage_rows(text):
            stages.append({"kind": kind, "gpus": g, "images": n, **r})
        if kind == "strong" and rc == "0":
            row["h5"] = os.path.join(work, f"strong_g{g}.h5")
    scal.append(row)

# efficiency: images/s at g over g times images/s at the smallest count of the same kind
for kind in ("strong", "weak", "peer"):
    mine = [r for r in scal if r["kind"] == kind and r.get("images_per_s")]
    if mine:
        base = min(mine, key=lambda r: r["gpus"])
        for r in mine:
            r["efficiency"] = r["images_per_s"] * base["gpus"] / (r["gpus"] * base["images_per_s"])

# every strong run must give the results of the smallest one: statuses and top-5 classes
strong = sorted((r for r in scal if r.get("h5")), key=lambda r: r["gpus"])
if strong:
    try:
        import h5py, numpy as np
        with h5py.File(strong[0]["h5"], "r") as f:
            s0, c0 = f["status"][:], f["topk_class"][:]
        for r in strong:
            with h5py.File(r["h5"], "r") as f:
                s, c = f["status"][:], f["topk_class"][:]
            same = (s == s0) & np.all(c == c0, axis=1)
            r["same_as_g1_pct"] = round(100 * float(np.mean(same)), 3)
    except Exception as e:  # the comparison is a check, not the measurement
        print(f"scaling.sh: results not compared: {e}")

fields = ["kind", "gpus", "images", "seconds", "images_per_s", "efficiency", "si_seconds",
          "si_images_per_s", "steady_images_per_s", "first_result_s", "setup_s",
          "vs_shardinfer", "top1_agreement", "same_as_g1_pct", "threads_per_rank", "bind", "rc",
          "log"]
with open(os.path.join(out, "scaling.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fields, extrasaction="ignore")
    w.writeheader()
    for r in scal:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
if stages:
    keys = list(dict.fromkeys(k for r in stages for k in r))
    with open(os.path.join(out, "stages.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(stages)
gathers = sorted(glob.glob(os.path.join(out, "gather_g*.csv")))
grows = [r for p in gathers for r in csv.DictReader(open(p))]
if grows:
    with open(os.path.join(out, "gather.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, list(grows[0]))
        w.writeheader()
        w.writerows(grows)

fmt = lambda v, p=1: "-" if v is None else f"{v:,.{p}f}"
lines = [f"{'kind':7}{'GPUs':>5}{'images':>8}{'seconds':>9}{'img/s':>10}{'eff':>7}"
         f"{'steady img/s':>14}{'  notes'}"]
for r in scal:
    note = r["rc"] if r["rc"] in ("skipped",) else ("" if r["rc"] == "0" else f"rc={r['rc']}")
    if r.get("vs_shardinfer"):
        note += f" shardinfer/PyTorch {r['vs_shardinfer']:.2f}x"
    if r.get("same_as_g1_pct") is not None:
        note += f" same as g=1: {r['same_as_g1_pct']}%"
    eff = r.get("efficiency")
    lines.append(f"{r['kind']:7}{r['gpus']:>5}{r['images']:>8}{fmt(r.get('seconds'), 2):>9}"
                 f"{fmt(r.get('images_per_s')):>10}{fmt(eff and 100 * eff, 0) + '%' if eff else '-':>7}"
                 f"{fmt(r.get('steady_images_per_s')):>14}  {note.strip()}")
if grows:
    lines.append("gather (largest size per count): method ranks rows/rank dim GB/s verified")
    for g in sorted({int(r["ranks"]) for r in grows}):
        mine = [r for r in grows if int(r["ranks"]) == g]
        big = max(int(r["bytes_total"]) for r in mine)
        for r in mine:
            if int(r["bytes_total"]) == big:
                lines.append(f"  {r['method']:5} {g:3} {r['rows_per_rank']:>7} {r['dim']:>5} "
                             f"{float(r['gbps']):8.2f}  {'yes' if r['ok'] == '1' else 'WRONG'}")
    if any(r["ok"] != "1" for r in grows):
        lines.append("  GATHER RESULTS WRONG: see logs/gather_g*.log")
skipped = open(os.path.join(out, "skipped.txt")).read().strip()
if skipped:
    lines.append("skipped: " + "; ".join(skipped.splitlines()))
open(os.path.join(out, "table.txt"), "w").write("\n".join(lines) + "\n")
PYEOF
for f in "$OUT"/timeline_*.csv; do [ -e "$f" ] && echo "timeline: $f"; done
echo "== done: $(date +%T), $((SECONDS - T_START)) s; results in $OUT"
cat "$OUT/table.txt"
