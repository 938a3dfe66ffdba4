#!/usr/bin/env bash
# The README's test command: install dependencies, build, run every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests
CMAKE_ARGS="-DONNXTRAIN_WERROR=ON -DONNXTRAIN_TESTS=ON -DONNXTRAIN_BENCHMARKS=ON ${CMAKE_ARGS:-}" bash scripts/build.sh
cd "${BUILD_DIR:-build}"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --output-on-failure --timeout 900 -j 1
