#!/bin/bash
# scripts/gpu-check.sh and scripts/gpu-bundle.sh without a GPU: both parse (bash -n, and
# the shellcheck linter where installed); the check says SKIPPED with "no NVIDIA driver" and exits 0
# on a machine without one; with a fake nvidia-smi it refuses a bundle built for a newer
# CUDA major version than the driver supports, and names a GLIBC error a program prints
# on stderr; it always leaves summary.txt and logs.tar.gz in $OUT. Where a bundle has been
# made (build-gpu-bundle/), its MANIFEST and size are checked too.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

for s in gpu-check.sh gpu-bundle.sh; do
  if bash -n "$root/scripts/$s"; then pass "$s parses"; else fail "$s has a syntax error"; fi
  if command -v shellcheck >/dev/null; then
    if shellcheck -S warning "$root/scripts/$s"; then pass "$s passes shellcheck"; else fail "shellcheck $s"; fi
  fi
done

# check OUT [PATH] [BUNDLE]: runs gpu-check.sh, its output in $tmp/out.txt; echoes the exit code.
check() {
  local out=$1 path=${2:-$PATH} bundle=${3:-$tmp/none.tar.gz}
  mkdir -p "$out"
  OUT=$out PATH=$path BUNDLE=$bundle GPU_CHECK_BUDGET=60 bash "$root/scripts/gpu-check.sh" >"$tmp/out.txt" 2>&1
  echo $?
}
expect() {  # expect WHAT CODE WANT_CODE PATTERN OUT
  local what=$1 code=$2 want=$3 pattern=$4 out=$5
  if [ "$code" = "$want" ] && grep -q -- "$pattern" "$out/summary.txt" && [ -f "$out/logs.tar.gz" ]; then
    pass "$what"
  else
    fail "$what: exit $code (want $want), summary:"; sed 's/^/    /' "$out/summary.txt" 2>/dev/null; sed 's/^/    /' "$tmp/out.txt"
  fi
}

# 1. No driver: a PATH without nvidia-smi.
nodriver=$tmp/nodriver-bin
mkdir -p "$nodriver"
for t in bash sed grep head tail tee tar gzip mktemp date cat dirname mkdir rm cut sort tr ldd timeout python3 env; do
  p=$(command -v "$t") && ln -s "$p" "$nodriver/$t"
done
code=$(check "$tmp/out1" "$nodriver")
expect "no driver: SKIPPED, exit 0" "$code" 0 "SKIPPED: no NVIDIA driver" "$tmp/out1"

# A fake driver that supports CUDA 12.4, and fake bundles.
fake=$tmp/fake-bin
mkdir -p "$fake"
cat >"$fake/nvidia-smi" <<'SMI'
#!/bin/bash
if [ $# -eq 0 ]; then
  echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"
else
  echo "Fake GPU, 550.54.15, 81559 MiB"
fi
SMI
chmod +x "$fake/nvidia-smi"
make_bundle() {  # make_bundle NAME CUDA_MAJOR: a bundle whose onnx-train prints a GLIBC error
  local dir=$tmp/$1
  mkdir -p "$dir/bin" "$dir/lib"
  printf 'onnx-train GPU bundle\ncuda: %s.0\ncuda_major: %s\nglibc: 2.36\n' "$2" "$2" >"$dir/MANIFEST"
  printf '#!/bin/sh\necho "onnx-train: /lib/x86_64-linux-gnu/libc.so.6: version GLIBC_2.99 not found" >&2\nexit 1\n' \
    >"$dir/bin/onnx-train"
  chmod +x "$dir/bin/onnx-train"
  : >"$dir/lib/libonnxtrain_cuda.so"
  tar -C "$dir" -czf "$tmp/$1.tar.gz" .
  echo "$tmp/$1.tar.gz"
}

# 2. The bundle needs CUDA 13, the driver has 12.4.
code=$(check "$tmp/out2" "$fake:$PATH" "$(make_bundle newer 13)")
expect "driver older than the bundle's CUDA: refused" "$code" 1 "supports CUDA 12.4, but the bundle was built with CUDA 13" \
  "$tmp/out2"

# 3. Driver fine, but the program cannot start (glibc): the stderr line is named.
code=$(check "$tmp/out3" "$fake:$PATH" "$(make_bundle glibc 12)")
expect "GLIBC error on stderr: named" "$code" 1 "GLIBC_2.99" "$tmp/out3"

# 4. No bundle at all.
code=$(check "$tmp/out4" "$fake:$PATH" "$tmp/missing.tar.gz")
expect "no bundle: says how to make it" "$code" 1 "scripts/gpu-bundle.sh" "$tmp/out4"

# 5. A bundle made here (scripts/gpu-bundle.sh): MANIFEST and size.
bundle=$root/build-gpu-bundle/onnx-train-gpu.tar.gz
if [ -f "$bundle" ]; then
  size=$(stat -c %s "$bundle")
  if [ "$size" -le $((60 * 1048576)) ]; then pass "bundle is $((size / 1048576)) MiB"; else fail "bundle is $((size / 1048576)) MiB, over 60"; fi
  if grep -q '^cuda_major: [0-9]' "$root/build-gpu-bundle/MANIFEST"; then pass "MANIFEST names its CUDA major version"; else fail "MANIFEST has no cuda_major"; fi
  listing=$(tar -tzf "$bundle")
  for f in bin/onnx-train bin/cuda_findings_test bin/cuda_runtime_test lib/libonnxtrain_cuda.so MANIFEST; do
    if grep -q "^\./$f\$" <<<"$listing"; then pass "bundle has $f"; else fail "bundle lacks $f"; fi
  done
else
  echo "note: no bundle at $bundle (scripts/gpu-bundle.sh makes it); its checks are left out"
fi

if [ "$failures" -gt 0 ]; then
  echo "gpu_scripts_test: $failures check(s) failed"
  exit 1
fi
echo "gpu_scripts_test: all checks passed"
