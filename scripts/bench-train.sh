#!/usr/bin/env bash
# Training-step benchmark: onnx-train beside PyTorch and ONNX Runtime Training in the same
# run, same thread count (default 2). ONNX Runtime Training is a benchmark-only peer,
# installed from PyPI into build/bench-venv (with Debian's torch visible).
#   scripts/bench-train.sh [THREADS] [MODELS]      e.g. scripts/bench-train.sh 2 resnet34,simplenn
# BENCH_ROUNDS=N: each framework N times, interleaved, fastest kept (for machines whose speed drifts).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
models=${2:-resnet34,simplenn}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j "${JOBS:-2}" --target train_step_bench onnx-train >/dev/null
venv="$BUILD/bench-venv"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q onnxruntime-training-cpu || echo "bench-train: could not install onnxruntime-training-cpu; ORT column skipped"
fi
ort=""
"$venv/bin/python" -c "import onnxruntime.training.api" 2>/dev/null && ort="$venv/bin/python"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 benchmarks/compare_train_step.py --build "$BUILD" --threads "$threads" --models "$models" --ort-python "$ort"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
