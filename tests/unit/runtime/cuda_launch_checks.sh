#!/bin/bash
# Every kernel launch (<<<...>>>) in runtime/cuda/ is followed by its check: the
# statement after the launch is OT_CUDA_CHECK_LAUNCH (runtime/cuda/launch_check.h) or
# `return cudaGetLastError();` (functions that hand the launch status to their caller).
# A launch whose refusal nobody reads leaves its output unwritten in silence.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../../.." && pwd)}
status=0
while IFS= read -r file; do
  # Join each launch statement (from the line with <<< to its ';') and look at the next one.
  awk -v file="$file" '
    function report() { printf "%s:%d: kernel launch without a check after it (add OT_CUDA_CHECK_LAUNCH(\"name\"); see runtime/cuda/launch_check.h)\n", file, start; bad = 1 }
    pending && /[^[:space:]]/ {
      if ($0 !~ /OT_CUDA_CHECK_LAUNCH\(/ && $0 !~ /return cudaGetLastError\(\);/) report()
      pending = 0
    }
    inlaunch { if ($0 ~ /;[[:space:]]*$/) { inlaunch = 0; pending = 1 }; next }
    /<<</ && !/^[[:space:]]*\/\// { start = FNR; if ($0 ~ /;[[:space:]]*$/) pending = 1; else inlaunch = 1; next }
    END { if (pending || inlaunch) report(); exit bad }
  ' "$file" || status=1
done < <(find "$root/runtime/cuda" -name '*.cu' | sort)
if [ "$status" -ne 0 ]; then
  echo "cuda_launch_checks: FAILED" >&2
  exit 1
fi
echo "cuda_launch_checks: every kernel launch in runtime/cuda/*.cu is checked"
