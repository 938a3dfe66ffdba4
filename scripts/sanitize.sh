#!/usr/bin/env bash
# Builds the project with AddressSanitizer and UndefinedBehaviorSanitizer and runs the test
# suite under them (not part of every CI run: the build and the run take several times longer).
#
#   scripts/sanitize.sh [extra ctest arguments, e.g. -R data_test]
#
# Configures a separate build (build-asan, or $ASAN_BUILD_DIR) with
# -DONNXTRAIN_SANITIZE=address,undefined (or $SANITIZERS) and runs ctest there. Every
# sanitizer report is fatal (-fno-sanitize-recover=all, halt_on_error), so a finding fails
# its test. The whole suite runs, the Python-driven ones included (about 10 minutes on two
# cores; torch_train_parity alone about 4); ASAN_CTEST_EXCLUDE='^torch_' leaves out the
# PyTorch parity tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-2}
EXCLUDE=${ASAN_CTEST_EXCLUDE:-}

# -g1: line tables for the reports' stack traces at little build cost.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 \
  -DONNXTRAIN_SANITIZE="${SANITIZERS:-address,undefined}" -DONNXTRAIN_BENCHMARKS=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS"

# Leak checking stays on; strict_string_checks and the init-order check catch more misuse.
# Reports also go to files in $BUILD/sanitizer-reports: the chaos and data-parallel tests run
# worker processes whose abnormal exit the launcher may answer with a restart, so a report
# there would not fail the test by itself.
REPORTS="$PWD/$BUILD/sanitizer-reports"
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:log_path=$REPORTS/asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan}
status=0
(cd "$BUILD" && ctest --output-on-failure ${EXCLUDE:+-E "$EXCLUDE"} "$@") || status=1
if compgen -G "$REPORTS/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports in $REPORTS:" >&2
  head -n 40 "$REPORTS"/* >&2
  status=1
fi
exit $status
