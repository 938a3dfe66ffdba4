#!/usr/bin/env bash
# The README's main command: install dependencies, build, write the reference SimpleNN,
# take a batch of real Fashion-MNIST test images (Debian's dataset-fashion-mnist) and run
# the forward pass on it. (Training arrives with the trainer issue.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bin=build/tools/onnx-train
out=${OUT_DIR:-out}
mkdir -p "$out"
"$bin" make-model simplenn -o "$out/simplenn.onnx" --seed 1
"$bin" make-model resnet34 --input 1x28x28 -o "$out/resnet34.onnx" --seed 1
"$bin" dump-batch --data fashion-mnist --split test --count 16 -o "$out/batch"
"$bin" infer "$out/simplenn.onnx" --input input="$out/batch/input.pb" -o "$out/simplenn-logits"
"$bin" infer "$out/resnet34.onnx" --input input="$out/batch/input.pb" -o "$out/resnet34-logits"
echo "main: forward passes of SimpleNN and ResNet34 on 16 Fashion-MNIST test images done; outputs in $out/"
