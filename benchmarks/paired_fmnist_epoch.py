#!/usr/bin/env python3
"""Paired form of the trainer issue's ResNet34 accuracy check: PyTorch builds the recipe's
ResNet34 (1x28x28 input, initialised as the recipe does: torch_fmnist_epoch.py's
recipe_resnet34) from a seed and exports it (training mode), then PyTorch and
`onnx-train` train that same model for one epoch of Fashion-MNIST in the same order
(shuffling off), with the recipe's settings (SGD lr 0.1, momentum 0.9, batch 128, the last
batch of 96 kept), 1 thread each, side by side. Prints one JSON line per seed with both
test accuracies and both mean training losses (over the whole epoch and its last 100
steps), and writes the per-step losses to WORKDIR/pair-SEED.json.

Same weights and same batches remove the initialisation and ordering differences of
bench-accuracy.sh; the runs still part after a few steps (lr 0.1 without warm-up makes the
loss spike to 5-10, and float32 rounding differs), so one pair is one sample: average.

    /usr/bin/python3 benchmarks/paired_fmnist_epoch.py --onnx-train build/tools/onnx-train \
        --workdir build/bench-paired --seeds 0 1 2
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "common"))  # torch_models, ot_cli
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch_fmnist_epoch import load, recipe_resnet34, test_accuracy  # noqa: E402
from torch_models import export, torch_losses  # noqa: E402

BATCH, LR, MOMENTUM = 128, 0.1, 0.9


def pair(args, seed, train, test):
    xs, ys = (t.numpy() for t in train)  # torch_losses slices numpy arrays
    xt, yt = test
    steps = (len(xs) + BATCH - 1) // BATCH
    torch.manual_seed(seed)
    model = recipe_resnet34()
    onnx = os.path.join(args.workdir, f"resnet34-{seed}.onnx")
    export(model, (1, 28, 28), onnx, training=True)
    metrics = os.path.join(args.workdir, f"ours-{seed}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    ours = subprocess.Popen(
        [args.onnx_train, onnx, "--data", "fashion-mnist", "--no-shuffle", "--epochs", "1", "--batch", str(BATCH),
         "--lr", str(LR), "--momentum", str(MOMENTUM), "--threads", "1", "--no-checkpoints", "--metrics", metrics,
         "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    torch_loss = torch_losses(model, xs, ys, BATCH, steps, LR, MOMENTUM)
    accuracy = test_accuracy(model, xt, yt)
    out = ours.communicate()[0]
    found = re.search(r"test accuracy ([0-9.]+)%", out)
    if ours.returncode != 0 or not found:
        raise SystemExit(f"onnx-train failed on seed {seed} (exit {ours.returncode}): {out.strip()[-400:]}")
    with open(metrics) as f:
        our_loss = [json.loads(line)["loss"] for line in f if '"type":"step"' in line.replace(" ", "")]
    with open(os.path.join(args.workdir, f"pair-{seed}.json"), "w") as f:
        json.dump({"torch_loss": torch_loss, "ours_loss": our_loss}, f)
    return {"seed": seed, "torch_acc": accuracy, "ours_acc": float(found.group(1)) / 100,
            "torch_mean_loss": float(np.mean(torch_loss)), "ours_mean_loss": float(np.mean(our_loss)),
            "torch_last100_loss": float(np.mean(torch_loss[-100:])), "ours_last100_loss": float(np.mean(our_loss[-100:]))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx-train", default="build/tools/onnx-train")
    ap.add_argument("--workdir", default="build/bench-paired")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.workdir, exist_ok=True)
    train, test = load("train"), load("test")
    rows = []
    for seed in args.seeds:
        rows.append(pair(args, seed, train, test))
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) > 1:
        diff = [r["ours_acc"] - r["torch_acc"] for r in rows]
        print(json.dumps({"mean_torch_acc": float(np.mean([r["torch_acc"] for r in rows])),
                          "mean_ours_acc": float(np.mean([r["ours_acc"] for r in rows])),
                          "mean_diff_points": 100 * float(np.mean(diff))}), flush=True)


if __name__ == "__main__":
    main()
