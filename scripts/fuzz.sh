#!/usr/bin/env bash
# Builds libFuzzer targets with clang (address + undefined sanitizers) and runs them: one target
# for every kind of file the program reads.
#   scripts/fuzz.sh TARGET [SECONDS]     one target, SECONDS long (default 600; 1800 on request)
#   scripts/fuzz.sh all [SECONDS]        every target in turn, SECONDS each (default 60)
#   scripts/fuzz.sh -j N all [SECONDS]   N targets at a time (each takes one core)
#   scripts/fuzz.sh -b TARGET|all        build only
# Targets (tests/fuzz/fuzz_TARGET.c):
#   model     the ONNX reader, graph builder, shape inference and memory planner
#   decode    JPEG decode, EXIF orientation, resize and crop
#   input     image sources: packed, vlen and dense HDF5 sets written from a recipe; list files,
#             directories, patterns
#   journal   what --resume reads: the journal, the partial result, the undo record
#   result    what show and merge read: result files, a labels file
#   packlist  the list files (and directories) pack reads
# Each target keeps its corpus in build-fuzz/corpus-TARGET (model and decode are seeded with the
# tests' models and JPEGs: run the tests once first; the others with a few recipes). A crash,
# leak, timeout (10 s for one input) or allocation past 2 GB is a finding: its input lands in
# build-fuzz/artifacts/TARGET/ (replay: build-fuzz/fuzz_TARGET FILE), the log in
# build-fuzz/fuzz-TARGET.log, and the exit status is 1. Each run ends with one line: runs,
# exec/s and libFuzzer's final coverage (cov: edges, ft: features).
# SI_FUZZ_SEED=N fixes libFuzzer's seed (the test suite's stage does: the same mutations each
# time from the same recipes, so a red stage is a change's, not the dice's).
# SI_FUZZ_CODE=DIR fuzzes the io/ and src/ of another checkout of shardinfer (a worktree of an
# older commit, to compare) with this checkout's harnesses. Needs clang and libclang-rt
# (scripts/setup.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
code=$(cd "${SI_FUZZ_CODE:-$root}" && pwd)
out=$root/build-fuzz
jobs=1 build_only=0
while getopts "j:b" opt; do
  case $opt in
    j) jobs=$OPTARG ;;
    b) build_only=1 ;;
    *) echo "usage: fuzz.sh [-j N] [-b] TARGET|all [SECONDS]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
all_targets=(model decode input journal result packlist)
what=${1:-model}
if [ "$what" = all ]; then targets=("${all_targets[@]}"); secs=${2:-60}
else targets=("$what"); secs=${2:-600}; fi
case $secs in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a number, not '$secs'" >&2; exit 2 ;; esac

# The C files each target links (the fewest that do: no MPI, no OpenMP), its extra libraries,
# its largest input, and libFuzzer flags of its own.
io_source=(io/source.c io/source_probe.c io/source_paths.c io/source_read.c io/source_describe.c
           io/h5util.c io/beside.c)
configure() {
  libs=() flags=()
  case $1 in
    model)
      # the reader, the graph and every pass: all of src/engine but the backend selection
      # (engine.c), the device plan and the bench driver, so a new pass file joins by itself
      srcs=(src/base/common.c)
      for f in "$code"/src/engine/*.c; do
        case ${f##*/} in engine.c | devplan.c | bench.c) ;; *) srcs+=("src/engine/${f##*/}") ;; esac
      done
      max_len=262144 ;;
    decode) srcs=(src/base/common.c io/jpeg.c io/jpeg_scan.c); libs=(-lturbojpeg); max_len=262144 ;;
    # the recipe targets want their whole recipe from the start, not inputs grown byte by byte
    input) srcs=(src/base/common.c "${io_source[@]}"); libs=(-lxxhash); max_len=4096
      flags=(-len_control=0) ;;
    journal)
      srcs=(src/base/common.c src/base/testpoint.c io/result.c io/tail.c io/undo.c io/resultview.c
            "${io_source[@]}")
      libs=(-lz -lxxhash); max_len=16384; flags=(-len_control=0) ;;
    result)
      srcs=(src/base/common.c src/base/testpoint.c io/result.c io/tail.c io/undo.c io/resultview.c
            io/merge.c "${io_source[@]}")
      libs=(-lz -lxxhash); max_len=4096; flags=(-len_control=0) ;;
    packlist) srcs=(src/base/common.c io/pack.c "${io_source[@]}"); libs=(-lturbojpeg -lxxhash)
      max_len=4096; flags=(-len_control=0) ;;
    *) echo "fuzz.sh: unknown target '$1' (targets: ${all_targets[*]}, all)" >&2; exit 2 ;;
  esac
}
for t in "${targets[@]}"; do configure "$t"; done # unknown names fail before anything runs

