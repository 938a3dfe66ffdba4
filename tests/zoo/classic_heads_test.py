#!/usr/bin/env python3
"""Classic inference heads and --num-classes (issue "Fine-tune the ONNX models people download").

1. Heads as the model means them. Small classic-style models are built in PyTorch and exported
   in eval mode at batch 1 (no dynamic axes, as zoo models are) at opsets 9-12, once with the
   weights also listed as graph inputs (keep_initializers_as_inputs=True):
   - a Linear head ending in Softmax, and one ending in LogSoftmax;
   - a SqueezeNet-style head: 1x1 Conv -> ReLU -> global average pool -> Softmax over dim 1,
     scores [N, K, 1, 1] (torch writes Transpose, Softmax over the last axis, Transpose
     before opset 13), once followed by Flatten;
   - a model whose flatten is x.view(1, -1) at export (a Reshape to the constant [1, -1]).
   `onnx-train grad` at batch 3 (not the exported 1: the batch rewrite must hold) must give
   the loss and every parameter gradient of PyTorch's cross-entropy on the class scores (the
   model without its softmax) in float64 within max(1e-4, 3x PyTorch float32's distance),
   relative by norm per tensor.
2. --num-classes: torchvision's resnet18 (1000 classes, random weights) exported in eval mode at
   3x32x32 and batch 1 is trained with --num-classes auto on a 5-class image folder (PNGs,
   each class a solid colour plus noise); the checkpoint outputs [N, 5], `onnx-train eval`
   runs it above 90% on the held-out folder (chance: 20%), and `infer` of 4 images answers
   [4, 5]. Measured: 4 epochs at lr 0.002, about 2 s on 2 quiet cores, 100% held out with
   seeds 1, 2 and 3 (at lr 0.01 the run was unstable: 60-100% by seed). A model
   with no classifier to replace fails with one error line naming its output.

Run by CTest (target classic_heads_test); by hand:
    /usr/bin/python3 tests/zoo/classic_heads_test.py --onnx-train build/tools/onnx-train --workdir /tmp/heads
"""
import copy
import os
import re
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import test_args, test_parser, write_tensor  # noqa: E402
from grad_compare import compare_gradients  # noqa: E402
from ot_cli import read_tensor, run_grad, run_timed  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402

CLASSES = 10
BATCH = 3


