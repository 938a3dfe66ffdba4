#!/usr/bin/env bash
# Allreduce speed of `onnx-train bench-comm` over Gloo and over MPI beside
# torch.distributed's Gloo backend (benchmarks/torch_allreduce.py), in the same
# run on this host, for world sizes 2 and 4 from 4 B to 64 MiB. Prints the three tables and,
# per size, one three-way table: time and busbw of each, ours-Gloo/torch busbw, MPI/ours-Gloo
# busbw and time; then the issue-19 acceptance lines (MPI busbw >= 1.5x Gloo's at 4, 16 and
# 64 MiB with 2 ranks; MPI time at 4 KiB <= 0.2x Gloo's; Gloo busbw >= torch's from 1 MiB).
#
#   scripts/bench-comm.sh [BUILD_DIR]          (default: build)
# Environment: WORLD_SIZES="2 4", MAX_BYTES=67108864, ITERS=20, PYTHON=/usr/bin/python3,
# BENCH_COMM="path/to/onnx-train bench-comm" to run another binary, MPI=0 to leave MPI out
# (left out by itself when the build has no MPI backend).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
bench="${BENCH_COMM:-$build/tools/onnx-train bench-comm}"
python="${PYTHON:-/usr/bin/python3}"
reference="${TORCH_ALLREDUCE:-$root/benchmarks/torch_allreduce.py}"
max_bytes="${MAX_BYTES:-67108864}"
iters="${ITERS:-20}"
work="$(mktemp -d /tmp/bench-comm-XXXXXX)"
trap 'rm -rf "$work"' EXIT
# mpirun refuses root unless told (containers, CI).
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpi="${MPI:-1}"
if [ "$mpi" = 1 ] && ! $bench --backend mpi --world-size 1 --max-bytes 4 --iters 1 --warmup 0 >/dev/null 2>&1; then
  echo "# no MPI backend in this build (or no mpirun): the mpi columns are left out"
  mpi=0
fi

for n in ${WORLD_SIZES:-2 4}; do
  echo "== world size $n: onnx-train bench-comm --backend gloo"
  $bench --backend gloo --world-size "$n" --min-bytes 4 --max-bytes "$max_bytes" \
    --iters "$iters" | tee "$work/gloo.$n"
  if [ "$mpi" = 1 ]; then
    echo "== world size $n: onnx-train bench-comm --backend mpi"
    $bench --backend mpi --world-size "$n" --min-bytes 4 --max-bytes "$max_bytes" \
      --iters "$iters" | tee "$work/mpi.$n"
  else
    : > "$work/mpi.$n"
  fi
  echo "== world size $n: torch.distributed (gloo), $(basename "$reference")"
  # Run from /tmp: a `torch` folder in the current directory would shadow the package.
  (cd /tmp && "$python" "$reference" --world-size "$n" --min-bytes 4 --max-bytes "$max_bytes" \
    --iters "$iters" --port $((29600 + n))) | tee "$work/torch.$n"
  echo "== world size $n: gloo (ours), mpi (ours), torch's gloo side by side (time in us, busbw in GB/s)"
  awk -v n="$n" '
    { file = FILENAME == ARGV[1] ? 1 : FILENAME == ARGV[2] ? 2 : 3 }
    /^#/ || $1 == "bytes" || NF == 0 { next }
    file == 1 { gt[$1] = $3; gb[$1] = $5; next }
    file == 2 { mt[$1] = $3; mb[$1] = $5; next }
    file == 3 && ($1 in gt) {
      m_t = ($1 in mt) ? mt[$1] : "-"; m_b = ($1 in mb) ? mb[$1] : "-"
      g_x = $4 > 0 ? gb[$1] / $4 : 0
      printf "%12s %10s %10s %10s %9s %9s %9s %12.2f", $1, gt[$1], m_t, $2, gb[$1], m_b, $4, g_x
      if ($1 in mt) printf " %12.2f %12.2f\n", (gb[$1] > 0 ? mb[$1] / gb[$1] : 0), mt[$1] / gt[$1]
      else printf " %12s %12s\n", "-", "-"
      if ($1 + 0 >= 1048576) { n_big++; if (gb[$1] >= $4) ok_big++ }
      if (n == 2 && ($1 == 4194304 || $1 == 16777216 || $1 == 67108864) && ($1 in mb)) {
        n_mpi++; if (mb[$1] >= 1.5 * gb[$1]) ok_mpi++
      }
      if (n == 2 && $1 == 4096 && ($1 in mt)) small = sprintf("%.2f", mt[$1] / gt[$1])
    }
    BEGIN { printf "%12s %10s %10s %10s %9s %9s %9s %12s %12s %12s\n", "bytes", "gloo_us", "mpi_us", "torch_us",
            "gloo_bw", "mpi_bw", "torch_bw", "gloo/torch_bw", "mpi/gloo_bw", "mpi/gloo_t" }
    END {
      printf "# gloo busbw >= torch at %d of %d sizes from 1 MiB\n", ok_big, n_big
      if (n_mpi) printf "# mpi busbw >= 1.5x gloo at %d of %d sizes (4, 16, 64 MiB)\n", ok_mpi, n_mpi
      if (small != "") printf "# mpi time at 4 KiB: %sx gloo (goal <= 0.2)\n", small
    }
  ' "$work/gloo.$n" "$work/mpi.$n" "$work/torch.$n"
done
