#!/usr/bin/env bash
# Training-step benchmark: onnx-train beside PyTorch 2.x (the benchmark peer, the venv of
# scripts/install-torch2.sh), Debian's PyTorch 1.13 and ONNX Runtime Training in the same run,
# same thread count (default 2); ratios ours/torch2 and ours/torch1.13 (lower is better), and
# ResNet34's bf16 autocast step of both PyTorch versions as a reference. Without the venv the
# torch2 columns are left out with a line that says so. ONNX Runtime Training is a
# benchmark-only peer, installed from PyPI into BUILD/bench-venv (with Debian's torch visible).
#   scripts/bench-train.sh [THREADS] [MODELS]      e.g. scripts/bench-train.sh 2 resnet34,simplenn
# Environment: BUILD_DIR=build; BENCH_ROUNDS=N: each framework N times, interleaved, fastest kept
# (for machines whose speed drifts); TORCH2_PYTHON=PY (default
# /var/cache/onnx-train/torch2/bin/python, empty: no torch2); TORCH_STEPS=N: PyTorch's timed
# steps per case; AMP_REF=bf16|fp16|"" (default bf16); BENCH_ORT=0 leaves ORT out.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
models=${2:-resnet34,simplenn}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j "${JOBS:-2}" --target train_step_bench onnx-train >/dev/null
ort=""
if [ "${BENCH_ORT:-1}" != 0 ]; then
  venv="$BUILD/bench-venv"
  if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q onnxruntime-training-cpu || echo "bench-train: could not install onnxruntime-training-cpu; ORT column skipped"
  fi
  "$venv/bin/python" -c "import onnxruntime.training.api" 2>/dev/null && ort="$venv/bin/python"
else
  echo "# ONNX Runtime Training left out (BENCH_ORT=0)"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 benchmarks/compare_train_step.py --build "$BUILD" --threads "$threads" --models "$models" \
  --ort-python "$ort" --torch2-python "${TORCH2_PYTHON-/var/cache/onnx-train/torch2/bin/python}" \
  --torch-steps "${TORCH_STEPS:-0}" --amp-ref "${AMP_REF-bf16}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
