#!/usr/bin/env bash
# Forward-pass throughput of onnx-train against PyTorch, measured in the same run on this
# machine with the same thread count: benchmarks/forward_bench (ResNet34 batch 128,
# SimpleNN batch 32) and benchmarks/torch_forward.py (eval and train mode), then the
# ratios ours/PyTorch of images/s (above 1: onnx-train is faster).
#
#   scripts/bench-forward.sh [THREADS]      (default 2; BUILD_DIR=build, PYTHON3=/usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
BUILD=${BUILD_DIR:-build}
PYTHON=${PYTHON3:-/usr/bin/python3}  # Debian's, which has python3-torch

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}" --target forward_bench
out="$BUILD/forward_bench.json"
REPS=${REPETITIONS:-3}  # timing windows per case on both sides; medians are compared
# Other work on the machine skews both sides differently: say how busy it was.
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== onnx-train forward ($THREADS threads)"
OMP_NUM_THREADS=$THREADS "$BUILD/benchmarks/forward_bench" --threads="$THREADS" \
  --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json
echo "== PyTorch forward ($THREADS threads) and ratios of images/s"
OMP_NUM_THREADS=$THREADS "$PYTHON" benchmarks/torch_forward.py --threads "$THREADS" --repetitions "$REPS" \
  --ours "$out"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
