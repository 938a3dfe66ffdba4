#!/usr/bin/env bash
# The trainer issue's ResNet34 accuracy check (a benchmark, not CI: it trains for real):
# the recipe's ResNet34 with a 1x28x28 input, recipe settings, N epochs (default 1) on
# Fashion-MNIST, onnx-train beside PyTorch in the same run; prints both test accuracies.
#   scripts/bench-accuracy.sh [EPOCHS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-1}
threads=${2:-2}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j "${JOBS:-2}" --target onnx-train >/dev/null
work="$BUILD/bench-accuracy"
rm -rf "$work" && mkdir -p "$work"
"$BUILD/tools/onnx-train" make-model resnet34 --input 1x28x28 -o "$work/resnet34.onnx" --seed 0
start=$(date +%s)
"$BUILD/tools/onnx-train" "$work/resnet34.onnx" --recipe resnet34 --data fashion-mnist --epochs "$epochs" \
  --threads "$threads" --checkpoint-dir "$work/ckpt" --metrics "$work/metrics.jsonl" | tail -3
echo "onnx-train: $(( $(date +%s) - start )) s"
/usr/bin/python3 benchmarks/torch_fmnist_epoch.py --epochs "$epochs" --threads "$threads"
