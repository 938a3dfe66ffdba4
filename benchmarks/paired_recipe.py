#!/usr/bin/env python3
"""Paired acceptance run of the modern-recipe issue: PyTorch builds a model from a seed and
exports it (training mode); then PyTorch and `onnx-train` train that same model on
Fashion-MNIST in the same batch order (no shuffling, the last short batch kept) with
torchvision's reference recipe flags, side by side, 1 thread each:

    AdamW lr 1e-3, weight decay 0.05 (0 on normalisation layers), 1 epoch of linear warmup
    (from 0.01 x lr) then cosine, both evaluated at every step, label smoothing 0.1,
    clip-grad-norm 1.0, EMA of the weights (torchvision's ExponentialMovingAverage:
    every 32 steps, decay 0.99998 adjusted by world x batch x steps / epochs, reset during
    warmup), batch 128, 3 epochs.

Models: resnet18 (torchvision's, the recipe's stem: 3x3 stride-2 convolution of the 1x28x28
image, no max-pool) on Fashion-MNIST at 28x28; vit (torchvision's VisionTransformer, patch 4,
width 192, 6 layers, 3 heads, MLP 768, 1 input channel) on Fashion-MNIST resized to 32x32
(bilinear). The images are normalised here (Fashion-MNIST's mean and std) and handed to our
side as an .npz of those floats, so both train on the same numbers.

Prints one JSON line per model and seed: both test accuracies of the model and of its EMA,
and both mean training losses (whole run, last 100 steps).

    /usr/bin/python3 benchmarks/paired_recipe.py --onnx-train build/tools/onnx-train \
        --workdir build/bench-recipe --models resnet18 [--seeds 0] [--train-count N]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "common"))  # torch_models, ot_cli
sys.path.insert(0, HERE)
from blas_threads import hold_blas_threads  # noqa: E402

hold_blas_threads(default=1)  # before torch loads OpenBLAS
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402
from torch_fmnist_epoch import load, test_accuracy  # noqa: E402
from torch_models import export  # noqa: E402

BATCH, EPOCHS, LR, WD = 128, 3, 1e-3, 0.05
WARMUP_EPOCHS, WARMUP_DECAY = 1, 0.01
SMOOTHING, CLIP = 0.1, 1.0
EMA_STEPS, EMA_DECAY = 32, 0.99998
NORMS = (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)


def make_model(name):
    if name == "resnet18":
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=2, padding=1, bias=False)
        m.maxpool = nn.Identity()
        return m, (1, 28, 28)
    if name == "vit":
        m = torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                 hidden_dim=192, mlp_dim=768, num_classes=10, dropout=0.0,
                                                 attention_dropout=0.0)
        conv = m.conv_proj
        m.conv_proj = nn.Conv2d(1, conv.out_channels, kernel_size=conv.kernel_size, stride=conv.stride)
        # torchvision's own initialisation of conv_proj (lecun normal), on the 1-channel stem
        fan_in = m.conv_proj.in_channels * m.conv_proj.kernel_size[0] * m.conv_proj.kernel_size[1]
        nn.init.trunc_normal_(m.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(m.conv_proj.bias)
        return m, (1, 32, 32)
    raise SystemExit(f"unknown model {name}")


def param_groups(module):
    """torchvision's set_weight_decay with norm_weight_decay=0: normalisation layers' own
    parameters without decay, everything else with WD."""
    norm, other = [], []
    for m in module.modules():
        for _, p in m.named_parameters(recurse=False):
            (norm if isinstance(m, NORMS) else other).append(p)
    return [{"params": other, "weight_decay": WD}, {"params": norm, "weight_decay": 0.0}]


def torch_run(module, xs, ys):
    steps = (len(xs) + BATCH - 1) // BATCH
    opt = torch.optim.AdamW(param_groups(module), lr=LR)
    lrs = torch.optim.lr_scheduler
    sched = lrs.SequentialLR(opt, [lrs.LinearLR(opt, start_factor=WARMUP_DECAY, total_iters=WARMUP_EPOCHS * steps),
                                   lrs.CosineAnnealingLR(opt, T_max=(EPOCHS - WARMUP_EPOCHS) * steps)],
                             milestones=[WARMUP_EPOCHS * steps])
    decay = 1.0 - min(1.0, (1.0 - EMA_DECAY) * 1 * BATCH * EMA_STEPS / EPOCHS)
    ema = torch.optim.swa_utils.AveragedModel(module, avg_fn=lambda avg, p, n: decay * avg + (1.0 - decay) * p,
                                              use_buffers=True)
    losses = []
    for epoch in range(EPOCHS):
        module.train()
        for i in range(steps):
            x, y = xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH]
            opt.zero_grad()
            loss = F.cross_entropy(module(x), y, label_smoothing=SMOOTHING)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
            opt.step()
            sched.step()
            losses.append(float(loss))
            if i % EMA_STEPS == 0:
                ema.update_parameters(module)
                if epoch < WARMUP_EPOCHS:
                    ema.n_averaged.fill_(0)
    return losses, ema.module


def data_for(name, workdir, train, test):
    """The arrays both sides train on, and the .npz of them that our side reads (the
    normalised floats themselves, so both see the same numbers)."""
    (xs, ys), (xt, yt) = train, test
    if name == "vit":
        xs = F.interpolate(xs, size=(32, 32), mode="bilinear", align_corners=False).contiguous()
        xt = F.interpolate(xt, size=(32, 32), mode="bilinear", align_corners=False).contiguous()
    path = os.path.join(workdir, f"fmnist-{xs.shape[-1]}-{len(xs)}.npz")
    if not os.path.exists(path):
        np.savez(path, x=xs.numpy(), y=ys.numpy(), x_test=xt.numpy(), y_test=yt.numpy())
    return xs, ys, xt, yt, path


def pair(args, name, seed, train, test):
    xs, ys, xt, yt, npz = data_for(name, args.workdir, train, test)
    torch.manual_seed(seed)
    model, shape = make_model(name)
    onnx = os.path.join(args.workdir, f"{name}-{seed}.onnx")
    export(model, shape, onnx, training=True)
    metrics = os.path.join(args.workdir, f"ours-{name}-{seed}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, onnx, "--data", "npz:" + npz,
        "--no-shuffle", "--epochs", str(EPOCHS), "--batch", str(BATCH), "--opt", "adamw", "--lr", str(LR),
        "--wd", str(WD), "--norm-weight-decay", "0", "--lr-warmup-epochs", str(WARMUP_EPOCHS),
        "--lr-warmup-method", "linear", "--lr-warmup-decay", str(WARMUP_DECAY), "--lr-scheduler", "cosineannealinglr",
        "--lr-per-step", "--label-smoothing", str(SMOOTHING), "--clip-grad-norm", str(CLIP), "--model-ema",
        "--model-ema-steps", str(EMA_STEPS), "--model-ema-decay", str(EMA_DECAY), "--threads", str(args.threads),
        "--no-checkpoints", "--metrics", metrics, "--quiet"]
    start = time.time()
    ours = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    torch_loss, torch_ema = torch_run(model, xs, ys)
    torch_s = time.time() - start
    torch_acc, torch_ema_acc = test_accuracy(model, xt, yt), test_accuracy(torch_ema, xt, yt)
    out = ours.communicate()[0]
    ours_s = time.time() - start
    found = re.findall(r"test accuracy ([0-9.]+)% \(model\), ([0-9.]+)% \(EMA", out)
    if ours.returncode != 0 or not found:
        raise SystemExit(f"onnx-train failed on {name} seed {seed} (exit {ours.returncode}): {out.strip()[-600:]}\n"
                         f"command: {' '.join(cmd)}")
    with open(metrics) as f:
        our_loss = [json.loads(line)["loss"] for line in f if '"type":"step"' in line.replace(" ", "")]
    with open(os.path.join(args.workdir, f"pair-{name}-{seed}.json"), "w") as f:
        json.dump({"torch_loss": torch_loss, "ours_loss": our_loss}, f)
    ours_acc, ours_ema_acc = (float(v) / 100 for v in found[-1])
    return {"model": name, "seed": seed, "train_images": len(xs), "test_images": len(xt),
            "torch_acc": torch_acc, "ours_acc": ours_acc, "diff_points": round(100 * (ours_acc - torch_acc), 2),
            "torch_ema_acc": torch_ema_acc, "ours_ema_acc": ours_ema_acc,
            "ema_diff_points": round(100 * (ours_ema_acc - torch_ema_acc), 2),
            "torch_mean_loss": float(np.mean(torch_loss)), "ours_mean_loss": float(np.mean(our_loss)),
            "torch_last100_loss": float(np.mean(torch_loss[-100:])), "ours_last100_loss": float(np.mean(our_loss[-100:])),
            "torch_s": round(torch_s, 1), "ours_s": round(ours_s, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx-train", default="build/tools/onnx-train")
    ap.add_argument("--workdir", default="build/bench-recipe")
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--threads", type=int, default=1, help="each side's threads")
    ap.add_argument("--train-count", type=int, default=0,
                    help="train on the first N images only (quick looks; not the acceptance run)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.workdir, exist_ok=True)
    train, test = load("train"), load("test")
    if args.train_count:
        train = tuple(t[:args.train_count] for t in train)
    for name in args.models.split(","):
        for seed in args.seeds:
            print(json.dumps(pair(args, name, seed, train, test)), flush=True)


if __name__ == "__main__":
    main()
