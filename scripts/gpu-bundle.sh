#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has the CUDA toolkit and
# PyTorch but not Debian's ONNX, protobuf, Gloo and oneDNN: onnx-train and the CUDA test
# programs built here, the non-CUDA shared libraries they load (from ldd; the C library
# and the CUDA libraries cuBLAS, cuDNN, NCCL stay the target's), and ONNX's backend node
# cases for the CUDA conformance test. Writes shared/gpu-bundle/onnx-train-gpu.tar.gz
# (at most 60 MiB) and shared/gpu-bundle/MANIFEST.
#
#   scripts/gpu-bundle.sh            # BUILD_DIR=build-gpu-bundle JOBS=2 by default
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu-bundle}
JOBS=${JOBS:-2}
DEST=$ROOT/shared/gpu-bundle
LIMIT_MIB=60
TESTDATA=${ONNXTRAIN_TESTDATA:-/usr/share/libonnx-testdata/data}

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "gpu-bundle: no CUDA toolkit (nvcc) on this machine; the bundle holds CUDA code" >&2; exit 1; }

echo "gpu-bundle: configuring $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DONNXTRAIN_CUDA=ON >/dev/null
targets=(onnx-train)
available=$(make -C "$BUILD" help)
for t in cuda_runtime_test cuda_dnn_test cuda_math_test nccl_test; do
  if grep -q "\.\.\. $t\$" <<<"$available"; then targets+=("$t"); fi
done
echo "gpu-bundle: building ${targets[*]}"
make -C "$BUILD" -j"$JOBS" "${targets[@]}" >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/testdata"
for t in "${targets[@]}"; do
  bin=$(find "$BUILD/tools" "$BUILD/tests/cuda" -maxdepth 1 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "gpu-bundle: $t was not built" >&2; exit 1; }
  cp "$bin" "$stage/bin/$t"
  strip --strip-unneeded "$stage/bin/$t"
done
# The CUDA runtime and NCCL backend are plugins the programs load from ../lib.
make -C "$BUILD" -j"$JOBS" onnxtrain_cuda onnxtrain_nccl >/dev/null
cp "$BUILD"/lib/libonnxtrain_*.so "$stage/lib/"

# Libraries the target brings itself: the C runtime, and CUDA's (toolkit or PyTorch's
# nvidia-* packages), which must match its driver.
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
  echo "gpu-bundle: no ONNX node cases at $TESTDATA/node; the CUDA conformance test will skip" >&2
fi

{
  echo "onnx-train GPU bundle"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cuda: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -1)"
  echo "glibc: $(ldd --version | head -1)"
  echo "programs: ${targets[*]}"
  echo "libraries: $(cd "$stage/lib" && ls | tr '\n' ' ')"
  echo "CUDA libraries the target must provide:"
  for b in "$stage"/bin/*; do ldd "$b" | awk '{print $1}'; done | grep -E "$skip" | grep -Ev '^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc|libgcc_s)' | sort -u | sed 's/^/  /'
} >"$stage/MANIFEST"

mkdir -p "$DEST"
tar -C "$stage" -czf "$DEST/onnx-train-gpu.tar.gz.tmp" .
mv "$DEST/onnx-train-gpu.tar.gz.tmp" "$DEST/onnx-train-gpu.tar.gz"
cp "$stage/MANIFEST" "$DEST/MANIFEST"
size=$(stat -c %s "$DEST/onnx-train-gpu.tar.gz")
echo "gpu-bundle: wrote $DEST/onnx-train-gpu.tar.gz ($((size / 1048576)) MiB)"
if [ "$size" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "gpu-bundle: the bundle is larger than $LIMIT_MIB MiB" >&2
  exit 1
fi
