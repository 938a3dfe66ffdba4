#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (an H200), the CUDA toolkit and Python
# with PyTorch 2.x, but without Debian's ONNX, protobuf, Gloo and oneDNN libraries:
#   1. the CUDA tests (cuda_runtime_test, cuda_dnn_test, cuda_math_test, nccl_test);
#   2. ResNet34 batch-128 training steps (onnx-train MODEL --data synthetic --max-steps) in
#      fp32, TF32, and TF32 with CUDA graphs, beside PyTorch's own on the same GPU
#      (benchmarks/torch_cuda_step.py): img/s and MFU;
#   3. `onnx-train bench-comm --backend nccl --world-size 1`.
# Programs come from shared/gpu-bundle/onnx-train-gpu.tar.gz (scripts/gpu-bundle.sh, made
# on the build machine), or from a build here when the libraries for one are installed.
# Without a GPU it says so and exits 0. Every step runs under `timeout`; the whole check
# stays under 8 minutes.
#
#   scripts/gpu-check.sh [--quick]      # --quick: fewer benchmark steps
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
BUNDLE=$ROOT/shared/gpu-bundle/onnx-train-gpu.tar.gz
STEPS=40
[ "${1:-}" = "--quick" ] && STEPS=15
PEAK_FP32=${PEAK_FP32_TFLOPS:-67.0}   # H100/H200 SXM datasheet, TFLOP/s
PEAK_TF32=${PEAK_TF32_TFLOPS:-494.7}  # dense
PY=${PYTHON:-python3}
FAILED=()
START=$(date +%s)

BUDGET=${GPU_CHECK_BUDGET:-460}  # seconds for all steps together (the check stays under 8 minutes)

say() { echo "gpu-check: $*"; }
elapsed() { echo $(($(date +%s) - START)); }
# run NAME SECONDS CMD...: runs a step under timeout (cut to what is left of the budget),
# its output in $WORK/NAME.log, of which the last $TAIL_LINES lines are shown; records a
# failure.
TAIL_LINES=0
run() {
  local name=$1 secs=$2
  shift 2
  local left=$((BUDGET - $(elapsed)))
  if [ "$left" -lt 10 ]; then
    say "[$name] SKIPPED: the time budget (${BUDGET}s) is spent"
    FAILED+=("$name(no time)")
    return 1
  fi
  [ "$secs" -gt "$left" ] && secs=$left
  say "[$name] ${*##*/} (limit ${secs}s, at $(elapsed)s)"
  timeout --kill-after=10 "$secs" "$@" >"$WORK/$name.log" 2>&1
  local rc=$?
  [ "$TAIL_LINES" -gt 0 ] && tail -n "$TAIL_LINES" "$WORK/$name.log" | sed "s/^/  /"
  if [ $rc -ne 0 ]; then
    if [ $rc -eq 124 ]; then say "[$name] TIMED OUT after ${secs}s"; else say "[$name] FAILED (exit $rc)"; fi
    [ "$TAIL_LINES" -gt 0 ] || tail -n 5 "$WORK/$name.log" | sed "s/^/  /"
    FAILED+=("$name")
  fi
  return $rc
}

# --- 0. Is there a GPU? ----------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null; then
  say "SKIPPED: no NVIDIA GPU on this machine (no nvidia-smi, so no NVIDIA driver)"
  exit 0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  say "SKIPPED: no NVIDIA GPU on this machine (nvidia-smi: $(nvidia-smi -L 2>&1 | head -1))"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu-check: gpu: /'

# --- 1. Programs -------------------------------------------------------------------------
if [ -f "$BUNDLE" ]; then
  mkdir -p "$WORK/bundle"
  tar -C "$WORK/bundle" -xzf "$BUNDLE" || { say "cannot unpack $BUNDLE"; exit 1; }
  BIN=$WORK/bundle/bin
  LIBDIR=$WORK/bundle/lib
  export ONNXTRAIN_TESTDATA=$WORK/bundle/testdata
  sed 's/^/gpu-check: bundle: /' "$WORK/bundle/MANIFEST" | head -6
else
  say "no bundle at $BUNDLE; building here"
  BUILD=$ROOT/build-gpu-check
  if ! timeout 60 cmake -S "$ROOT" -B "$BUILD" -DONNXTRAIN_CUDA=ON >"$WORK/cmake.log" 2>&1; then
    say "FAILED: cannot configure a build here (no bundle, and $(grep -m1 -iE 'could not find|error' "$WORK/cmake.log"))"
    say "run scripts/gpu-bundle.sh on the build machine and bring shared/gpu-bundle/"
    exit 1
  fi
  targets=$(make -C "$BUILD" help | grep -oE '(onnx-train|cuda_[a-z]+_test|nccl_test)$' | tr '\n' ' ')
  BUDGET=$((BUDGET + 300)) run build 300 make -C "$BUILD" -j"$(nproc)" $targets || exit 1
  mkdir -p "$WORK/bin"
  for t in $targets; do ln -sf "$(find "$BUILD/tools" "$BUILD/tests/cuda" -maxdepth 1 -name "$t" | head -1)" "$WORK/bin/$t"; done
  BIN=$WORK/bin
  LIBDIR=
  START=$(date +%s)  # the budget is for the check, not the build
fi

# CUDA libraries: the toolkit's, and those PyTorch's nvidia-* packages carry (cuBLAS,
# cuDNN, NCCL of the same CUDA major version as the driver's).
cuda_dirs=$("$PY" - <<'EOF' 2>/dev/null
import glob, os
dirs = []
try:
    import nvidia
    for root in nvidia.__path__:
        for so in sorted(glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True)):
            d = os.path.dirname(so)
            if d not in dirs:
                dirs.append(d)
