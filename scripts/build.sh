#!/usr/bin/env bash
# Configures and builds shardinfer into build/ (Release; CUDA backend when nvcc is found).
# Extra arguments go to cmake's configure step. Quick when nothing changed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${SI_BUILD_DIR:-$root/build}
# SI_CUDA=AUTO each time: a cache configured with OFF would otherwise drop the CUDA backend
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSI_CUDA=AUTO "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
