#!/usr/bin/env python3
"""The modern-recipe optimizer options through the command line, against PyTorch's own.

AdamW, RMSprop (plain, momentum, centered with weight decay), warmup composed with cosine,
exponential and step decay (torch.optim.lr_scheduler.SequentialLR of LinearLR/ConstantLR and
CosineAnnealingLR/ExponentialLR/StepLR, per step and per epoch), clip_grad_norm_, and
torchvision's weight-decay parameter groups (--norm-weight-decay, --bias-weight-decay) with
AdamW and with SGD, on SimpleNN; clipping and the groups on LeNet too (a small CNN with
BatchNorm). Both models exported from PyTorch
in training mode, so both sides start from the same weights; the jittered Fashion-MNIST
images of torch_train_parity.py, 320 of them in the data set's order: 3 epochs of 10
steps at batch 32 (30 steps).

Each run is held to PyTorch float64: every step's loss (from --metrics) and every final
weight tensor (from the last checkpoint; relative distance by norm) within
max(tol, 3x PyTorch float32's own distance), tol 1e-5 on SimpleNN and 1e-4 on LeNet.
The clipping cases also check that some steps clipped and some did not, and the group
cases that each tensor the groups change ends nearer PyTorch's groups run than its
plain-decay run. `onnx-train export` with AdamW, RMSprop, clipping and groups must give a
training graph the ONNX checker accepts (full check, shape inference).

Run by CTest (target torch_recipe_parity); by hand:
    /usr/bin/python3 tests/parity/torch_recipe_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/rp
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from grad_compare import export_failures  # noqa: E402
from torch_models import build, export  # noqa: E402
from fashion_data import normalized, jittered_fashion  # noqa: E402
from ot_cli import test_args, test_parser, write_idx  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH, STEPS_PER_EPOCH, EPOCHS = 32, 10, 3
S = STEPS_PER_EPOCH
LRS = torch.optim.lr_scheduler
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm2d)


def groups(module, wd, norm_wd, bias_wd):
    """torchvision's set_weight_decay: 'bias' parameters first, then norm layers' own."""
    out = {"other": [], "norm": [], "bias": []}
    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            key = "bias" if (name == "bias" and bias_wd is not None) else "norm" if isinstance(m, NORMS) else "other"
            out[key].append(p)
    decay = {"other": wd, "norm": wd if norm_wd is None else norm_wd, "bias": wd if bias_wd is None else bias_wd}
    return [{"params": ps, "weight_decay": decay[k]} for k, ps in out.items() if ps]


# name, onnx-train options, optimizer(params-or-groups source module, lr), scheduler(opt) or None,
# scheduler stepped per "step" or "epoch", clip max norm, lr
CASES = [
    ("adamw", ["--opt", "adamw", "--wd", "0.05"],
     lambda m, lr: torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.05), None, None, 0, 1e-3),
    ("rmsprop", ["--optimizer", "rmsprop"],
     lambda m, lr: torch.optim.RMSprop(m.parameters(), lr=lr), None, None, 0, 1e-3),
    ("rmsprop momentum", ["--optimizer", "rmsprop", "--momentum", "0.9"],
     lambda m, lr: torch.optim.RMSprop(m.parameters(), lr=lr, momentum=0.9), None, None, 0, 1e-4),
    ("rmsprop centered wd", ["--optimizer", "rmsprop", "--centered", "--weight-decay", "0.01", "--rmsprop-alpha", "0.9"],
     lambda m, lr: torch.optim.RMSprop(m.parameters(), lr=lr, alpha=0.9, centered=True, weight_decay=0.01),
     None, None, 0, 1e-3),
    ("warmup linear+cosine per step",
     ["--opt", "adamw", "--wd", "0.05", "--lr-warmup-epochs", "1", "--lr-warmup-decay", "0.1",
      "--lr-scheduler", "cosineannealinglr", "--lr-per-step"],
     lambda m, lr: torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.05),
     lambda o: LRS.SequentialLR(o, [LRS.LinearLR(o, start_factor=0.1, total_iters=S),
                                    LRS.CosineAnnealingLR(o, T_max=(EPOCHS - 1) * S)], milestones=[S]),
     "step", 0, 2e-3),
    ("warmup constant+exponential per step",
     ["--momentum", "0.9", "--lr-warmup-epochs", "1", "--lr-warmup-method", "constant", "--lr-warmup-decay", "0.2",
      "--lr-scheduler", "exponentiallr", "--lr-gamma", "0.5", "--lr-per-step"],
     lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9),
     lambda o: LRS.SequentialLR(o, [LRS.ConstantLR(o, factor=0.2, total_iters=S),
                                    LRS.ExponentialLR(o, gamma=0.5 ** (1.0 / S))], milestones=[S]),
     "step", 0, 0.02),
    ("warmup linear+steplr per epoch",
     ["--momentum", "0.9", "--lr-warmup-epochs", "1", "--lr-scheduler", "steplr", "--lr-step-size", "1",
      "--lr-gamma", "0.5", "--lr-warmup-decay", "0.1"],
     lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9),
     lambda o: LRS.SequentialLR(o, [LRS.LinearLR(o, start_factor=0.1, total_iters=1),
                                    LRS.StepLR(o, step_size=1, gamma=0.5)], milestones=[1]),
     "epoch", 0, 0.02),
    # Maxima between the runs' smallest and largest gradient norms: some steps clip, some not.
    ("clip-grad-norm 4", ["--momentum", "0.9", "--clip-grad-norm", "4"],
     lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9), None, None, 4.0, 0.02),
    ("clip-grad-norm 0.8", ["--momentum", "0.9", "--clip-grad-norm", "0.8"],
     lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9), None, None, 0.8, 0.02),
    ("groups adamw", ["--opt", "adamw", "--wd", "0.5", "--norm-weight-decay", "0", "--bias-weight-decay", "0.1"],
     lambda m, lr: torch.optim.AdamW(groups(m, 0.5, 0.0, 0.1), lr=lr), None, None, 0, 1e-3),
    ("groups sgd", ["--momentum", "0.9", "--wd", "0.05", "--norm-weight-decay", "0.2", "--bias-weight-decay", "0",
                    "--batch-size", "32"],
     lambda m, lr: torch.optim.SGD(groups(m, 0.05, 0.2, 0.0), lr=lr, momentum=0.9), None, None, 0, 0.02),
]
PLAIN = {"groups adamw": lambda m, lr: torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.5),
         "groups sgd": lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=0.05)}
LENET_ONLY = {"clip-grad-norm 0.8"}
# On the CNN: what depends on the graph (clipping over conv and BatchNorm gradients, the
# groups told from Conv, BatchNormalization and Gemm); the schedules and update formulas
# are the same code on any model.
LENET_CASES = {"clip-grad-norm 0.8", "groups adamw", "groups sgd"}


def torch_run(module, case, images, labels, dtype):
    _, _, make_opt, make_sched, per, clip, lr = case
    module = module.to(dtype)
    opt = make_opt(module, lr)
    sched = make_sched(opt) if make_sched else None
    module.train()
    losses, clipped = [], 0
    for e in range(EPOCHS):
        for s in range(S):
            x = torch.from_numpy(images[s * BATCH:(s + 1) * BATCH]).to(dtype)
            y = torch.from_numpy(labels[s * BATCH:(s + 1) * BATCH])
            opt.zero_grad()
            loss = F.cross_entropy(module(x), y)
            loss.backward()
            if clip:
                clipped += float(torch.nn.utils.clip_grad_norm_(module.parameters(), clip)) > clip
            opt.step()
            if sched and per == "step":
                sched.step()
            losses.append(float(loss))
        if sched and per == "epoch":
            sched.step()
    weights = {n: p.detach().double().numpy() for n, p in module.named_parameters()}
    return losses, weights, clipped


def our_run(args, model_path, tag, options, lr):
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    ck = os.path.join(args.workdir, "ck-" + tag)
    for path in (metrics, ck):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    cmd = [args.onnx_train, model_path, "--data", "fashion-mnist:" + os.path.join(args.workdir, "recipe-data"),
           "--no-shuffle", "--epochs", str(EPOCHS), "--batch", str(BATCH), "--lr", str(lr), "--metrics", metrics,
           "--checkpoint-dir", ck, "--quiet", "--threads", "2"] + options
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or "exit %d" % proc.returncode).splitlines()[-1][:400])
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    model = onnx.load(os.path.join(ck, "epoch_%04d.onnx" % EPOCHS))
    weights = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    return [r["loss"] for r in rows if r["type"] == "step"], weights


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def main():
    p = test_parser(__doc__)
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    args = test_args(p)
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore", message="The epoch parameter")  # SequentialLR's own call
    start = time.time()
    raw, raw_labels = jittered_fashion(args.workdir, BATCH * S)
    # The training images as both splits: the final evaluation stays short.
    data_dir = os.path.join(args.workdir, "recipe-data")
    os.makedirs(data_dir, exist_ok=True)
    for split in ("train", "t10k"):
        write_idx(os.path.join(data_dir, split + "-images-idx3-ubyte.gz"), raw)
        write_idx(os.path.join(data_dir, split + "-labels-idx1-ubyte.gz"), raw_labels)
    images = normalized(raw)
    labels = raw_labels.astype(np.int64)
    check = Checks()

    for model, tol in [("simplenn", 1e-5), ("lenet", 1e-4)]:
        torch.manual_seed(5)
        module = build(model, 1, 28, 28, 10)
        path = os.path.join(args.workdir, model + ".onnx")
        export(module, (1, 28, 28), path, training=True)
        if model == "lenet":
            for opts in (["--optimizer", "adamw", "--norm-weight-decay", "0", "--clip-grad-norm", "1"],
                         ["--optimizer", "rmsprop", "--centered", "--momentum", "0.9", "--bias-weight-decay", "0"]):
                bad = export_failures(args.onnx_train, path, os.path.join(args.workdir, "training.onnx"), opts)
                check(f"{model:<8} export {' '.join(opts)}", not bad, "; ".join(bad) or "the ONNX checker accepts it")
        for case in CASES:
            name, options, _, _, _, clip, lr = case
            skip = name not in LENET_CASES if model == "lenet" else name in LENET_ONLY
            if skip or args.only not in name:
                continue
            label = f"{model:<8} {name}"
            ref, ref_w, clipped = torch_run(copy.deepcopy(module), case, images, labels, torch.float32)
            f64, f64_w, _ = torch_run(copy.deepcopy(module), case, images, labels, torch.float64)
            try:
                ours, ours_w = our_run(args, path, model + "-" + name.replace(" ", "-").replace("+", "-"), options, lr)
            except RuntimeError as e:
                check(label, False, "onnx-train failed: " + str(e))
                continue
            if len(ours) != EPOCHS * S:
                check(label, False, f"{len(ours)} step losses, not {EPOCHS * S}")
                continue
            loss64 = [abs(a - b) / abs(b) for a, b in zip(ours, f64)]
            torch_loss = max(abs(a - b) / abs(b) for a, b in zip(ref, f64))
            missing = [n for n in f64_w if n not in ours_w]
            w_ours = max((rel(ours_w[n], f64_w[n]) for n in f64_w if n in ours_w), default=0.0)
            w_torch = max(rel(ref_w[n], f64_w[n]) for n in f64_w)
            lb, wb = max(tol, 3 * torch_loss), max(tol, 3 * w_torch)
            ok = max(loss64) <= lb and w_ours <= wb and not missing
            check(label, ok, f"loss {f64[0]:.4f} -> {f64[-1]:.4f}; losses vs float64 max rel {max(loss64):.1e} "
                  f"(step {int(np.argmax(loss64))}, bound {lb:.1e}); weights {w_ours:.1e} (bound {wb:.1e})"
                  + (f"; no trained weights for {missing}" if missing else ""))
            if not ok:
                for i, (a, b, c) in enumerate(zip(ours, ref, f64)):
                    print(f"    step {i}: ours {a:.6f} torch float32 {b:.6f} float64 {c:.6f}")
            if clip:
                check(f"{model:<8} {name}: some steps clipped, some not", 0 < clipped < EPOCHS * S,
                      f"{clipped} of {EPOCHS * S} steps clipped")
            if name.startswith("groups"):
                # The groups must matter: every parameter at the plain decay ends elsewhere.
                plain_case = (name, [], PLAIN[name], None, None, 0, lr)
                _, plain_w, _ = torch_run(copy.deepcopy(module), plain_case, images, labels, torch.float64)
                # Each tensor the groups change is nearer PyTorch's groups run than its plain run.
                far = [n for n in f64_w if rel(ours_w[n], f64_w[n]) >= rel(ours_w[n], plain_w[n])]
                changed = sum(rel(plain_w[n], f64_w[n]) > 0 for n in f64_w)
                check(f"{model:<8} {name}: differs from one decay for all", not far and changed > 0,
                      f"{changed} tensors changed by the groups; nearer the plain run: {far}")
    print(f"torch_recipe_parity: {check.passed} passed, {check.failed} failed in {time.time() - start:.1f} s")
    return 0 if check.failed == 0 and check.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
