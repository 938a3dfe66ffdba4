#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a lent GPU machine (CUDA toolkit, driver and
# PyTorch's nvidia-* libraries, but not Debian's ONNX, protobuf, Gloo and oneDNN): the
# programs built here (onnx-train and the CUDA test programs), the CUDA and NCCL plugins,
# the non-CUDA shared libraries they load (from ldd; the C library and CUDA's own
# libraries -- cudart, cuBLAS, cuDNN, NCCL -- stay the target's), and ONNX's backend node
# cases for the CUDA conformance sweep. Writes, under the ignored folder build-gpu-bundle/:
#   onnx-train-gpu.tar.gz   the bundle (at most LIMIT_MIB, so the device tool can carry it)
#   MANIFEST                what is in it, with the CUDA major version it was built for
#                           ("cuda_major: N") and the glibc it needs ("glibc: X.Y")
# The device tool then runs the check with carry ["build-gpu-bundle"] and the command
# `scripts/gpu-check.sh` (results in $OUT).
#
#   scripts/gpu-bundle.sh     # BUILD_DIR: a CUDA build to take the programs from
#                             #   (default build/ when configured with ONNXTRAIN_CUDA=ON,
#                             #   else build-gpu/, configured here); JOBS=2
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/build-gpu-bundle
JOBS=${JOBS:-2}
LIMIT_MIB=${LIMIT_MIB:-60}
TESTDATA=${ONNXTRAIN_TESTDATA:-/usr/share/libonnx-testdata/data}
PROGRAMS=(onnx-train cuda_findings_test cuda_training_ops_test cuda_runtime_test cuda_dnn_test cuda_math_test nccl_test)

die() { echo "gpu-bundle: $*" >&2; exit 1; }

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || die "no CUDA toolkit (nvcc) on this machine; the bundle holds CUDA code"
cuda_version=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -1)
[ -n "$cuda_version" ] || die "cannot read the CUDA version from '$NVCC --version'"

if [ -n "${BUILD_DIR:-}" ]; then
  BUILD=$BUILD_DIR
elif grep -q '^ONNXTRAIN_CUDA:[A-Z]*=ON' "$ROOT/build/CMakeCache.txt" 2>/dev/null; then
  BUILD=$ROOT/build
else
  BUILD=$ROOT/build-gpu
  echo "gpu-bundle: configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_CUDA=ON -DONNXTRAIN_BENCHMARKS=OFF \
    ${ONNXTRAIN_ONNX_ROOT:+-DONNXTRAIN_ONNX_ROOT=$ONNXTRAIN_ONNX_ROOT} >/dev/null
fi
grep -q '^ONNXTRAIN_CUDA:[A-Z]*=ON' "$BUILD/CMakeCache.txt" || die "$BUILD is not configured with -DONNXTRAIN_CUDA=ON"
echo "gpu-bundle: building ${PROGRAMS[*]} in $BUILD"
cmake --build "$BUILD" -j"$JOBS" --target "${PROGRAMS[@]}" onnxtrain_cuda onnxtrain_nccl >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/testdata"
for t in "${PROGRAMS[@]}"; do
  bin=$(find "$BUILD/tools" "$BUILD/tests" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || die "$t was not built in $BUILD"
  cp "$bin" "$stage/bin/$t"
  strip --strip-unneeded "$stage/bin/$t"
done
# The CUDA runtime and NCCL backend are plugins (ONNXTRAIN_PLUGIN_DIR points at lib/).
cp "$BUILD"/lib/libonnxtrain_cuda.so "$BUILD"/lib/libonnxtrain_nccl.so "$stage/lib/"
strip --strip-unneeded "$stage"/lib/libonnxtrain_*.so

# Libraries the target brings itself: the C runtime, and CUDA's (from its toolkit or
# PyTorch's nvidia-* packages), which must match its driver.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcupti)'
for b in "$stage"/bin/* "$stage"/lib/libonnxtrain_*.so; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if grep -Eq "$skip" <<<"$name"; then continue; fi
  cp -L "$path" "$stage/lib/$name"
  strip --strip-unneeded "$stage/lib/$name" 2>/dev/null || true
done

if [ -d "$TESTDATA/node" ]; then
  cp -r "$TESTDATA/node" "$stage/testdata/node"
else
  echo "gpu-bundle: no ONNX node cases at $TESTDATA/node; the CUDA conformance sweep will skip" >&2
fi

# The newest glibc symbol version any packed file needs (the target's glibc must be as new).
glibc_needed=$(for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -1)
{
  echo "onnx-train GPU bundle"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cuda: $cuda_version"
  echo "cuda_major: ${cuda_version%%.*}"
  echo "glibc: ${glibc_needed:-unknown}"
  echo "programs: ${PROGRAMS[*]}"
  echo "libraries: $(cd "$stage/lib" && ls | tr '\n' ' ')"
  echo "CUDA libraries the target must provide:"
  for b in "$stage"/bin/* "$stage"/lib/libonnxtrain_*.so; do ldd "$b" | awk '{print $1}'; done | grep -E "$skip" |
    grep -Ev '^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc|libgcc_s)' | sort -u | sed 's/^/  /'
} >"$stage/MANIFEST"

mkdir -p "$DEST"
tar -C "$stage" -czf "$DEST/onnx-train-gpu.tar.gz.tmp" .
mv "$DEST/onnx-train-gpu.tar.gz.tmp" "$DEST/onnx-train-gpu.tar.gz"
cp "$stage/MANIFEST" "$DEST/MANIFEST"
size=$(stat -c %s "$DEST/onnx-train-gpu.tar.gz")
echo "gpu-bundle: wrote $DEST/onnx-train-gpu.tar.gz ($((size / 1048576)) MiB; CUDA $cuda_version, glibc >= ${glibc_needed:-?})"
if [ "$size" -gt $((LIMIT_MIB * 1048576)) ]; then
  die "the bundle is larger than $LIMIT_MIB MiB (the device tool carries at most 64 MiB with the working tree)"
fi
