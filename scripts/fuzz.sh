#!/usr/bin/env bash
# Fuzzes the input readers with libFuzzer (clang, ASan+UBSan): the model loader, the
# TensorProto reader, the IDX and CIFAR-10 readers, the checkpoint reader, the NumPy reader
# and the JPEG/PNG decoders' wrappers.
#
#   scripts/fuzz.sh [SECONDS] [model_loader|tensor_reader|idx_reader|cifar10_reader|checkpoint_reader|
#                              npy_reader|image_decoder ...]
#
# Configures a separate build (build-fuzz, or $FUZZ_BUILD_DIR) with -DONNXTRAIN_FUZZ=ON,
# writes the seeds (the text seeds of tests/fuzz/seeds encoded with protoc; small data
# files and checkpoints from tests/fuzz/make_seeds.py), first replays the committed
# crash regressions (tests/fuzz/regressions/<target>/), then runs each target for SECONDS
# (default 60). The growing corpus is kept in the build folder; a new crash input is
# written to the build folder's artifacts/<target>/: add it to the regressions folder
# once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
ALL_TARGETS=(model_loader tensor_reader idx_reader cifar10_reader checkpoint_reader npy_reader image_decoder)
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
for target in "${TARGETS[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $target "* ]] ||
    { echo "fuzz.sh: unknown target '$target' (${ALL_TARGETS[*]})" >&2; exit 2; }
done
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DONNXTRAIN_FUZZ=ON -DONNXTRAIN_TESTS=OFF -DONNXTRAIN_BENCHMARKS=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target $(printf '%s_fuzzer ' "${TARGETS[@]}")

# Seeds: model_*.textproto are ModelProtos, tensor_*.textproto TensorProtos.
encode_seeds() {  # prefix message_type out_dir
  mkdir -p "$3"
  for text in tests/fuzz/seeds/"$1"_*.textproto; do
    protoc --encode="$2" -I/usr/include/onnx /usr/include/onnx/onnx.proto <"$text" \
      >"$3/seed_$(basename "$text" .textproto).pb"
  done
}

status=0
for target in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$target"
  artifacts="$BUILD/artifacts/$target"
  regressions="tests/fuzz/regressions/$target"
  case "$target" in
    model_loader) encode_seeds model onnx.ModelProto "$corpus" ;;
    tensor_reader) encode_seeds tensor onnx.TensorProto "$corpus" ;;
    *) python3 tests/fuzz/make_seeds.py "$target" "$corpus" ;;
  esac
  mkdir -p "$artifacts"
  fuzzer="$BUILD/tests/fuzz/${target}_fuzzer"
  opts=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -max_len=65536 -print_final_stats=1
        -dict="tests/fuzz/$target.dict")
  if compgen -G "$regressions/*" >/dev/null; then
    echo "== $target: replaying $(ls "$regressions" | wc -l) regression input(s)"
    "$fuzzer" "${opts[@]}" "$regressions"/* || status=1
  fi
  echo "== $target: fuzzing for ${SECONDS_PER_TARGET}s (corpus $corpus)"
  "$fuzzer" "${opts[@]}" -max_total_time="$SECONDS_PER_TARGET" -artifact_prefix="$artifacts/" \
    "$corpus" $( [ -d "$regressions" ] && echo "$regressions" ) 2>&1 | tee "$BUILD/$target.log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)\|NEW_FUNC\|# Uses:' || true
  grep -q 'Done [0-9]* runs' "$BUILD/$target.log" || status=1
  echo "== $target: corpus now $(ls "$corpus" | wc -l) inputs"
done
exit $status
