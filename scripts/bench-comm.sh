#!/usr/bin/env bash
# Allreduce speed of `onnx-train bench-comm --backend gloo` beside torch.distributed's Gloo
# backend (/work/shared/reference/torch_allreduce.py), in the same run on this host, for
# world sizes 2 and 4 from 4 B to 64 MiB. Prints both tables and, per size, the ratios
# ours/PyTorch of time (lower is better) and busbw (higher is better).
#
#   scripts/bench-comm.sh [BUILD_DIR]          (default: build)
# Environment: WORLD_SIZES="2 4", MAX_BYTES=67108864, ITERS=20, PYTHON=/usr/bin/python3,
# BENCH_COMM="path/to/onnx-train bench-comm" to run another binary.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
bench="${BENCH_COMM:-$build/tools/onnx-train bench-comm}"
python="${PYTHON:-/usr/bin/python3}"
reference="${TORCH_ALLREDUCE:-/work/shared/reference/torch_allreduce.py}"
max_bytes="${MAX_BYTES:-67108864}"
iters="${ITERS:-20}"
work="$(mktemp -d /tmp/bench-comm-XXXXXX)"
trap 'rm -rf "$work"' EXIT

for n in ${WORLD_SIZES:-2 4}; do
  echo "== world size $n: onnx-train bench-comm --backend gloo"
  $bench --backend gloo --world-size "$n" --min-bytes 4 --max-bytes "$max_bytes" \
    --iters "$iters" | tee "$work/ours.$n"
  echo "== world size $n: torch.distributed (gloo), $(basename "$reference")"
  # Run from /tmp: a `torch` folder in the current directory would shadow the package.
  (cd /tmp && "$python" "$reference" --world-size "$n" --min-bytes 4 --max-bytes "$max_bytes" \
    --iters "$iters" --port $((29600 + n))) | tee "$work/torch.$n"
  echo "== world size $n: ours / PyTorch"
  awk '
    FNR == 1 { file++ }
    /^#/ || $1 == "bytes" { next }
    file == 1 { t[$1] = $3; b[$1] = $5; next }
    file == 2 && ($1 in t) {
      printf "%12s %12s %12s %10.2f %11s %11s %10.2f\n", $1, t[$1], $2, t[$1] / $2, b[$1], $4,
             ($4 > 0 ? b[$1] / $4 : 0)
      if ($1 + 0 >= 1048576) { n_big++; if (b[$1] >= $4) ok_big++ }
      if ($1 + 0 < 65536) { n_small++; if (t[$1] <= $2) ok_small++ }
    }
    BEGIN { printf "%12s %12s %12s %10s %11s %11s %10s\n", "bytes", "ours_us", "torch_us",
            "time_x", "ours_busbw", "torch_busbw", "busbw_x" }
    END { printf "# busbw >= PyTorch at %d of %d sizes from 1 MiB; time <= PyTorch at %d of %d sizes under 64 KiB\n",
          ok_big, n_big, ok_small, n_small }
  ' "$work/ours.$n" "$work/torch.$n"
done
