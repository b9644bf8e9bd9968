#!/usr/bin/env bash
# Installs PyTorch + torchvision (+ timm's and ultralytics' model code, onnxscript) from PyPI into a venv of
# its own, .venv-torch, for the tests that export real models to ONNX (tests/export_models.py).
# Kept apart from .venv because it is ~4.0 GB on disk and only the `slow` tests need it.
# Idempotent: quick when the venv matches scripts/requirements-torch.txt, rebuilt from scratch
# when that file changes. SI_TORCH_VENV=DIR puts the venv elsewhere (e.g. outside a fresh clone).
#
# Measured on the 2-core Debian 12 machine (torch 2.11.0): 2.4 GB downloaded (torch 0.53 GB,
# nvidia-* 1.7 GB), ~100 s in all (~35 s of it downloading), 4.0 GB on disk; 0.04 s when
# already installed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
req="$root/scripts/requirements-torch.txt"
venv="${SI_TORCH_VENV:-$root/.venv-torch}"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)

# The packages both venvs share must carry the same pins, so the ONNX/onnxruntime references the
# slow tests write are made by the same versions as everything else the tests check against.
for p in numpy onnx onnxruntime Pillow h5py; do
  a=$(grep -iE "^$p==" "$root/scripts/requirements.txt" || true)
  b=$(grep -iE "^$p==" "$req" || true)
  if [ "$a" != "$b" ]; then
    echo "setup_torch: pin of $p differs: requirements.txt '$a' vs requirements-torch.txt '$b'" >&2
    exit 1
  fi
done

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

py=$(command -v python3)
echo "setup_torch: creating $venv (torch from PyPI, ~2.4 GB download)"
rm -rf "$venv"
"$py" -m venv "$venv"
# --no-deps: the requirements file is the complete, pinned closure. Letting pip resolve torch's
# own metadata would also pull nvidia-cusolver, nvrtc, nvtx and triton, which a CPU-only export
# never loads (see the comment in requirements-torch.txt). --no-cache-dir: a second 3 GB copy of
# the wheels in ~/.cache/pip would only help if the venv were deleted.
"$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps -r "$req"

# Smoke test before stamping: torch must import on a machine without CUDA, and ultralytics must
# build YOLOv8n from its yaml without touching the network (YOLO_OFFLINE skips its online check).
cfg=$(mktemp -d)
YOLO_OFFLINE=1 YOLO_VERBOSE=False YOLO_CONFIG_DIR="$cfg" "$venv/bin/python" - <<'EOF'
import torch, torchvision, onnx, onnxruntime, onnxscript, timm, transformers
from ultralytics.nn.tasks import DetectionModel
m = DetectionModel("yolov8n.yaml", nc=80, verbose=False)
v = timm.create_model("vit_tiny_patch16_224", pretrained=False)
print(f"setup_torch: torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
      f"onnxscript {onnxscript.__version__}, timm {timm.__version__}, "
      f"transformers {transformers.__version__}, "
      f"yolov8n {sum(p.numel() for p in m.parameters())} params, "
      f"vit_tiny {sum(p.numel() for p in v.parameters())} params")
EOF
rm -rf "$cfg"
echo "$want" > "$stamp"
