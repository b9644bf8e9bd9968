#!/usr/bin/env bash
# The test suite: installs what it needs (PyTorch too, for exports of real models), builds
# shardinfer (Release, with CUDA when nvcc is found) and runs every CTest test, then builds the
# unit tests with AddressSanitizer and UndefinedBehaviorSanitizer and runs them again. Without a
# GPU, gpu tests report "skipped".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/setup_torch.sh"   # PyTorch for the real-export tests (slow label)
"$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j2)
SI_BUILD_DIR="$root/build-asan" "$root/scripts/build.sh" -DSI_SANITIZE=ON -DSI_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=Debug
(cd "$root/build-asan" && ctest --output-on-failure -L unit)
