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
- The default optimize=True also merges small initializers with equal bytes (onnx_ir's
  DeduplicateInitializersPass): a fresh transformer's LayerNorm weights and biases, the layers
  nn.TransformerEncoder deep-copies. Trained as exported they would be one tied tensor; onnx-train
  gives each module its own again under PyTorch's names: `grad` matches PyTorch float64 on
  every one of them, the run says so, and after training the copies differ.

    /var/cache/onnx-train/torch2/bin/python tests/zoo/torch2_exports_test.py --onnx-train build/tools/onnx-train \
        --workdir /tmp/t2x
"""
import contextlib
import copy
import io
import os
import shutil
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import last_error_line, read_tensor, test_args, test_parser, write_tensor  # noqa: E402
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


class OwnLayerNorm(nn.Module):
    """nanoGPT's LayerNorm: the module's own ones and zeros, F.layer_norm."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return nn.functional.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class FreshEncoder(nn.Module):
    """Two deep-copied encoder layers and three kinds of normalisation, all at their initial values."""

    def __init__(self, width=16):
        super().__init__()
        self.embed = nn.Linear(12, width)
        layer = nn.TransformerEncoderLayer(width, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = OwnLayerNorm(width)
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.ln(self.norm(self.encoder(self.embed(x)))).mean(1))


def check_merged_parameters(args, check):
    torch.manual_seed(0)
    module = FreshEncoder()
    model = os.path.join(args.workdir, "fresh_encoder.onnx")
    export(module, (8, 12), model)
    params = dict(module.named_parameters())
    exported = weights_of(model)
    # Gone by merging (equal bytes), not by folding (out_proj.bias, the weights: val_<n>).
    merged = sorted(n for n in params if n not in exported and ("norm" in n or n.startswith("ln.") or
                                                                n.endswith(("in_proj_bias", "linear1.bias", "linear2.bias"))))
    check("the exporter merged equal parameters (the case this checks)", len(merged) >= 8,
          f"{len(merged)} names gone, e.g. {merged[:3]}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8, 12)).astype(np.float32)
    y = rng.integers(0, 10, size=3).astype(np.int64)
    write_tensor(x, "input", os.path.join(args.workdir, "fe_x.pb"))
    write_tensor(y, "labels", os.path.join(args.workdir, "fe_y.pb"))
    out = os.path.join(args.workdir, "fe_grads")
    proc = subprocess.run([args.onnx_train, "grad", model, "--threads", "2", "--input", "input=" + os.path.join(
        args.workdir, "fe_x.pb"), "--input", "labels=" + os.path.join(args.workdir, "fe_y.pb"), "-o", out],
        capture_output=True, text=True)
    if proc.returncode != 0:
        check("grad of the optimize=True export", False, last_error_line(proc))
        return
    ours = dict(read_tensor(os.path.join(out, f)) for f in os.listdir(out))
    ref = copy.deepcopy(module).double()
    loss = nn.functional.cross_entropy(ref(torch.from_numpy(x).double()), torch.from_numpy(y))
    loss.backward()
    grads = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    worst = max((float(np.linalg.norm(ours[n] - grads[n]) / max(np.linalg.norm(grads[n]), 1e-12)), n)
                for n in merged if n in ours) if any(n in ours for n in merged) else (float("inf"), "none")
    check("every merged parameter has its own gradient under its PyTorch name",
          all(n in ours for n in merged), str([n for n in merged if n not in ours][:4]))
    check("those gradients match PyTorch float64 (relative by norm, 1e-5)", worst[0] <= 1e-5, f"worst {worst}")
    try:
        w, log = train(args, model, "fresh-encoder", [])
    except RuntimeError as e:
        check("the optimize=True transformer trains", False, str(e))
        return
    check("the run says which parameters it took apart", "had merged" in log,
          str([ln for ln in log.splitlines() if "merged" in ln][:1]))
    pairs = [("encoder.layers.0.norm1.weight", "encoder.layers.1.norm1.weight"),
             ("encoder.layers.0.norm1.bias", "encoder.layers.0.norm2.bias"), ("norm.weight", "ln.weight")]
    check("after training, parameters that started equal differ (trained apart, not tied)",
          all(a in w and b in w and not np.array_equal(w[a], w[b]) for a, b in pairs), str(pairs))


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
    check_merged_parameters(args, check)
    return check.finish(f"torch2_exports_test ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
