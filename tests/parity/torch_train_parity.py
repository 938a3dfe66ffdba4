#!/usr/bin/env python3
"""Loss-curve parity of `onnx-train MODEL.onnx` (the trainer) with PyTorch.

The recipes' models are built in PyTorch, exported with torch.onnx.export in training mode
(so both sides start from the same weights), and trained on the first 2048 Fashion-MNIST
images with 0-3 levels of seeded noise (written as an IDX directory; see jittered_fashion)
in the data set's order (shuffling off) with the same settings: SimpleNN 50 steps of plain
SGD lr 0.01 at batch 32; ResNet34 (recipe model, 1x28x28 input) 5 steps of SGD lr 0.01
momentum 0.9 at batch 128 (at the recipe's lr 0.1 this short run diverges, 2.6 -> 8.2, and
any two float32 runs then differ by percents, so the comparison would prove nothing). onnx-train's per-step losses (from --metrics) must match PyTorch's within
rtol 1e-4 for SimpleNN.

ResNet34 is judged against PyTorch in float64 as well: float32 rounding (in any framework)
decides on which side of zero some ReLU inputs fall, and momentum amplifies that over the
steps (PyTorch float32 is ~1e-2 from float64 by step 4 even with the noise). So: the first step's loss (same weights, same batch) must agree
with PyTorch float32 within 1e-5, and at every step onnx-train's loss must be at least as
close to the float64 run as PyTorch float32's is: the largest relative deviation from the
float64 curve over the steps within 2x PyTorch float32's largest (or 1e-4).

Run by CTest (target torch_train_parity); by hand:
    /usr/bin/python3 tests/parity/torch_train_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/tp
"""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import test_args, test_parser  # noqa: E402
from torch_models import build, export, torch_losses  # noqa: E402
from fashion_data import normalized, jittered_fashion, trained_step_losses  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

def main():
    p = test_parser(__doc__)
    # direct, not onnx-train's default auto: auto times the direct and Winograd primitives at
    # plan time, so which one runs depends on the machine's load, and these five momentum steps
    # amplify the difference. Measured: direct 1.74e-2 from float64 (limit 2.26e-2); auto in
    # a loaded CI run 2.29e-2 (it passed in the run before). Winograd's own precision is held
    # to torch float64 per gradient by conv_algo_test and torch_grad_parity --conv-algo.
    p.add_argument("--conv-algo", default="direct", help="passed to onnx-train ('' for its default, auto)")
    p.add_argument("--models", default="simplenn,resnet34")
    args = test_args(p)
    torch.set_num_threads(2)
    start = time.time()
    raw, raw_labels = jittered_fashion(args.workdir, 2048)
    images = normalized(raw)
    labels = raw_labels.astype(np.int64)
    cases = [("simplenn", 32, 50, 0.01, 0.0), ("resnet34", 128, 5, 0.01, 0.9)]
    passed = failed = 0
    for model, batch, steps, lr, momentum in cases:
        if model not in args.models.split(","):
            continue
        torch.manual_seed(3)
        module = build(model, 1, 28, 28, 10)
        path = os.path.join(args.workdir, model + ".onnx")
        export(module, (1, 28, 28), path, training=True)
        exact = copy.deepcopy(module).double()
        ref = torch_losses(module, images, labels, batch, steps, lr, momentum)
        try:
            ours = trained_step_losses(args.onnx_train, path, args.workdir, model, steps, batch, lr,
                                           ["--momentum", str(momentum)] + (["--conv-algo", args.conv_algo] if args.conv_algo else []))
        except RuntimeError as e:
            print(f"  {model}: onnx-train failed: {e}")
            failed += 1
            continue
        rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
        if model == "simplenn":
            ok = len(ours) == len(ref) and max(rel) <= 1e-4
            detail = ""
        else:
            f64 = torch_losses(exact, images, labels, batch, steps, lr, momentum, torch.float64)
            ours64 = [abs(a - b) / abs(b) for a, b in zip(ours, f64)]
            torch64 = [abs(a - b) / abs(b) for a, b in zip(ref, f64)]
            ok = len(ours) == len(ref) and rel[0] <= 1e-5 and max(ours64) <= max(2 * max(torch64), 1e-4)
            detail = (f"; vs float64: ours max {max(ours64):.2e}, PyTorch float32 max {max(torch64):.2e}")
        print(f"  {model:<9} {steps} steps batch {batch} lr {lr} momentum {momentum}: loss {ref[0]:.4f} -> {ref[-1]:.4f}, "
              f"max rel err vs PyTorch {max(rel):.2e} (step {int(np.argmax(rel))}){detail}  {'ok' if ok else 'FAILED'}",
              flush=True)
        if not ok:
            for i, (a, b) in enumerate(zip(ours, ref)):
                print(f"    step {i}: ours {a:.6f} torch {b:.6f}")
        passed += ok
        failed += not ok
    print(f"torch_train_parity: {passed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
