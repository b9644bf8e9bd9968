#!/usr/bin/env bash
# Installs what shardinfer needs on Debian 12: build tools and libraries from Debian's packages,
# and a Python venv (.venv) with the reference tools the demo and the tests use. Idempotent and
# quick when everything is already there. Run from anywhere; needs root (or sudo) for apt.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pkgs=(build-essential cmake pkg-config git libopenmpi-dev openmpi-bin libhdf5-dev libturbojpeg0-dev libxxhash-dev
      libopenblas-openmp-dev libssl-dev python3-skimage python3-venv
      munge slurmctld slurmd slurm-client # a one-node Slurm for the slurm-labelled test
      iproute2 # network namespaces: the multi-node test
      libopenblas0-pthread # the pthreads OpenBLAS, for the test of the CPU backend's guard
      clang libclang-rt-14-dev) # libFuzzer and the sanitizers: scripts/fuzz.sh, the fuzz stage
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Prefer the interpreter on PATH (pyenv's on these machines); Debian's python3 works too.
py=$(command -v python3)
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want=$(cat "$root/scripts/requirements.txt" "$root/scripts/requirements-headers.txt" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating Python venv in .venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/scripts/requirements.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
    -r "$root/scripts/requirements-headers.txt"
  echo "$want" > "$stamp"
fi
