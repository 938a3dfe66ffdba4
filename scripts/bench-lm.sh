#!/usr/bin/env bash
# Issue 39's acceptance benchmarks for language models, onnx-train beside PyTorch in the same run:
#  step    benchmarks/lm_step.py: a GPT-2-small-shaped causal LM (vocab 50257, 6 layers, width 384,
#          6 heads, T 256, batch 8, tied lm_head) exported from PyTorch 2.x, its AdamW training
#          step and peak RSS, ours (the onnx-train program) beside PyTorch 2.x float32 eager (and
#          Debian's PyTorch 1.13 where /usr/bin/python3 has it), interleaved rounds, medians;
#          targets: step <= 1.0x PyTorch 2.x, peak RSS <= PyTorch 2.x's;
#  parity  benchmarks/lm_parity.py: a byte-level LM on /usr/share/common-licenses/GPL-3, 2,000
#          AdamW steps from the same initial weights on the same batches on both sides; target:
#          our final validation loss within 2% of PyTorch's (exit status 1 otherwise).
#   scripts/bench-lm.sh [step|parity|all] [THREADS]       (default: all, 2 threads for the step)
# ROUNDS (3), STEPS (5) for the step; PARITY_STEPS (2000), PARITY_THREADS (1) for the parity.
# BUILD_DIR (build): the build folder; TORCH2_PYTHON: the PyTorch 2.x venv's python.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
threads=${2:-2}
BUILD=${BUILD_DIR:-build}
py=${TORCH2_PYTHON:-${ONNXTRAIN_CACHE:-/var/cache/onnx-train}/torch2/bin/python}
if [ ! -x "$py" ]; then
  echo "bench-lm: no PyTorch 2.x venv at $py (scripts/install-torch2.sh makes it)" >&2
  exit 1
fi
cmake --build "$BUILD" -j "${JOBS:-2}" --target onnx-train >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)," \
     "flags: $(grep -m1 -ow -e avx2 -e avx512f -e avx512_bf16 /proc/cpuinfo | sort -u | tr '\n' ' ')"
status=0
if [ "$what" = step ] || [ "$what" = all ]; then
  t113=()
  if /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then t113=(--torch113 /usr/bin/python3); fi
  "$py" benchmarks/lm_step.py --onnx-train "$BUILD/tools/onnx-train" --workdir "$work/step" --threads "$threads" \
    --rounds "${ROUNDS:-3}" --steps "${STEPS:-5}" "${t113[@]}" || status=1
fi
if [ "$what" = parity ] || [ "$what" = all ]; then
  "$py" benchmarks/lm_parity.py --onnx-train "$BUILD/tools/onnx-train" --workdir "$work/parity" \
    --threads "${PARITY_THREADS:-1}" --steps "${PARITY_STEPS:-2000}" || status=1
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
