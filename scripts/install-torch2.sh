#!/usr/bin/env bash
# Makes the venv of today's PyTorch, a test oracle and benchmark peer only (never used at run
# time): a pinned PyTorch 2.x from PyPI with torchvision, onnxscript (the dynamo exporter's
# translator) and the ONNX release the product builds. PyPI's Linux torch wheel pulls the CUDA
# libraries it links (about 5 GB in all), so the venv is made once into a cache folder that
# outlives clones and reused while its pins are unchanged.
#
#   scripts/install-torch2.sh        prints the venv's python on its last line
# Cache: $ONNXTRAIN_CACHE (default /var/cache/onnx-train).
set -euo pipefail
pins="torch==2.15.0 torchvision==0.29.2 onnxscript==0.7.2 onnx==1.19.1 numpy==2.4.6"
cache=${ONNXTRAIN_CACHE:-/var/cache/onnx-train}
venv=$cache/torch2
stamp=$venv/.pins
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ] && "$venv/bin/python" -c "import torch, onnxscript" 2>/dev/null; then
  echo "install-torch2: $pins already in $venv" >&2
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
echo "install-torch2: making $venv with $pins (about 5 GB, once)" >&2
/usr/bin/python3 -m venv "$venv"
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
"$venv/bin/python" -c "import torch, torchvision, onnxscript, onnx" >&2
echo "$pins" > "$stamp"
echo "install-torch2: done" >&2
echo "$venv/bin/python"
