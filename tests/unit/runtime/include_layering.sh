#!/bin/sh
# Include layering of the runtime (and of graph/ under it), checked on the sources:
#   graph/                      includes nothing of runtime/
#   runtime/{core,executor,ops}/  (the device-neutral part) include nothing of runtime/cpu/
#                               or runtime/cuda/, and no oneDNN or OpenMP header
#   runtime/cuda/               includes nothing of runtime/cpu/
# Prints each offending line and fails when there is one. Usage: include_layering.sh SOURCE_DIR
set -u
root=${1:-.}
cd "$root" || exit 2
status=0
check() {  # check WHAT PATTERN FILES...: fail on any include line of FILES matching PATTERN
  what=$1 pattern=$2
  shift 2
  hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "include_layering: $what:"
    echo "$hits" | sed 's/^/  /'
    status=1
  fi
}
core=$(find runtime -path runtime/cpu -prune -o -path runtime/cuda -prune -o -type f \( -name '*.h' -o -name '*.cc' \) -print 2>/dev/null | sort)
cuda=$(find runtime/cuda -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) 2>/dev/null | sort)
graph=$(find graph -type f \( -name '*.h' -o -name '*.cc' \) 2>/dev/null | sort)
[ -n "$core" ] || { echo "include_layering: no runtime sources under $root"; exit 2; }
check "the device-neutral runtime includes a device's kernels (move the shared part to runtime/ops/)" \
  'runtime/cpu/|runtime/cuda/|dnnl|oneapi/|omp\.h' $core
[ -z "$cuda" ] || check "a CUDA file includes a CPU kernel header (move the shared part to runtime/ops/)" \
  'runtime/cpu/' $cuda
check "graph/ includes the runtime (graph/ sits below runtime/)" 'runtime/' $graph
[ $status -eq 0 ] && echo "include_layering: ok ($(echo $core | wc -w) core, $(echo $cuda | wc -w) CUDA, $(echo $graph | wc -w) graph files)"
exit $status
