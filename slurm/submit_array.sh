#!/bin/bash
# Submits a very large multi-file set as a job array of K tasks (each a slurm/shardinfer.sbatch
# run over its consecutive group of the list's files) and the merge step after it.
#
#   slurm/submit_array.sh K [sbatch options ...] -- --model M.onnx --input LIST --output R.h5 ...
#
# The sbatch options (before --) go to the array's tasks, for example --nodes, --gpus-per-task,
# --time; the options after -- go to `shardinfer run`. Prints the two job ids.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k=${1:?usage: submit_array.sh K [sbatch options] -- run options}
shift
sb=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sb+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = "--output" ] && out=${args[i + 1]:-}; done
[ -n "$out" ] || { echo "submit_array.sh: --output RESULT.h5 is needed" >&2; exit 2; }
array=$(sbatch --parsable --array=0-$((k - 1)) "${sb[@]}" "$here/shardinfer.sbatch" "$@")
array=${array%%;*}
merge=$(sbatch --parsable --dependency=afterok:"$array" "$here/merge.sbatch" "$out" "$k")
echo "array job $array ($k tasks), merge job ${merge%%;*}"
