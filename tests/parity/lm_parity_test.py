#!/usr/bin/env python3
"""A byte-level causal LM trained by onnx-train follows PyTorch's training curve (issue 39 B,
the short form of benchmarks/lm_parity.py, which runs 2,000 steps).

The nanoGPT-style model of benchmarks/lm_model.py (2 layers, width 32, 2 heads, T = 32, tied
lm_head, ONNX Attention with is_causal from PyTorch 2.x's dynamo exporter at opset 23) is
trained 200 steps (batch 8, AdamW lr 1e-3, betas (0.9, 0.99), wd 0.1) on byte windows of
/usr/share/common-licenses/GPL-3, the same windows in the same order on every side (an npz
read with --no-shuffle), from the same initial weights (the ONNX initializers), with a
validation loss every 50 steps. PyTorch trains the module in float64 (the oracle) and in
float32. The house rule: our float32 curve may be no farther from float64's than
MARGIN x PyTorch float32's own distance (or FLOOR, if larger: the metrics file keeps six
significant digits), where a curve's distance is the largest relative difference over the
200 training losses and the 4 validation losses. The check can fail: our run at lr x 1.02 must
land outside the same bound.

Run by CTest (target lm_parity_test, with the PyTorch 2.x venv); by hand:
    /var/cache/onnx-train/torch2/bin/python tests/parity/lm_parity_test.py --onnx-train build/tools/onnx-train \\
        --workdir /tmp/lmpt
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import lm_parity  # noqa: E402
import torch  # noqa: E402

MARGIN = 3.0   # ours / f64 distance may be at most MARGIN x PyTorch f32's distance from f64
FLOOR = 1e-5   # ... or this, whichever is larger (the metrics file keeps 6 significant digits)
BROKEN_LR = 1.02  # the failing control: our lr off by 2%


def distance(curve, ref):
    return max(abs(a - b) / abs(b) for a, b in zip(curve, ref))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    lm_parity.add_arguments(ap, steps=200, epochs=4, layers=2, embd=32, heads=2, seq=32, batch=8)
    ap.set_defaults(lr=1e-3)
    args = ap.parse_args()
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        print(f"lm_parity_test: skipped: needs PyTorch 2.x (this is {torch.__version__})")
        return 0
    if not os.path.exists(args.text):
        print(f"lm_parity_test: skipped: no {args.text}")
        return 0
    start = time.time()
    model, onnx_path, npz = lm_parity.prepare(args)
    t64 = lm_parity.torch_train(args, model, npz, torch.float64)
    t32 = lm_parity.torch_train(args, model, npz, torch.float32)
    o_losses, o_vals, _ = lm_parity.ours_train(args, onnx_path, npz, "ours")
    b_losses, b_vals, _ = lm_parity.ours_train(args, onnx_path, npz, "broken", lr=args.lr * BROKEN_LR)
    ref = t64[0] + t64[1]
    if len(o_losses) != args.steps or len(o_vals) != args.epochs:
        print(f"FAILED: our run has {len(o_losses)} step losses and {len(o_vals)} validation losses "
              f"(want {args.steps} and {args.epochs})")
        return 1
    d32 = distance(t32[0] + t32[1], ref)
    bound = max(MARGIN * d32, FLOOR)
    ours = distance(o_losses + o_vals, ref)
    broken = distance(b_losses + b_vals, ref)
    print(f"validation loss by epoch: PyTorch f64 {[round(v, 5) for v in t64[1]]}, f32 {[round(v, 5) for v in t32[1]]},"
          f" ours {[round(v, 5) for v in o_vals]}; training loss {ref[0]:.4f} -> {t64[0][-1]:.4f}")
    print(f"distance from PyTorch float64 (largest relative difference over {args.steps} training and "
          f"{args.epochs} validation losses): PyTorch f32 {d32:.2e}, ours {ours:.2e} "
          f"(bound max({MARGIN:g} x {d32:.2e}, {FLOOR:g}) = {bound:.2e}), ours at lr x{BROKEN_LR} {broken:.2e}")
    failed = 0
    ok = ours <= bound
    print(f"  ours within the bound: {'ok' if ok else 'FAILED'}")
    failed += not ok
    ok = broken > bound
    print(f"  ours at lr x{BROKEN_LR} outside it (the check can fail): {'ok' if ok else 'FAILED'}")
    failed += not ok
    print(f"lm_parity_test: {2 - failed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
