#!/usr/bin/env bash
# Builds the ONNX C++ library (checker, shape inference, inliner, external data, opsets up to
# 24) from its release source distribution, against Debian's protobuf, and installs it under a
# cache folder that outlives build trees and clones. Debian 12's libonnx (1.12) stops at opset 17
# and IR 8, so the product does not use it.
#
#   scripts/build-onnx.sh            prints the install prefix on its last line (CMake's ONNXTRAIN_ONNX_ROOT)
#
# The same archive's backend node cases (onnx/backend/test/data/node, opsets up to 24) and its
# "light" Model Zoo classics (data/light: AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
# ShuffleNet, SqueezeNet, VGG-19, ZFNet-512 without their weights) are unpacked beside the
# library, in $prefix/share/onnx-backend-test-data/{node,light}, for the tests.
#
# The archive is fetched with pip (the only source of ONNX that is not Debian's) and must match
# the pinned SHA-256; a cached build with a stamp of that hash is reused as it is.
# Cache: $ONNXTRAIN_CACHE (default /var/cache/onnx-train). Cost: about 3 CPU-minutes once.
set -euo pipefail
onnx_version=1.19.1
onnx_sha256=737524d6eb3907d3499ea459c6f01c5a96278bb3a0f2ff8ae04786fb5d7f1ed5
cache=${ONNXTRAIN_CACHE:-/var/cache/onnx-train}
prefix=$cache/onnx-$onnx_version
stamp=$prefix/.built-from-$onnx_sha256
testdata=$prefix/share/onnx-backend-test-data

if [ -f "$stamp" ] && [ -d "$testdata/node" ] && [ -d "$testdata/light" ]; then
  echo "build-onnx: ONNX $onnx_version already built in $prefix" >&2
  echo "$prefix"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/onnx-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
archive=$cache/onnx-$onnx_version.tar.gz
if [ ! -f "$archive" ] || ! echo "$onnx_sha256  $archive" | sha256sum -c --status; then
  echo "build-onnx: fetching the onnx $onnx_version source distribution" >&2
  python=$(command -v python3)
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    apt-get install -y -qq --no-install-recommends python3-pip >&2
  fi
  printf 'onnx==%s --hash=sha256:%s\n' "$onnx_version" "$onnx_sha256" > "$work/requirements.txt"
  # pip prepares the sdist's metadata in an isolated environment of its build requirements;
  # PIP_BREAK_SYSTEM_PACKAGES lets Debian's pip download (it installs nothing).
  PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip download --quiet --no-deps --no-binary :all: \
    --require-hashes -r "$work/requirements.txt" -d "$work/dl" >&2
  mv "$work/dl/onnx-$onnx_version.tar.gz" "$archive.part"
  mv "$archive.part" "$archive"
fi
echo "$onnx_sha256  $archive" | sha256sum -c --status || {
  echo "build-onnx: $archive does not match the pinned SHA-256 $onnx_sha256; delete it and rerun" >&2
  exit 1
}

tar -xzf "$archive" -C "$work"
src=$work/onnx-$onnx_version
if [ -f "$stamp" ]; then
  mkdir -p "$testdata" && rm -rf "$testdata/node" "$testdata/light"
  mv "$src/onnx/backend/test/data/node" "$src/onnx/backend/test/data/light" "$testdata/"
  echo "$prefix"
  exit 0
fi
echo "build-onnx: building ONNX $onnx_version (about 3 CPU-minutes)" >&2
# Static libraries with position-independent code (the CUDA plugins link against the program),
# protobuf from Debian as a shared library, the ML domain on (as Debian's build), no Python.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DONNX_BUILD_PYTHON=OFF \
  -DONNX_BUILD_TESTS=OFF -DONNX_USE_PROTOBUF_SHARED_LIBS=ON -DONNX_ML=ON \
  -DONNX_NAMESPACE=onnx -DPython3_EXECUTABLE="$(command -v python3)" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" -j "${JOBS:-$(nproc)}" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log" >&2; exit 1; }
rm -rf "$prefix"
cmake --install "$work/build" >/dev/null
mkdir -p "$testdata"
mv "$src/onnx/backend/test/data/node" "$src/onnx/backend/test/data/light" "$testdata/"
touch "$stamp"
echo "build-onnx: installed ONNX $onnx_version in $prefix" >&2
echo "$prefix"
