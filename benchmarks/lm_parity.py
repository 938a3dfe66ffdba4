#!/usr/bin/env python3
"""Issue 39 B: a byte-level language model trained by onnx-train and by PyTorch from the same
initial weights on the same batches in the same order; their validation losses side by side.

Text: a file every Debian system has (default /usr/share/common-licenses/GPL-3, from
base-files), read as bytes (vocabulary 256); the first 90% trains, the last 10% validates.
Training samples are windows x = text[o:o+T], y = text[o+1:o+T+1] at offsets drawn once
(numpy, --seed) and written in order to an npz (x [N, T], y [N, T] int64, and the consecutive
validation windows as x_test, y_test): onnx-train reads it with --no-shuffle, PyTorch walks the
same arrays in the same order, so step k sees the same batch on both sides. An epoch is
--steps-per-epoch batches (the same N windows every epoch, in the same order); the
validation loss (mean cross-entropy over every validation token, nats) is taken after each.

Model (benchmarks/lm_model.py): nanoGPT-style, default 2 layers, width 64, 4 heads, T = 64,
lm_head tied to the token embedding, exported by PyTorch 2.x's dynamo exporter (opset 23,
ONNX Attention with is_causal) from the module whose weights PyTorch then trains: the ONNX
initializers are PyTorch's initial weights. Optimizer on both sides: AdamW (torch.optim.AdamW,
one parameter group; ours --opt adamw, decoupled weight decay on every parameter), constant
lr, betas, eps and weight decay as given; batch 16 by default.

With --f64, PyTorch also trains in float64 (same weights, batches), which shows how far
float32 rounding alone moves the curve (our float32 against that reference is the house rule).

    /var/cache/onnx-train/torch2/bin/python benchmarks/lm_parity.py --onnx-train build/tools/onnx-train \\
        [--steps 2000] [--epochs 10] [--f64] [--workdir /tmp/lm_parity]
Prints both validation losses after every epoch and the final ratio ours / PyTorch; the
acceptance (issue 39) is the final ratio within 2% (exit status 1 otherwise).
"""
import argparse
import copy
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from blas_threads import hold_blas_threads  # noqa: E402

hold_blas_threads(default=1)  # before torch loads a BLAS

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lm_model  # noqa: E402


def add_arguments(ap, steps=2000, epochs=10, layers=2, embd=64, heads=4, seq=64, batch=16):
    ap.add_argument("--onnx-train", default="build/tools/onnx-train")
    ap.add_argument("--workdir", default="/tmp/lm_parity")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--val-share", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=steps, help="optimizer steps in all")
    ap.add_argument("--epochs", type=int, default=epochs, help="validation after each; must divide --steps")
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--embd", type=int, default=embd)
    ap.add_argument("--heads", type=int, default=heads)
    ap.add_argument("--seq", type=int, default=seq)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--untied", action="store_true", help="lm_head with its own weight (default: tied)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="initial weights and window offsets")
    ap.add_argument("--threads", type=int, default=1,
                    help="both sides (1: on a loaded machine two spinning OpenMP threads slow PyTorch 5x)")
    ap.add_argument("--ours-lr", type=float, default=None,
                    help="another lr for our side only (to see the comparison fail)")


def make_corpus(args, path):
    """Writes the npz; returns (training windows, validation windows, text bytes)."""
    data = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    cut = int(len(data) * (1 - args.val_share))
    train, val = data[:cut], data[cut:]
    n = args.steps // args.epochs * args.batch
    rng = np.random.default_rng(args.seed)
    offsets = rng.integers(0, len(train) - args.seq, size=n)
    idx = offsets[:, None] + np.arange(args.seq)[None, :]
    rows = (len(val) - 1) // args.seq
    vidx = np.arange(rows)[:, None] * args.seq + np.arange(args.seq)[None, :]
    np.savez(path, x=train[idx], y=train[idx + 1], x_test=val[vidx], y_test=val[vidx + 1])
    return n, rows, len(data)


def build_model(args):
    torch.manual_seed(args.seed)
    return lm_model.GPT(vocab_size=256, block_size=args.seq, n_layer=args.layers, n_head=args.heads,
                        n_embd=args.embd, tied=not args.untied)


