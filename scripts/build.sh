#!/usr/bin/env bash
# Configures and builds onnx-train (Release) into build/ (or $BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# ONNX 1.19.1 from its source distribution, built once into a cache (scripts/build-onnx.sh).
onnx_root=$(bash scripts/build-onnx.sh | tail -n 1)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_ONNX_ROOT="$onnx_root" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$jobs"
