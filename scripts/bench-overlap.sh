#!/usr/bin/env bash
# Allreduce/backward overlap benchmark: ResNet34 (synthetic data, batch 32 per rank, one
# thread per rank) at world size 1 and 2; prints the step times, their ratio and the
# fraction of allreduce time hidden behind backward (see benchmarks/overlap_bench.py).
#   scripts/bench-overlap.sh [STEPS] [BATCH]        e.g. scripts/bench-overlap.sh 10 32
# BUILD_DIR (default build) names the build folder; WORKDIR (default /tmp/onnx-train-overlap)
# where the model and the metrics go; BACKEND (default gloo; or mpi) the world-2 run's backend.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-10}
batch=${2:-32}
BUILD=${BUILD_DIR:-build}
WORKDIR=${WORKDIR:-/tmp/onnx-train-overlap}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" -j "${JOBS:-2}" --target onnx-train >/dev/null
/usr/bin/python3 benchmarks/overlap_bench.py --onnx-train "$BUILD/tools/onnx-train" --workdir "$WORKDIR" \
  --steps "$steps" --batch "$batch" --warmup 2 --threads-per-rank 1 --bucket-cap-mb "${BUCKET_CAP_MB:-25}" \
  --backend "${BACKEND:-gloo}"
