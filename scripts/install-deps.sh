#!/usr/bin/env bash
# Installs what onnx-train needs from Debian's packages. Idempotent; run as root.
#   scripts/install-deps.sh           what building and running need (the README's main command)
#   scripts/install-deps.sh --tests   that, plus the test and benchmark tools and oracles:
#                                     GoogleTest, Google Benchmark, ONNX's backend test data and
#                                     PyTorch (about 180 packages), used only by tests/ and benchmarks/,
#                                     and a cached venv of PyTorch 2.x from PyPI (install-torch2.sh)
# ONNX itself is not Debian's (1.12 stops at opset 17): scripts/build-onnx.sh builds 1.19.1 from
# its source distribution when scripts/build.sh runs.
# ocl-icd-opencl-dev and opencl-c-headers: Debian's oneDNN CMake config asks for OpenCL
# (its GPU runtime is OCL) without the package depending on it.
# libopenblas0-pthread: the BLAS behind PyTorch (an oracle and benchmark peer only); without it
# Debian's PyTorch falls back to the reference BLAS (~3 GFLOP/s) and its float64 runs take minutes.
# libopenmpi-dev openmpi-bin: the MPI communicator backend (--backend mpi) and mpirun.
set -euo pipefail
packages=(
  build-essential cmake pkg-config python3 python3-pip
  libprotobuf-dev protobuf-compiler
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libgloo-dev libhiredis-dev redis-server
  libopenmpi-dev openmpi-bin
  zlib1g-dev libjpeg62-turbo-dev libpng-dev libminizip-dev
  dataset-fashion-mnist
)
case "${1:-}" in
  --tests)
    packages+=(
      libgtest-dev libgmock-dev libbenchmark-dev libonnx-testdata
      python3 python3-numpy python3-onnx python3-torch python3-torchvision python3-pil libopenblas0-pthread
      python3-venv
    ) ;;
  "") ;;
  *) echo "install-deps: unknown option '$1' (use --tests for the test tools and oracles)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
if [ "${1:-}" = "--tests" ]; then
  # Today's PyTorch (2.x, dynamo exporter) beside Debian's 1.13: a cached venv, tests only.
  bash "$(dirname "$0")/install-torch2.sh" >/dev/null
fi