class LinearHead(nn.Module):
    """Conv -> ReLU -> MaxPool -> flatten -> Linear -> `act` (Softmax, LogSoftmax or none).
    view_batch: the flatten is x.view(view_batch, -1) (the export's constant batch)."""

    def __init__(self, act=None, view_batch=None):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, CLASSES)
        self.act, self.view_batch = act, view_batch

    def scores(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = x.view(self.view_batch, -1) if self.view_batch else torch.flatten(x, 1)
        return self.fc(x)

    def forward(self, x):
        s = self.scores(x)
        return s if self.act is None else self.act(s, dim=1)


class SqueezeHead(nn.Module):
    """SqueezeNet's classifier: Conv -> ReLU -> 1x1 Conv to the classes -> ReLU -> global
    average pool -> softmax over dim 1: [N, K, 1, 1] (flattened to [N, K] when `flatten`)."""

    def __init__(self, flatten=False):
        super().__init__()
        self.features = nn.Conv2d(3, 8, 3, padding=1)
        self.final_conv = nn.Conv2d(8, CLASSES, 1)
        self.flatten = flatten

    def scores(self, x):
        x = F.relu(self.final_conv(F.relu(self.features(x))))
        return F.adaptive_avg_pool2d(x, 1)

    def forward(self, x):
        p = F.softmax(self.scores(x), dim=1)
        return torch.flatten(p, 1) if self.flatten else p


CASES = [  # name, builder, what to check in the export
    ("softmax", lambda: LinearHead(F.softmax), "Softmax"),
    ("logsoftmax", lambda: LinearHead(F.log_softmax), "LogSoftmax"),
    ("squeezenet", lambda: SqueezeHead(), "Softmax"),
    ("squeezenet_flatten", lambda: SqueezeHead(flatten=True), "Softmax"),
    ("view_batch1", lambda: LinearHead(F.softmax, view_batch=1), "Reshape"),
]


def export(module, path, opset, keep_inputs=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(module).eval(), torch.zeros(1, 3, 8, 8), path, input_names=["input"],
                          output_names=["prob"], opset_version=opset, keep_initializers_as_inputs=keep_inputs)


def torch_scores_grads(module, x, y, dtype):
    """Loss and gradients of cross-entropy on the class scores (the model without its softmax)."""
    m = copy.deepcopy(module).to(dtype)
    if hasattr(m, "view_batch"):
        m.view_batch = None  # the reference flattens whatever batch it gets
    m.zero_grad()
    s = m.scores(torch.from_numpy(x).to(dtype))
    loss = F.cross_entropy(s.reshape(s.shape[0], -1), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def check_head(args, name, build, marker, opset, keep_inputs, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = build()
    tag = f"{name}_opset{opset}{'_inputs' if keep_inputs else ''}"
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, path, opset, keep_inputs)
    model = onnx.load(path)
    ops = [n.op_type for n in model.graph.node]
    failures = []
    if marker not in ops:
        failures.append(f"the export has no {marker} ({ops})")
    if keep_inputs and len(model.graph.input) < 2:
        failures.append("the weights are not graph inputs")
    if model.graph.input[0].type.tensor_type.shape.dim[0].dim_value != 1:
        failures.append("the export's batch is not fixed at 1")
    x = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=BATCH).astype(np.int64)
    ref_loss, ref = torch_scores_grads(module, x, y, torch.float64)
    _, ref32 = torch_scores_grads(module, x, y, torch.float32)
    ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
    found, loss_err, worst, worst_name, _ = compare_gradients(ours, ref_loss, ref, ref32, 1e-4)
    failures += found
    print(f"  {tag:<36} loss rel err {loss_err:.1e}  worst grad {worst:.2e} ({worst_name})  "
          f"{'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures:
        print("    " + f)
    return not failures


COLOURS = [(220, 40, 40), (40, 200, 40), (40, 40, 220), (220, 220, 40), (40, 210, 210)]


def make_colour_folder(root, per_class, seed):
    rng = np.random.default_rng(seed)
    for split, n in (("train", per_class), ("val", max(4, per_class // 4))):
        for c, rgb in enumerate(COLOURS):
            d = os.path.join(root, split, f"class_{c}")
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                img = np.clip(np.array(rgb)[None, None, :] + rng.normal(0, 40, (32, 32, 3)), 0, 255)
                Image.fromarray(img.astype(np.uint8)).save(os.path.join(d, f"{i:03d}.png"))


def check_num_classes(args):
    ok = True
    wd = args.workdir
    bin_ = args.onnx_train
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18().eval()  # 1000 classes, random weights
    path = os.path.join(wd, "resnet18_1000.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(resnet, torch.zeros(1, 3, 32, 32), path, input_names=["input"], output_names=["logits"],
                          opset_version=11)
    folder = os.path.join(wd, "colours")
    make_colour_folder(folder, 40, 1)
    ck = os.path.join(wd, "ck_colours")
    # lr 0.002: at 0.01 with momentum 0.9 this randomly initialised net spikes (train loss 0.007 to
    # 0.8 within an epoch) and ends anywhere from 60% to 100% with the seed; at 0.002 seeds 1-3
    # all reach 100% in 4 epochs.
    r, secs = run_timed([bin_, path, "--data", "imagefolder:" + folder, "--num-classes", "auto", "--epochs", "4",
                   "--batch", "16", "--lr", "0.002", "--momentum", "0.9", "--checkpoint-dir", ck, "--seed", "3"])
    replaced = re.search(r"replaced the classifier '([^']*)' \(Gemm 512x1000.*5-way", r.stdout)
    print(f"  train --num-classes auto: exit {r.returncode}, {secs:.1f} s; "
          f"note: {replaced.group(0) if replaced else 'missing'}", flush=True)
    ok &= r.returncode == 0 and bool(replaced)
    ckpts = sorted(f for f in os.listdir(ck) if re.fullmatch(r"epoch_\d+\.onnx", f)) if os.path.isdir(ck) else []
    ckpt = os.path.join(ck, ckpts[-1]) if ckpts else ""
    if ckpt:
        out = onnx.load(ckpt).graph.output[0].type.tensor_type.shape.dim
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in out]
        shape_ok = len(dims) == 2 and dims[1] == 5 and not isinstance(dims[0], int)
        print(f"  checkpoint output {dims}: {'ok' if shape_ok else 'FAILED (want [N, 5])'}")
        ok &= shape_ok
        r, _ = run_timed([bin_, "eval", ckpt, "--data", "imagefolder:" + folder])
        m = re.search(r"accuracy: ([0-9.]+)%", r.stdout)
        acc = float(m.group(1)) if m else -1.0
        print(f"  eval of the checkpoint: {acc:.2f}% (must be > 90)")
        ok &= r.returncode == 0 and acc > 90.0
        x = np.random.default_rng(2).standard_normal((4, 3, 32, 32)).astype(np.float32)
        write_tensor(x, "input", os.path.join(wd, "four.pb"))
        r, _ = run_timed([bin_, "infer", ckpt, "--input", "input=" + os.path.join(wd, "four.pb"), "-o",
                    os.path.join(wd, "four_out")])
        shape = read_tensor(os.path.join(wd, "four_out", "logits.pb"))[1].shape if r.returncode == 0 else None
        print(f"  infer of 4 images: {shape}")
        ok &= shape == (4, 5)
    else:
        print("  no checkpoint in " + ck)
        ok = False
    # No classifier before the output: one error line naming it.
    bare = os.path.join(wd, "no_classifier.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Softmax(1)),
                          torch.zeros(1, 3, 8, 8), bare, input_names=["input"], output_names=["prob"], opset_version=11)
    x = np.zeros((2, 3, 8, 8), np.float32)
    write_tensor(x, "input", os.path.join(wd, "bare_x.pb"))
    write_tensor(np.zeros(2, np.int64), "labels", os.path.join(wd, "bare_y.pb"))
    r = subprocess.run([bin_, "grad", bare, "--num-classes", "5", "--input", "input=" + os.path.join(wd, "bare_x.pb"),
                        "--input", "labels=" + os.path.join(wd, "bare_y.pb"), "-o", os.path.join(wd, "bare_out")],
                       capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    refused = r.returncode != 0 and len(lines) == 1 and "found no classifier layer for the output 'prob'" in lines[0]
    print(f"  no classifier: exit {r.returncode}, {lines[-1] if lines else ''}: {'ok' if refused else 'FAILED'}")
    return ok and refused


def main():
    p = test_parser(__doc__)
    p.add_argument("--skip-train", action="store_true", help="only the gradient checks")
    p.add_argument("--skip-grad", action="store_true", help="only the --num-classes checks")
    args = test_args(p)
    torch.set_num_threads(2)
    start = time.time()
    passed = failed = 0
    for i, (name, build, marker) in enumerate(CASES if not args.skip_grad else []):
        for opset in (9, 10, 11, 12):
            for keep_inputs in ((False, True) if opset == 9 else (False,)):
                try:
                    ok = check_head(args, name, build, marker, opset, keep_inputs, seed=10 + i)
                except RuntimeError as e:
                    print(f"  {name} opset {opset}: failed: {e}")
                    ok = False
                passed += ok
                failed += not ok
    print(f"gradient checks: {passed} passed, {failed} failed in {time.time() - start:.1f} s", flush=True)
    if not args.skip_train:
        t = time.time()
        ok = check_num_classes(args)
        print(f"--num-classes: {'ok' if ok else 'FAILED'} in {time.time() - t:.1f} s")
        failed += not ok
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
