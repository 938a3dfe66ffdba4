#!/usr/bin/env bash
# The training loop's step against the bare step (benchmarks/loop_step.py): SimpleNN on
# Fashion-MNIST, batch 32 and 1024, same run, 2 threads by default; ONNX Runtime Training's bare
# step beside them where BUILD/bench-venv has it (scripts/bench-train.sh makes it).
#   scripts/bench-loop.sh [THREADS]      Environment: BUILD_DIR=build, BENCH_ROUNDS=3,
#   ORT_PYTHON=PY (default BUILD/bench-venv/bin/python if it has onnxruntime-training; "" for none)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j "${JOBS:-2}" --target train_step_bench onnx-train >/dev/null
echo "cpu flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
ort=${ORT_PYTHON-$BUILD/bench-venv/bin/python}
if [ -n "$ort" ] && ! "$ort" -c "import onnxruntime.training.api" 2>/dev/null; then
  echo "# ONNX Runtime Training not found at $ort; its column is left out"
  ort=""
fi
/usr/bin/python3 benchmarks/loop_step.py --build "$BUILD" --threads "${1:-2}" --rounds "${BENCH_ROUNDS:-3}" --ort-python "$ort"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
