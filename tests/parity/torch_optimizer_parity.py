#!/usr/bin/env python3
"""Training with the other optimizers through the command line, against torch.optim.

`onnx-train MODEL.onnx --optimizer adam|adagrad`, SGD with `--momentum 0.9 --nesterov`, each
with and without `--weight-decay`, on SimpleNN and LeNet (a small CNN) exported from PyTorch
in training mode (both sides start from the same weights), on the same jittered
Fashion-MNIST batches in the data set's order as torch_train_parity.py. onnx-train's per-step
losses (from --metrics) must match the same torch.optim run in float32 within 1e-5
(relative) on SimpleNN and 1e-4 on LeNet, over 20 steps.

Adam: ONNX's Adam (which onnx-train follows) adds epsilon to sqrt(v) after the bias
correction, torch to sqrt(v / (1 - beta2^t)); torch's eps is set to 1e-8 / sqrt(1 - beta2^t)
each step so that both take the same step. Adagrad: torch's eps 1e-10 is onnx-train's.

Run by CTest (target torch_optimizer_parity); by hand:
    /usr/bin/python3 tests/parity/torch_optimizer_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/op
"""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import test_args, test_parser  # noqa: E402
from torch_models import build, export  # noqa: E402
from fashion_data import normalized, jittered_fashion, trained_step_losses  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH, STEPS = 32, 20

# (name, command-line options, torch optimizer factory, lr)
OPTIMIZERS = [
    ("adam", ["--optimizer", "adam"], lambda p, lr: torch.optim.Adam(p, lr=lr), 1e-3),
    ("adam wd", ["--optimizer", "adam", "--weight-decay", "0.01"],
     lambda p, lr: torch.optim.Adam(p, lr=lr, weight_decay=0.01), 1e-3),
    ("adagrad", ["--optimizer", "adagrad"], lambda p, lr: torch.optim.Adagrad(p, lr=lr, eps=1e-10), 0.01),
    ("adagrad wd", ["--optimizer", "adagrad", "--weight-decay", "0.01"],
     lambda p, lr: torch.optim.Adagrad(p, lr=lr, eps=1e-10, weight_decay=0.01), 0.01),
    ("nesterov", ["--momentum", "0.9", "--nesterov"],
     lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, nesterov=True), 0.01),
    ("nesterov wd", ["--momentum", "0.9", "--nesterov", "--weight-decay", "0.001"],
     lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, nesterov=True, weight_decay=0.001), 0.01),
]


def torch_losses(module, make_opt, lr, images, labels, adam, dtype=torch.float32):
    module = module.to(dtype)
    opt = make_opt(module.parameters(), lr)
    module.train()
    losses = []
    for s in range(STEPS):
        if adam:
            opt.param_groups[0]["eps"] = 1e-8 / np.sqrt(1 - 0.999 ** (s + 1))
        x = torch.from_numpy(images[s * BATCH:(s + 1) * BATCH]).to(dtype)
        y = torch.from_numpy(labels[s * BATCH:(s + 1) * BATCH])
        opt.zero_grad()
        loss = F.cross_entropy(module(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.set_num_threads(2)
    start = time.time()
    raw, raw_labels = jittered_fashion(args.workdir, BATCH * STEPS)
    images = normalized(raw)
    labels = raw_labels.astype(np.int64)
    passed = failed = 0
    for model, tol, names in [("simplenn", 1e-5, None), ("lenet", 1e-4, {"adam", "adagrad", "nesterov wd"})]:
        torch.manual_seed(5)
        module = build(model, 1, 28, 28, 10)
        path = os.path.join(args.workdir, model + ".onnx")
        export(module, (1, 28, 28), path, training=True)
        for name, options, make_opt, lr in OPTIMIZERS:
            if names is not None and name not in names:
                continue
            adam = name.startswith("adam")
            ref = torch_losses(copy.deepcopy(module), make_opt, lr, images, labels, adam)
            f64 = torch_losses(copy.deepcopy(module), make_opt, lr, images, labels, adam, torch.float64)
            try:
                ours = trained_step_losses(args.onnx_train, path, args.workdir, model + "-" + name.replace(" ", "-"),
                                            STEPS, BATCH, lr, options, timeout=300)
            except RuntimeError as e:
                print(f"  {model} {name}: onnx-train failed: {e}  FAILED")
                failed += 1
                continue
            if len(ours) != STEPS:
                print(f"  {model} {name}: {len(ours)} step losses in the metrics, not {STEPS}  FAILED")
                failed += 1
                continue
            rel32 = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
            ours64 = [abs(a - b) / abs(b) for a, b in zip(ours, f64)]
            torch64 = max(abs(a - b) / abs(b) for a, b in zip(ref, f64))
            bound = max(tol, 3 * torch64)
            ok = max(ours64) <= bound
            print(f"  {model:<8} {name:<12} {' '.join(options):<48} lr {lr}: loss {f64[0]:.4f} -> {f64[-1]:.4f}; "
                  f"vs float64 max rel {max(ours64):.2e} (step {int(np.argmax(ours64))}, bound {bound:.1e}; "
                  f"PyTorch float32 {torch64:.1e}); vs PyTorch float32 {rel32:.1e}  {'ok' if ok else 'FAILED'}",
                  flush=True)
            if not ok:
                for i, (a, b, c) in enumerate(zip(ours, ref, f64)):
                    print(f"    step {i}: ours {a:.6f} torch float32 {b:.6f} float64 {c:.6f}")
            passed += ok
            failed += not ok
    print(f"torch_optimizer_parity: {passed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
