#!/usr/bin/env bash
# The README's main command: install dependencies, build, write the reference SimpleNN and
# train it on real Fashion-MNIST (Debian's dataset-fashion-mnist) with the recipe's
# settings (SGD lr 0.01, batch 32, 5 epochs), then report its test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The product only: the tests and benchmarks need the packages of install-deps.sh --tests.
CMAKE_ARGS="-DONNXTRAIN_TESTS=OFF -DONNXTRAIN_BENCHMARKS=OFF ${CMAKE_ARGS:-}" bash scripts/build.sh
bin=build/tools/onnx-train
out=${OUT_DIR:-out}
mkdir -p "$out"
"$bin" make-model simplenn -o "$out/simplenn.onnx" --seed 1
"$bin" "$out/simplenn.onnx" --data fashion-mnist --epochs "${EPOCHS:-5}" --batch 32 --lr 0.01 \
  --checkpoint-dir "$out/trained_models" --metrics "$out/metrics.jsonl"
"$bin" eval "$out/trained_models/epoch_$(printf %04d "${EPOCHS:-5}").onnx" --data fashion-mnist
