#!/usr/bin/env bash
# Issue 13's acceptance benchmarks for the model zoo, onnx-train beside PyTorch 2.x (the peer,
# the venv of scripts/install-torch2.sh) and Debian's PyTorch 1.13 in the same run:
#  1. training-step time and peak RSS at batch 32 (benchmarks/zoo_step.py): MobileNetV2 and
#     EfficientNet-B0 at 3x64x64, a ViT (patch 4, 32x32, 6 layers, width 192) and a token
#     transformer encoder; ratios ours/torch2 and ours/torch1.13 (at most 1.0 is the goal);
#     without the venv the torch2 columns are left out with a line that says so;
#  2. with --train: one epoch of `onnx-train MODEL --data synthetic` on every model of
#     the zoo, loss falling, the checkpoint run by `onnx-train eval` (benchmarks/zoo_train.py).
#   scripts/bench-zoo.sh [--train] [THREADS] [MODELS]
#   e.g. scripts/bench-zoo.sh 2 mobilenet_v2,vit
# Environment: BUILD_DIR=build; TORCH2_PYTHON=PY (default /var/cache/onnx-train/torch2/bin/python,
# empty: no torch2); ZOO_STEPS=N: timed steps per case (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
train=0
if [ "${1:-}" = "--train" ]; then train=1; shift; fi
threads=${1:-2}
models=${2:-mobilenet_v2,efficientnet_b0,vit,transformer}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j "${JOBS:-2}" --target train_step_bench onnx-train >/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 benchmarks/zoo_step.py --build "$BUILD" --threads "$threads" --models "$models" \
  --torch2-python "${TORCH2_PYTHON-/var/cache/onnx-train/torch2/bin/python}" --steps "${ZOO_STEPS:-10}"
if [ "$train" = 1 ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  /usr/bin/python3 benchmarks/zoo_train.py --onnx-train "$BUILD/tools/onnx-train" --workdir "$work" --threads "$threads"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
