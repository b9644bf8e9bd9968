#!/bin/bash
# A scaling sweep: submits slurm/shardinfer.sbatch once per task count, one job after another
# (so the runs do not share the machine), and writes a CSV of the results when they are done.
#
#   slurm/sweep.sh [--tasks "1 2 4 8"] [--per-node G] [--weak] [--csv FILE] [sbatch options] -- \
#       --model M.onnx --input LIST --output DIR/sweep.h5 [run options]
#
# --per-node G (default 8): tasks per node; n tasks run on ceil(n / G) nodes.
# Strong scaling (default): every job runs the whole input. --weak: the job with n tasks runs the
# first n/max of the list's files (the input must be a list file with a multiple of the largest
# task count of files). Tasks are ranks: one per GPU with --gpus-per-task=1 (the template's
# default). Each job's result goes to DIR/sweep_n<N>.h5 and its log to DIR/sweep_n<N>.log;
# the CSV has: tasks, images, seconds, images_per_s, efficiency (against the smallest count).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tasks="1 2 4 8" per=8 weak=0 csv=""
sb=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --tasks) tasks=$2; shift 2 ;;
    --weak) weak=1; shift ;;
    --per-node) per=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    *) sb+=("$1"); shift ;;
  esac
done
[ "${1:-}" = "--" ] && shift
args=("$@") out="" in_at=-1 out_at=-1
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = "--output" ] && out=${args[i + 1]:-} out_at=$((i + 1))
  [ "${args[i]}" = "--input" ] && in_at=$((i + 1))
done
[ -n "$out" ] && [ "$in_at" -ge 0 ] || { echo "sweep.sh: --input and --output are needed" >&2; exit 2; }
dir=$(dirname "$out")
csv=${csv:-$dir/sweep.csv}
max=0
for n in $tasks; do [ "$n" -gt "$max" ] && max=$n; done
dep=() jobs=()
for n in $tasks; do
  a=("${args[@]}")
  a[out_at]=$dir/sweep_n$n.h5
  if [ "$weak" = 1 ]; then
    mapfile -t files < <(grep -v '^\s*\(#\|$\)' "${args[in_at]}")
    take=$(( ${#files[@]} * n / max ))
    listdir=$(cd "$(dirname "${args[in_at]}")" && pwd)
    : > "$dir/sweep_n$n.txt"
    for f in "${files[@]:0:take}"; do
      case "$f" in /*) echo "$f" ;; *) echo "$listdir/$f" ;; esac >> "$dir/sweep_n$n.txt"
    done
    a[in_at]=$dir/sweep_n$n.txt
  fi
  nodes=$(((n + per - 1) / per)) tpn=$((n < per ? n : per))
  id=$(sbatch --parsable --nodes="$nodes" --ntasks-per-node="$tpn" --output="$dir/sweep_n$n.log" \
       "${dep[@]}" "${sb[@]}" \
       "$here/shardinfer.sbatch" "${a[@]}" --overwrite)
  id=${id%%;*}
  jobs+=("$n:$id")
  dep=(--dependency=afterany:"$id")
  echo "sweep: $n task(s): job $id"
done
# the CSV, once the last job has ended
last=${jobs[-1]#*:}
while squeue -h -j "$last" 2>/dev/null | grep -q .; do sleep 5; done
echo "tasks,images,seconds,images_per_s,efficiency" > "$csv"
base=""
for j in "${jobs[@]}"; do
  n=${j%%:*}
  line=$(grep -h "^shardinfer: .* images (" "$dir/sweep_n$n.log" | tail -1 || true)
  imgs=$(sed -n 's/^shardinfer: \([0-9]*\) images.*/\1/p' <<< "$line")
  secs=$(sed -n 's/.* in \([0-9.]*\) s: .*/\1/p' <<< "$line")
  rate=$(sed -n 's/.*: \([0-9.]*\) images\/s$/\1/p' <<< "$line")
  [ -n "$rate" ] || { echo "$n,,,,failed" >> "$csv"; continue; }
  [ -n "$base" ] || base=$(awk -v r="$rate" -v n="$n" 'BEGIN { print r / n }')
  eff=$(awk -v r="$rate" -v n="$n" -v b="$base" -v w="$weak" 'BEGIN { printf "%.3f", r / (n * b) }')
  echo "$n,$imgs,$secs,$rate,$eff" >> "$csv"
done
echo "sweep: $csv"
cat "$csv"
