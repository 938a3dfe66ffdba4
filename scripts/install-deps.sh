#!/usr/bin/env bash
# Installs everything onnx-train needs from Debian's packages. Idempotent; run as root.
# ocl-icd-opencl-dev and opencl-c-headers: Debian's oneDNN CMake config asks for OpenCL
# (its GPU runtime is OCL) without the package depending on it.
# libopenblas0-pthread: the BLAS behind PyTorch (an oracle and benchmark peer only); without it
# Debian's PyTorch falls back to the reference BLAS (~3 GFLOP/s) and its float64 runs take minutes.
# libopenmpi-dev openmpi-bin: the MPI communicator backend (--backend mpi) and mpirun.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libgloo-dev libhiredis-dev redis-server
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libjpeg62-turbo-dev libpng-dev libminizip-dev
  libonnx-testdata dataset-fashion-mnist
  python3 python3-numpy python3-onnx python3-torch python3-torchvision python3-pil libopenblas0-pthread
)
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