def torch_train(args, model, npz, dtype):
    """Trains a copy of `model` in `dtype`: (per-step training losses, validation loss per epoch)."""
    torch.set_num_threads(args.threads)
    m = copy.deepcopy(model).to(dtype).train()
    d = np.load(npz)
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    xv, yv = torch.from_numpy(d["x_test"]), torch.from_numpy(d["y_test"])
    opt = torch.optim.AdamW(m.parameters(), lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                            weight_decay=args.wd)
    per_epoch = args.steps // args.epochs
    losses, vals = [], []
    for _ in range(args.epochs):
        for s in range(per_epoch):
            xb, yb = x[s * args.batch:(s + 1) * args.batch], y[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            logits = m(xb)
            loss = F.cross_entropy(logits.reshape(-1, 256), yb.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with torch.no_grad():
            total = 0.0
            for s in range(0, len(xv), args.batch):
                logits = m(xv[s:s + args.batch])
                total += float(F.cross_entropy(logits.reshape(-1, 256), yv[s:s + args.batch].reshape(-1),
                                               reduction="sum"))
            vals.append(total / yv.numel())
    return losses, vals


def ours_train(args, onnx_path, npz, tag, lr=None):
    """Trains with onnx-train: (per-step training losses, validation loss per epoch, seconds)."""
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, onnx_path, "--data", "npz:" + npz, "--loss", "cross-entropy", "--opt", "adamw",
           "--lr", repr(lr if lr is not None else args.lr), "--beta1", repr(args.beta1), "--beta2", repr(args.beta2),
           "--epsilon", repr(args.eps), "--wd", repr(args.wd), "--batch", str(args.batch),
           "--epochs", str(args.epochs), "--eval-every", "1", "--no-shuffle", "--no-checkpoints", "--quiet",
           "--threads", str(args.threads), "--metrics", metrics]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if r.returncode != 0:
        raise RuntimeError(f"onnx-train failed: {(r.stderr.strip() or r.stdout.strip())[-600:]}\n"
                           f"  command: {' '.join(cmd)}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    losses = [row["loss"] for row in rows if row.get("type") == "step"]
    vals = [row["val_loss"] for row in rows if row.get("type") == "epoch"]
    return losses, vals, time.time() - t0


def prepare(args):
    """The npz and the ONNX model (exported from the module PyTorch trains): (model, onnx, npz)."""
    assert args.steps % args.epochs == 0, "--epochs must divide --steps"
    args.workdir = os.path.abspath(args.workdir)
    args.onnx_train = os.path.abspath(args.onnx_train)
    os.makedirs(args.workdir, exist_ok=True)
    npz = os.path.join(args.workdir, "bytes.npz")
    n, rows, size = make_corpus(args, npz)
    model = build_model(args)
    onnx_path = os.path.join(args.workdir, "byte_lm.onnx")
    lm_model.export_onnx(copy.deepcopy(model), onnx_path, args.seq)
    params = sum(p.numel() for p in model.parameters())
    print(f"text {args.text}: {size} bytes, {1 - args.val_share:.0%} training ({n} windows of {args.seq} a "
          f"epoch, drawn once), {args.val_share:.0%} validation ({rows} windows, {rows * args.seq} tokens)")
    print(f"byte LM: {args.layers} layers, width {args.embd}, {args.heads} heads, T {args.seq}, "
          f"lm_head {'untied' if args.untied else 'tied'}, {params} parameters; AdamW lr {args.lr}, betas "
          f"({args.beta1}, {args.beta2}), eps {args.eps}, wd {args.wd}; batch {args.batch}, {args.steps} steps "
          f"({args.epochs} epochs of {args.steps // args.epochs}); {args.threads} threads", flush=True)
    return model, onnx_path, npz


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--f64", action="store_true", help="also train PyTorch in float64")
    ap.add_argument("--tolerance", type=float, default=0.02, help="allowed |ours / PyTorch - 1| of the final val loss")
    args = ap.parse_args()
    model, onnx_path, npz = prepare(args)
    t0 = time.time()
    t_losses, t_vals = torch_train(args, model, npz, torch.float32)
    t_secs = time.time() - t0
    o_losses, o_vals, o_secs = ours_train(args, onnx_path, npz, "ours", args.ours_lr)
    d_vals = None
    if args.f64:
        _, d_vals = torch_train(args, model, npz, torch.float64)
    print(f"{'epoch':>5} {'step':>6} {'PyTorch f32':>12} {'ours':>10} {'ours/torch':>10}"
          + (f" {'PyTorch f64':>12} {'f32/f64':>8}" if d_vals else ""))
    per_epoch = args.steps // args.epochs
    for e, (tv, ov) in enumerate(zip(t_vals, o_vals)):
        line = f"{e + 1:5d} {(e + 1) * per_epoch:6d} {tv:12.5f} {ov:10.5f} {ov / tv:10.4f}"
        if d_vals:
            line += f" {d_vals[e]:12.5f} {tv / d_vals[e]:8.4f}"
        print(line)
    ratio = o_vals[-1] / t_vals[-1]
    train_gap = max(abs(a - b) / b for a, b in zip(o_losses, t_losses))
    print(json.dumps({"steps": args.steps, "torch_val_loss": round(t_vals[-1], 6), "ours_val_loss": o_vals[-1],
                      "ratio": round(ratio, 5), "torch_f64_val_loss": round(d_vals[-1], 6) if d_vals else None,
                      "max_train_loss_rel_gap": round(train_gap, 5), "torch_s": round(t_secs, 1),
                      "ours_s": round(o_secs, 1), "uniform": round(math.log(256), 4)}))
    ok = len(o_vals) == args.epochs and len(o_losses) == args.steps and abs(ratio - 1) <= args.tolerance
    print(f"validation loss after {args.steps} steps: ours {o_vals[-1]:.5f}, PyTorch {t_vals[-1]:.5f}, ratio "
          f"{ratio:.4f}: {'within' if ok else 'NOT within'} {args.tolerance:.0%}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
