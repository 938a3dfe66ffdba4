#!/usr/bin/env python3
"""PyTorch autograd parity of `onnx-train grad` (the autodiff pass and the gradient kernels).

SimpleNN and the recipe's ResNet34 are built in PyTorch with random weights (BatchNorm
affine parameters and statistics away from 1/0/0/1), exported with torch.onnx.export in
training mode, and given one batch. `onnx-train grad` computes the mean cross-entropy loss
and every parameter gradient; PyTorch computes the same with autograd (module in train()
mode, batch statistics). Checks: loss and gradients of SimpleNN within rtol 1e-5 (elementwise,
relative to the tensor's scale), ResNet34's within 1e-4 relative error by norm per tensor.
Prints the worst figures per model.

One ResNet34 case runs with kink tolerance: float32 forward passes that differ in the last
bits (ours and PyTorch's sum in different orders) can put a ReLU input that lies within
~1e-6 of zero on different sides, which moves that element's whole gradient between the
two results; in a batch of 8 this happens to a handful of elements out of millions and
shifts a few BatchNorm bias gradients by up to ~1e-2. That case requires the median
tensor error below 1e-5 and every tensor below 1e-2, and reports how many exceed 1e-4.

Run by CTest (target torch_grad_parity); by hand:
    /usr/bin/python3 tests/torch_grad_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/gp
"""
import argparse
import copy
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import build, export, write_tensor  # noqa: E402  (same folder; exits if torch is missing)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def torch_grads(module, x, y):
    m = copy.deepcopy(module)
    m.train()
    m.zero_grad()
    loss = F.cross_entropy(m(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.numpy() for n, p in m.named_parameters()}


def run_grad(binary, model_path, x, y, workdir, tag):
    xp, yp = os.path.join(workdir, tag + "_x.pb"), os.path.join(workdir, tag + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    out = os.path.join(workdir, tag + "_grads")
    proc = subprocess.run([binary, "grad", model_path, "--input", "input=" + xp, "--input", "labels=" + yp, "-o", out],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or "exit %d" % proc.returncode).splitlines()[-1][:400])
    tensors = {}
    for f in os.listdir(out):
        name, arr = read_tensor(os.path.join(out, f))
        tensors[name] = arr
    return tensors


def check(args, model, shape, classes, batch, opset, seed, kink_tolerant=False):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = build(model, *shape, classes)
    tag = f"{model}_{'x'.join(map(str, shape))}_opset{opset}"
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, shape, path, training=True, opset=opset)
    x = rng.standard_normal((batch,) + shape).astype(np.float32)
    y = rng.integers(0, classes, size=batch).astype(np.int64)
    ref_loss, ref = torch_grads(module, x, y)
    ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
    failures = []
    loss = float(ours.pop("loss"))
    loss_err = abs(loss - ref_loss) / abs(ref_loss)
    strict = model == "simplenn"
    if loss_err > (1e-5 if strict else 1e-4):
        failures.append(f"loss {loss} vs torch {ref_loss}")
    missing = sorted(set(ref) - set(ours))
    if missing:
        failures.append("no gradient for " + ", ".join(missing[:5]))
    worst_norm, worst_elem, worst_name = 0.0, 0.0, ""
    norm_errors = []
    for name, g in ref.items():
        if name not in ours:
            continue
        a = ours[name].astype(np.float64)
        b = g.astype(np.float64)
        if a.shape != b.shape:
            failures.append(f"{name}: shape {a.shape} vs torch {b.shape}")
            continue
        # A gradient that is zero in exact arithmetic (a bias right before BatchNorm) is
        # float noise on both sides: judge it against 1e-3 instead of its own size.
        norm_err = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-3))
        elem_err = float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-3))
        norm_errors.append(norm_err)
        if norm_err > worst_norm:
            worst_norm, worst_name = norm_err, name
        worst_elem = max(worst_elem, elem_err)
        if (strict and elem_err > 1e-5) or (not strict and not kink_tolerant and norm_err > 1e-4) or \
                (kink_tolerant and norm_err > 1e-2):
            failures.append(f"{name}: relative error {norm_err:.2e} by norm, {elem_err:.2e} elementwise")
    median = float(np.median(norm_errors)) if norm_errors else 0.0
    above = sum(e > 1e-4 for e in norm_errors)
    if kink_tolerant and median > 1e-5:
        failures.append(f"median tensor error {median:.2e} above 1e-5")
    print(f"  {tag:<34} batch {batch}  loss rel err {loss_err:.1e}  {len(ref)} grads: worst by norm "
          f"{worst_norm:.2e} ({worst_name}), median {median:.1e}, {above} above 1e-4, worst elementwise {worst_elem:.2e}  "
          f"{'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures[:8]:
        print("    " + f)
    return not failures


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(2)
    start = time.time()
    cases = [("simplenn", (1, 28, 28), 10, 32, 14, False), ("simplenn", (3, 8, 8), 7, 5, 12, False),
             ("resnet34", (3, 32, 32), 10, 4, 14, False), ("resnet34", (1, 28, 28), 10, 4, 15, False),
             ("resnet34", (3, 32, 32), 10, 8, 13, True),
             ("lenet", (1, 28, 28), 10, 8, 11, False), ("lenet", (1, 28, 28), 10, 8, 17, False)]
    passed = failed = 0
    for i, (model, shape, classes, batch, opset, tolerant) in enumerate(cases):
        try:
            ok = check(args, model, shape, classes, batch, opset, seed=100 + i, kink_tolerant=tolerant)
        except RuntimeError as e:
            print(f"  {model} opset {opset}: onnx-train failed: {e}")
            ok = False
        passed += ok
        failed += not ok
    print(f"torch_grad_parity: {passed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