except Exception:
    pass
print(":".join(dirs))
EOF
)
export LD_LIBRARY_PATH=${LIBDIR:+$LIBDIR:}/usr/local/cuda/lib64:/usr/local/cuda/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The CUDA runtime and NCCL backend are plugins (libonnxtrain_cuda.so, libonnxtrain_nccl.so)
# that onnx-train loads on first use: from the bundle's lib/, or the build's own lib/.
[ -n "${LIBDIR:-}" ] && export ONNXTRAIN_PLUGIN_DIR=$LIBDIR
plugin=${ONNXTRAIN_PLUGIN_DIR:-$(dirname "$BIN")/../lib}/libonnxtrain_cuda.so
[ -f "$plugin" ] || plugin=$(ls "$ROOT"/build*/lib/libonnxtrain_cuda.so 2>/dev/null | head -1)
missing=$( (ldd "$BIN/onnx-train"; [ -n "$plugin" ] && ldd "$plugin") | grep "not found" | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  say "FAILED: onnx-train cannot load: $missing(LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
  exit 1
fi

# --- 2. CUDA tests ---------------------------------------------------------------------------
TAIL_LINES=12
for t in cuda_runtime_test cuda_dnn_test cuda_math_test nccl_test; do
  [ -x "$BIN/$t" ] || { say "[$t] not in this build"; continue; }
  run "$t" 75 "$BIN/$t" --gtest_brief=1
done
TAIL_LINES=0

# --- 3. ResNet34 training steps --------------------------------------------------------------
OT=$BIN/onnx-train
run make-model 20 "$OT" make-model resnet34 -o "$WORK/resnet34.onnx"
declare -A OT_RATE
for mode in fp32 tf32 tf32-graphs; do
  flags=()
  case $mode in
    tf32) flags=(--tf32) ;;
    tf32-graphs) flags=(--tf32 --cuda-graphs) ;;
  esac
  metrics=$WORK/metrics-$mode.jsonl
  run "train-$mode" 60 "$OT" "$WORK/resnet34.onnx" --device cuda --data "synthetic:$((STEPS * 128))" \
    --recipe resnet34 --epochs 1 --max-steps "$STEPS" --no-checkpoints --quiet --metrics "$metrics" "${flags[@]}"
  # Median step time after 5 warm-up steps (planning, cuDNN algorithm search, capture).
  OT_RATE[$mode]=$("$PY" - "$metrics" <<'EOF' 2>/dev/null
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ms = [r["step_ms"] for r in rows if "step_ms" in r]
epoch = [r["img_per_s"] for r in rows if r.get("type") == "epoch"]
print(round(128 / (statistics.median(ms[5:] or ms) / 1000), 1) if ms else (epoch[0] if epoch else ""))
EOF
)
done

TORCH_JSON=$WORK/torch.jsonl
run torch 90 "$PY" "$ROOT/benchmarks/torch_cuda_step.py" --batch 128 --steps "$STEPS" \
  --peak-fp32 "$PEAK_FP32" --peak-tf32 "$PEAK_TF32"
grep '^{' "$WORK/torch.log" >"$TORCH_JSON" 2>/dev/null

# --- 4. NCCL allreduce -------------------------------------------------------------------------
TAIL_LINES=30
run bench-comm 45 "$OT" bench-comm --backend nccl --world-size 1
TAIL_LINES=0

# --- 5. Summary --------------------------------------------------------------------------------
"$PY" - "$TORCH_JSON" "${OT_RATE[fp32]:-}" "${OT_RATE[tf32]:-}" "${OT_RATE[tf32-graphs]:-}" "$PEAK_FP32" "$PEAK_TF32" <<'EOF'
import json, sys
torch_file, ot_fp32, ot_tf32, ot_graphs, peak_fp32, peak_tf32 = sys.argv[1:7]
flop = 1.74e9
torch = {}
for line in open(torch_file):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if "mode" in d:
        torch[d["mode"]] = d["img_per_s"]
def mfu(rate, peak):
    return f"{100 * rate * flop / (float(peak) * 1e12):5.1f}%" if rate else "   - "
print("gpu-check: ResNet34, batch 128, training step (SGD momentum), img/s and MFU "
      f"(1.74 GFLOP/img; peak fp32 {peak_fp32}, tf32 {peak_tf32} TFLOP/s)")
print(f"gpu-check: {'mode':<12} {'onnx-train':>11} {'MFU':>6}   {'PyTorch':>9} {'MFU':>6}   ratio")
for mode, ours, ref_mode in (("fp32", ot_fp32, "fp32"), ("tf32", ot_tf32, "tf32"), ("tf32+graphs", ot_graphs, "tf32")):
    ours = float(ours) if ours else 0.0
    ref = torch.get(ref_mode, 0.0)
    peak = peak_tf32 if ref_mode == "tf32" else peak_fp32
    ratio = f"{ours / ref:.2f}x" if ours and ref else "-"
    print(f"gpu-check: {mode:<12} {ours or '-':>11} {mfu(ours, peak):>6}   {ref or '-':>9} {mfu(ref, peak):>6}   {ratio}")
EOF

say "done in $(elapsed)s; work files in $WORK"
if [ ${#FAILED[@]} -gt 0 ]; then
  say "FAILED steps: ${FAILED[*]}"
  exit 1
fi
say "all steps passed"
