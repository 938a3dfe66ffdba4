#!/usr/bin/env bash
# Installs everything onnx-train needs from Debian's packages. Idempotent; run as root.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev libgloo-dev libhiredis-dev redis-server
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  libonnx-testdata dataset-fashion-mnist
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
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
