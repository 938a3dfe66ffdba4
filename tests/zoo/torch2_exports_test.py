#!/usr/bin/env python3
"""What PyTorch 2.x's dynamo exporter writes, trained as the user meant it (run with the
PyTorch 2.x venv of scripts/install-torch2.sh), through the CLI:

- Stochastic depth and Dropout in train(): the exporter writes RandomUniformLike + Less +
  Cast + Div and Dropout. Two runs with one seed end bitwise equal, another seed ends
  elsewhere (the noise is real), and a run SIGKILLed at step 5 and restarted from its step-3
  snapshot (--max-restarts 1) ends bitwise equal to the uninterrupted one.
- The default optimize=True folds each BatchNorm into the Conv before it: the trained
  checkpoint has the BatchNorm back under the module's own names (layer1.0.bn1.weight, ...),
  the run says so, and the weights sit in model.onnx.data beside the model.
- The exporter's folded scalar constants (a ReLU6's bounds) stay constants: unchanged in the
  checkpoint, bitwise.

    /var/cache/onnx-train/torch2/bin/python tests/zoo/torch2_exports_test.py --onnx-train build/tools/onnx-train \
        --workdir /tmp/t2x
"""
import contextlib
import io
import os
import shutil
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import test_args, test_parser  # noqa: E402
from check_tally import Checks  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402


def export(module, shape, path, optimize=True):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module.train(), (torch.randn((2,) + shape),), path, input_names=["input"],
                          output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},), dynamo=True,
                          external_data=True, optimize=optimize, opset_version=20)


def weights_of(path):
    m = onnx.load(path)  # external data too
    return {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}


def train(args, model, tag, options, env=None):
    ck = os.path.join(args.workdir, "ck-" + tag)
    shutil.rmtree(ck, ignore_errors=True)
    cmd = [args.onnx_train, model, "--data", "synthetic:96", "--epochs", "2", "--batch", "16", "--checkpoint-dir", ck,
           "--threads", "2", "--timeout", "60", "--lr", "0.05"] + options
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1][:400])
    return weights_of(os.path.join(ck, "epoch_0002.onnx")), proc.stdout + proc.stderr


class StochasticNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depth = torchvision.ops.StochasticDepth(0.4, "row")
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = y + self.depth(y)
        return self.fc(self.drop(torch.flatten(y, 1)))


class ClipNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.relu6(self.conv(x) * 4.0), 1))


def main():
    p = test_parser(__doc__)
    args = test_args(p, fresh=True)
    start = time.time()
    check = Checks(width=100)

    # Stochastic depth and dropout: seeded, real, and the same after a restart.
    torch.manual_seed(0)
    model = os.path.join(args.workdir, "stochastic.onnx")
    export(StochasticNet(), (3, 8, 8), model)
    ops = {n.op_type for n in onnx.load(model, load_external_data=False).graph.node}
    check("the export draws its noise in the graph", {"RandomUniformLike", "Dropout"} <= ops, str(sorted(ops)))
    try:
        a, _ = train(args, model, "seed1", ["--seed", "1"])
        b, _ = train(args, model, "seed1-again", ["--seed", "1"])
        c, _ = train(args, model, "seed2", ["--seed", "2"])
        common = ["--seed", "1", "--snapshot-every", "3", "--max-restarts", "1"]
        whole, _ = train(args, model, "whole", common)
        killed, out = train(args, model, "killed", common, {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "5"})
    except RuntimeError as e:
        check("stochastic depth trains", False, str(e))
    else:
        check("one seed, two runs: bitwise equal", all(np.array_equal(a[n], b[n]) for n in a))
        check("another seed ends elsewhere", any(not np.array_equal(a[n], c[n]) for n in a))
        check("killed at step 5 and restarted from the step-3 snapshot: bitwise equal to the uninterrupted run",
              all(np.array_equal(killed[n], whole[n]) for n in whole),
              str([ln for ln in out.splitlines() if "restart" in ln or "resum" in ln][:2]))

    # BatchNorm folded by the default optimize=True, restored under the module's names.
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=10)
    model = os.path.join(args.workdir, "resnet18.onnx")
    export(resnet, (3, 16, 16), model)
    check("weights in model.onnx.data beside the model", os.path.getsize(model + ".data") > 1_000_000,
          f"{os.path.getsize(model + '.data')} bytes of data, {os.path.getsize(model)} of graph")
    exported = onnx.load(model, load_external_data=False)
    check("the export has no BatchNormalization left", all(n.op_type != "BatchNormalization" for n in exported.graph.node))
    try:
        w, out = train(args, model, "resnet18", [])
    except RuntimeError as e:
        check("resnet18 (dynamo, optimize=True) trains", False, str(e))
    else:
        names = {n for n, _ in resnet.named_parameters()} | {n for n, _ in resnet.named_buffers()
                                                               if not n.endswith("num_batches_tracked")}
        bn = sorted(n for n in names if ".bn" in n or n.startswith("bn1") or "downsample.1" in n)
        missing = [n for n in bn if n not in w]
        check("every BatchNorm is back under its module's names", not missing and len(bn) == 4 * 20,
              f"{len(bn) - len(missing)} of {len(bn)} BatchNorm tensors, e.g. missing {missing[:3]}")
        check("the run says what it restored", "folded 20 BatchNorm layers" in out,
              str([ln for ln in out.splitlines() if "BatchNorm" in ln][:1]))
        moved = [n for n in bn if n.endswith("running_var") and n in w and not np.allclose(w[n], 1.0)]
        check("restored layers train in training form (running statistics move)", len(moved) == 20, f"{len(moved)} of 20")

    # A ReLU6's bounds are constants the exporter folded into initializers.
    torch.manual_seed(0)
    model = os.path.join(args.workdir, "clip.onnx")
    export(ClipNet(), (3, 8, 8), model)
    start_w = weights_of(model)
    scalars = sorted(n for n, t in start_w.items() if t.size <= 1 and "." not in n)
    try:
        w, _ = train(args, model, "clip", [])
    except RuntimeError as e:
        check("ReLU6 net trains", False, str(e))
    else:
        check("the exporter's scalar constants are untouched", bool(scalars) and all(np.array_equal(w[n], start_w[n])
                                                                              for n in scalars), str(scalars))
        check("the parameters trained", not np.array_equal(w["conv.weight"], start_w["conv.weight"]))
    return check.finish(f"torch2_exports_test ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
