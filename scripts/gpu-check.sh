#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (CUDA driver, toolkit and PyTorch with its
# nvidia-* libraries; no Debian ONNX, protobuf, Gloo or oneDNN) from the bundle that
# scripts/gpu-bundle.sh made on the build machine (build-gpu-bundle/onnx-train-gpu.tar.gz,
# carried along). In one call of at most 8 minutes:
#   0. the host's driver against the bundle: the CUDA major version the driver supports
#      must be at least the bundle's, and the programs must load (a GLIBC_x.y or missing
#      library error is read from stderr and named);
#   1. the CUDA tests, each under its own limit: cuda_findings_test (issue 37),
#      cuda_runtime_test (with the conformance sweep, whose passing cases are written to
#      $OUT/conformance_passing_cuda.txt: commit it as tests/conformance/conformance_passing_cuda.txt),
#      cuda_dnn_test, cuda_math_test, nccl_test;
#   2. ResNet34 batch-128 training steps in fp32, TF32 and TF32 with CUDA graphs beside
#      PyTorch's (benchmarks/torch_cuda_step.py), and NCCL's allreduce table, as time allows.
# Results go to $OUT (the device tool's folder; a temporary one elsewhere): summary.txt,
# logs.tar.gz (every step's log) and conformance_passing_cuda.txt. Exit 0 when every step
# passed or there is no NVIDIA driver at all (said as SKIPPED), 1 otherwise.
#
#   scripts/gpu-check.sh [--quick]    # --quick: fewer benchmark steps
#   BUNDLE=FILE GPU_CHECK_BUDGET=SECONDS (default 450) PYTHON=python3
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${BUNDLE:-$ROOT/build-gpu-bundle/onnx-train-gpu.tar.gz}
OUT=${OUT:-$(mktemp -d /tmp/gpu-check-out.XXXXXX)}
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
LOGS=$WORK/logs
BUDGET=${GPU_CHECK_BUDGET:-450}  # seconds for everything; the device tool allows 600 a call
STEPS=30
[ "${1:-}" = "--quick" ] && STEPS=15
PEAK_FP32=${PEAK_FP32_TFLOPS:-67.0}   # H100/H200 SXM datasheet, TFLOP/s
PEAK_TF32=${PEAK_TF32_TFLOPS:-494.7}  # dense
PY=${PYTHON:-python3}
FAILED=()
RAN=0
START=$(date +%s)
mkdir -p "$OUT" "$LOGS"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

say() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
elapsed() { echo $(($(date +%s) - START)); }
finish() {  # finish EXIT_CODE: logs to $OUT, final line
  tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
  if [ ${#FAILED[@]} -gt 0 ]; then
    say "FAILED steps: ${FAILED[*]} (done in $(elapsed)s; logs in $OUT/logs.tar.gz)"
    exit 1
  fi
  if [ "$RAN" -eq 0 ]; then say "done in $(elapsed)s; no step ran"; else say "done in $(elapsed)s; all $RAN steps passed"; fi
  exit "$1"
}

# run NAME SECONDS CMD...: one step under `timeout` (cut to what is left of the budget),
# its output in logs/NAME.log; the last lines are shown when it fails.
run() {
  local name=$1 secs=$2
  shift 2
  local left=$((BUDGET - $(elapsed)))
  if [ "$left" -lt 15 ]; then
    say "[$name] SKIPPED: the time budget (${BUDGET}s) is spent"
    FAILED+=("$name(no time)")
    return 1
  fi
  [ "$secs" -gt "$left" ] && secs=$left
  echo "gpu-check: [$name] limit ${secs}s, at $(elapsed)s"
  RAN=$((RAN + 1))
  local t0
  t0=$(date +%s)
  timeout --kill-after=5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    # A GPU test that skips on a GPU host did not check anything: say so.
    local skipped note=""
    skipped=$(grep -c ': Skipped$' "$LOGS/$name.log")
    [ "$skipped" -gt 0 ] && note=", $skipped test(s) SKIPPED: $(grep -A1 ': Skipped$' "$LOGS/$name.log" | sed -n 2p)"
    say "[$name] passed in $(($(date +%s) - t0))s$note"
  else
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "[$name] TIMED OUT after ${secs}s"; else say "[$name] FAILED (exit $rc)"; fi
    { grep -E '^\[  FAILED  \]|Failure|error' "$LOGS/$name.log" | head -n 8; tail -n 5 "$LOGS/$name.log"; } |
      awk '!seen[$0]++' | sed 's/^/  /' | tee -a "$SUMMARY"
    FAILED+=("$name")
  fi
  return $rc
}

# --- 0. Driver and bundle --------------------------------------------------------------
# The CUDA version the driver supports, from nvidia-smi's banner ("CUDA Version: 13.0").
if ! command -v nvidia-smi >/dev/null; then
  say "SKIPPED: no NVIDIA driver on this machine (no nvidia-smi), so no GPU to check"
  finish 0
fi
smi=$(nvidia-smi 2>&1)
smi_rc=$?
driver_cuda=$(sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' <<<"$smi" | head -1)
if [ $smi_rc -ne 0 ] || [ -z "$driver_cuda" ]; then
  say "SKIPPED: no usable NVIDIA driver on this machine (nvidia-smi: $(head -1 <<<"$smi"))"
  finish 0
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' |
  tee -a "$SUMMARY"

if [ ! -f "$BUNDLE" ]; then
  say "FAILED: no bundle at $BUNDLE. Make it on the build machine with scripts/gpu-bundle.sh and carry build-gpu-bundle/ (the device tool's carry: [\"build-gpu-bundle\"])"
  FAILED+=(bundle)
  finish 1
fi
mkdir -p "$WORK/bundle"
tar -C "$WORK/bundle" -xzf "$BUNDLE" || { say "FAILED: cannot unpack $BUNDLE"; FAILED+=(bundle); finish 1; }
sed -n 's/^\(source\|cuda\|glibc\|made\): /bundle \1: /p' "$WORK/bundle/MANIFEST" | tee -a "$SUMMARY"
bundle_cuda_major=$(sed -n 's/^cuda_major: *//p' "$WORK/bundle/MANIFEST")
driver_major=${driver_cuda%%.*}
if [ -z "$bundle_cuda_major" ]; then
  say "FAILED: the bundle's MANIFEST has no cuda_major line; remake it with scripts/gpu-bundle.sh"
  FAILED+=(driver)
  finish 1
fi
if [ "$driver_major" -lt "$bundle_cuda_major" ]; then
  say "FAILED: this host's NVIDIA driver supports CUDA $driver_cuda, but the bundle was built with CUDA $bundle_cuda_major.x; use a host whose driver supports CUDA $bundle_cuda_major (nvidia-smi's 'CUDA Version'), or build the bundle with CUDA $driver_major"
  FAILED+=(driver)
  finish 1
fi
say "driver supports CUDA $driver_cuda; the bundle needs CUDA $bundle_cuda_major: ok"

BIN=$WORK/bundle/bin
LIBDIR=$WORK/bundle/lib
export ONNXTRAIN_PLUGIN_DIR=$LIBDIR ONNXTRAIN_TESTDATA=$WORK/bundle/testdata
export ONNXTRAIN_SOURCE_DIR=$ROOT ONNXTRAIN_BINARY=$BIN/onnx-train
# CUDA libraries: the toolkit's, and those PyTorch's nvidia-* packages carry (cuBLAS,
# cuDNN, NCCL of the CUDA major version of the driver).
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
export LD_LIBRARY_PATH=$LIBDIR:/usr/local/cuda/lib64${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Do the programs load? A glibc older than the bundle's says GLIBC_x.y on stderr.
for b in "$BIN"/onnx-train "$LIBDIR"/libonnxtrain_cuda.so; do
  missing=$(ldd "$b" 2>&1 | grep -E "not found|GLIBC" | sort -u | tr '\n' ' ')
  if [ -n "$missing" ]; then
    say "FAILED: ${b##*/} cannot load here: $missing(glibc here: $(ldd --version 2>&1 | head -1); the bundle needs $(sed -n 's/^glibc: //p' "$WORK/bundle/MANIFEST"))"
    FAILED+=(load)
    finish 1
  fi
done
probe=$(timeout 30 "$BIN/onnx-train" --help 2>&1 >/dev/null)
if [ $? -ne 0 ] || grep -q "GLIBC" <<<"$probe"; then
  say "FAILED: onnx-train does not start here: $(head -3 <<<"$probe")"
  FAILED+=(load)
  finish 1
fi

# --- 1. CUDA tests ------------------------------------------------------------------------
run cuda_findings_test 60 "$BIN/cuda_findings_test" --gtest_brief=1
run cuda_training_ops_test 60 "$BIN/cuda_training_ops_test" --gtest_brief=1
export ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT=$OUT/conformance_passing_cuda.txt
run cuda_runtime_test 150 "$BIN/cuda_runtime_test" --gtest_brief=1
unset ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT
grep -h "cuda conformance:" "$LOGS/cuda_runtime_test.log" 2>/dev/null | cut -c1-400 | tee -a "$SUMMARY"
run cuda_dnn_test 60 "$BIN/cuda_dnn_test" --gtest_brief=1
run cuda_math_test 60 "$BIN/cuda_math_test" --gtest_brief=1
run nccl_test 60 "$BIN/nccl_test" --gtest_brief=1

# --- 2. ResNet34 training steps and NCCL allreduce, as time allows ---------------------------
OT=$BIN/onnx-train
declare -A OT_RATE
if run make-model 20 "$OT" make-model resnet34 -o "$WORK/resnet34.onnx"; then
  for mode in fp32 tf32 tf32-graphs; do
    flags=()
    case $mode in
      tf32) flags=(--tf32) ;;
      tf32-graphs) flags=(--tf32 --cuda-graphs) ;;
    esac
    metrics=$WORK/metrics-$mode.jsonl
    run "train-$mode" 45 "$OT" "$WORK/resnet34.onnx" --device cuda --data "synthetic:$((STEPS * 128))" \
      --recipe resnet34 --epochs 1 --max-steps "$STEPS" --no-checkpoints --quiet --metrics "$metrics" "${flags[@]}"
    # Median step time after 5 warm-up steps (planning, cuDNN algorithm choice, capture).
    OT_RATE[$mode]=$("$PY" - "$metrics" <<'EOF' 2>/dev/null
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ms = [r["step_ms"] for r in rows if "step_ms" in r]
print(round(128 / (statistics.median(ms[5:] or ms) / 1000), 1) if ms else "")
EOF
)
  done
fi
run torch 60 "$PY" "$ROOT/benchmarks/torch_cuda_step.py" --batch 128 --steps "$STEPS" \
  --peak-fp32 "$PEAK_FP32" --peak-tf32 "$PEAK_TF32"
grep -h '^{' "$LOGS/torch.log" >"$WORK/torch.jsonl" 2>/dev/null
run bench-comm 30 "$OT" bench-comm --backend nccl --world-size 1
"$PY" - "$WORK/torch.jsonl" "${OT_RATE[fp32]:-}" "${OT_RATE[tf32]:-}" "${OT_RATE[tf32-graphs]:-}" "$PEAK_FP32" \
  "$PEAK_TF32" <<'EOF' 2>/dev/null | tee -a "$SUMMARY"
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
print("ResNet34, batch 128, training step (SGD momentum), img/s and MFU "
      f"(1.74 GFLOP/img; peak fp32 {peak_fp32}, tf32 {peak_tf32} TFLOP/s)")
print(f"{'mode':<12} {'onnx-train':>11} {'MFU':>6}   {'PyTorch':>9} {'MFU':>6}   ratio")
for mode, ours, ref_mode in (("fp32", ot_fp32, "fp32"), ("tf32", ot_tf32, "tf32"), ("tf32+graphs", ot_graphs, "tf32")):
    ours = float(ours) if ours else 0.0
    ref = torch.get(ref_mode, 0.0)
    peak = peak_tf32 if ref_mode == "tf32" else peak_fp32
    ratio = f"{ours / ref:.2f}x" if ours and ref else "-"
    print(f"{mode:<12} {ours or '-':>11} {mfu(ours, peak):>6}   {ref or '-':>9} {mfu(ref, peak):>6}   {ratio}")
EOF

finish 0