read -r -a hdf5 <<<"$(pkg-config --cflags --libs hdf5-serial 2>/dev/null ||
  echo -I/usr/include/hdf5/serial -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5)"

build() {
  configure "$1"
  # the code under test from $code; the harness (and the headers beside it) from this checkout
  clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -w -I"$code" -I"$code/src" \
    -I/usr/include/x86_64-linux-gnu/openblas-openmp "${hdf5[@]}" "${srcs[@]/#/$code/}" \
    "$root/tests/fuzz/fuzz_$1.c" -lcrypto ${libs[@]+"${libs[@]}"} -lm -o "$out/fuzz_$1"
}

# A few recipes per recipe target (an empty one is the plain valid case of each), the tests'
# files for the others.
seed() {
  local t=$1 c=$out/corpus-$1 i=0 s
  mkdir -p "$c"
  case $t in
    model)
      find "$root/build/testdata" -name model.onnx -size -2M 2>/dev/null | head -400 |
        while read -r f; do cp "$f" "$c/$(echo "$f" | md5sum | cut -c1-16).onnx"; done || true ;;
    decode) # io_ref.py's and make_e2e_set.py's JPEGs (good, oriented, large, hostile)
      find "$root/build/testdata" -name '*.jpg' -size -256k 2>/dev/null | head -400 |
        while read -r f; do cp "$f" "$c/$(echo "$f" | md5sum | cut -c1-16).jpg"; done || true ;;
    input) # one file of each layout; a list, a directory and a pattern of several
      for s in '' '\x00\x01' '\x00\x02' '\x01\x03\x00' '\x02\x02\x02' '\x03\x01\x01'; do
        printf '%b' "$s" >"$c/seed-$((i++))"; done ;;
    journal) # classify, other columns with detections, a journal cut, records forged
      for s in '' '\x01\x03\x04' '\x00\x00\x00\x00\x03' '\x00\x00\x00\x00\x00\x00\x00\x00\x07'; do
        printf '%b' "$s" >"$c/seed-$((i++))"; done ;;
    result) # classify, values, detections
      for s in '' '\x00\x01' '\x00\x02'; do printf '%b' "$s" >"$c/seed-$((i++))"; done ;;
    packlist) for s in '' '\x03' '\x07\x00'; do printf '%b' "$s" >"$c/seed-$((i++))"; done ;;
  esac
}

