#!/usr/bin/env bash
# The test suite: installs what it needs (PyTorch too, for exports of real models), builds
# shardinfer (Release, with CUDA when nvcc is found) and runs every CTest test, then builds the
# unit tests with AddressSanitizer and UndefinedBehaviorSanitizer and runs them again. Without a
# GPU, gpu tests report "skipped".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Everything (venvs 4.6 GB, the builds, exported models 3.3 GB, test sets) takes ~10 GB from
# scratch (9.9 GB measured); a run that fills the disk fails in whichever test writes next, so
# say up front when it will not fit.
free_gb=$(df -Pk "$root" | awk 'NR == 2 { print int($4 / 1048576) }')
echo "test: ${free_gb} GB free under $root (a full run from scratch needs ~10 GB)"
if [ "$free_gb" -lt 11 ]; then
  echo "test: warning: under 11 GB free; tests that write large files may fail with ENOSPC" >&2
fi
"$root/scripts/setup.sh"
"$root/scripts/setup_torch.sh"   # PyTorch for the real-export tests (slow label)
"$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j2 -LE long)
SI_BUILD_DIR="$root/build-asan" "$root/scripts/build.sh" -DSI_SANITIZE=ON -DSI_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=Debug
(cd "$root/build-asan" && ctest --output-on-failure -L unit)
# Fuzzing: every target of scripts/fuzz.sh (one per kind of file the program reads) under ASan and
# UBSan, two at a time, SI_FUZZ_SECONDS each (default 100: about 6 minutes on 2 cores). A crash,
# leak, timeout or allocation past 2 GB fails the stage; each finding's reproducer is named.
SI_FUZZ_SEED=${SI_FUZZ_SEED:-1} "$root/scripts/fuzz.sh" -j 2 all "${SI_FUZZ_SECONDS:-100}"