# Runs target t for secs seconds; prints its line and returns 1 on a finding.
run() {
  local t=$1 log=$out/fuzz-$1.log art=$out/artifacts/$1 tmp rc=0 last found
  configure "$t"
  mkdir -p "$art"
  # the harnesses' temporary files: in memory when /dev/shm is there, gone after the run
  tmp=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/si-fuzz.XXXXXX")
  set +e
  # -rss_limit_mb: a case that makes us allocate past 2 GB is a finding, not a host problem;
  # timeout(1): libFuzzer itself stuck outside an input
  # malloc returns NULL for an impossible size, as it does outside the sanitizer: HDF5 asks for
  # what a crafted header declares (terabytes) and fails cleanly when it is refused; memory
  # actually used past 2 GB (-rss_limit_mb) is still a finding, ours or HDF5's. HDF5 1.10 loses
  # blocks of its own free lists on some error paths of damaged files, and holds others at exit:
  # not ours, and their stacks end in the library (it has no frame pointers), so leaks whose
  # stack is in libhdf5 are suppressed (lsan.supp) and LSan's check at exit is off (libFuzzer
  # checks each input as it runs it). What that could hide, buffers HDF5 allocates for our
  # reads, is guarded otherwise: the source's go through a tracked allocator (io/source.c), and
  # each harness checks that no HDF5 handle outlives an input.
  printf 'leak:libhdf5\n' >"$out/lsan.supp"
  (cd "$out" && TMPDIR=$tmp \
    LSAN_OPTIONS=${LSAN_OPTIONS:-leak_check_at_exit=0:suppressions=$out/lsan.supp} \
    ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1} \
    exec timeout -k 30 $((secs + 600)) "./fuzz_$t" \
    -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=0 -timeout=10 -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$art/" ${SI_FUZZ_SEED:+-seed="$SI_FUZZ_SEED"} \
    ${flags[@]+"${flags[@]}"} "corpus-$t") \
    >"$log" 2>&1 &
  local pid=$! tailer=
  if [ "$jobs" = 1 ] && [ ${#targets[@]} = 1 ]; then tail -f --pid=$pid "$log" & tailer=$!; fi
  wait $pid
  rc=$?
  [ -z "$tailer" ] || wait "$tailer"
  set -e
  rm -rf "$tmp"
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  found=$(sed -n 's/.*Test unit written to \(.*\)/\1/p' "$log" | tail -1)
  # one write per line: with -j, targets finish side by side
  local line
  line=$(printf 'fuzz: %-8s %4s s, %s runs, %s exec/s, cov %s, ft %s, corpus %s' "$t" "$secs" \
    "$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)" \
    "$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)" \
    "$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")" \
    "$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")" \
    "$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")")
  if [ $rc = 0 ] && [ -z "$found" ]; then echo "$line: no findings"; return 0; fi
  echo "$line: FINDING"
  grep -E '^(==[0-9]+== ?ERROR|SUMMARY|==fuzz==)' "$log" | head -4 | sed 's/^/    /'
  local frames=$log
  if [ -n "$found" ] && grep -q LeakSanitizer "$log"; then
    # a leak's allocation stack, whole only with the slow unwinder (HDF5 has no frame pointers)
    frames=$out/fuzz-$t.leak.log tmp=$(mktemp -d "${TMPDIR:-/tmp}/si-fuzz.XXXXXX")
    (cd "$out" && TMPDIR=$tmp ASAN_OPTIONS=fast_unwind_on_malloc=0 timeout 120 "./fuzz_$t" \
      "$found") >"$frames" 2>&1 || true
    rm -rf "$tmp"
  fi
  grep -m3 -E '^ +#[0-9]+ .* in .* /.*/(io|src|tests)/' "$frames" | sed 's/^ */    /' || true
  if [ -n "$found" ]; then
    echo "    reproducer: $found (replay: build-fuzz/fuzz_$t $found)"
  else
    echo "    no reproducer written (exit status $rc): see $log"
  fi
  return 1
}

mkdir -p "$out"
echo "fuzz: building ${targets[*]} (code under test: $code)"
# At most `jobs` of fn's calls at a time, one per target; returns 1 when any returned nonzero.
each() {
  local fn=$1 t n=0 st=0
  shift
  for t in "$@"; do
    if [ $n -ge "$jobs" ]; then wait -n || st=1; n=$((n - 1)); fi
    "$fn" "$t" &
    n=$((n + 1))
  done
  while [ $n -gt 0 ]; do wait -n || st=1; n=$((n - 1)); done
  return $st
}
each build "${targets[@]}" || { echo "fuzz: build failed" >&2; exit 2; }
[ $build_only = 1 ] && exit 0

for t in "${targets[@]}"; do seed "$t"; done
run_for() { run "$1" "$secs"; }
if [ "$jobs" = 1 ]; then # in the foreground: one target's log shows as it goes
  status=0
  for t in "${targets[@]}"; do run "$t" "$secs" || status=1; done
  exit $status
fi
each run_for "${targets[@]}" # each prints its line when it ends
