#!/usr/bin/env python3
"""PyTorch reference for the ResNet34 accuracy check of the trainer issue: the recipe's
ResNet34 (3x3 stride-2 stem, no max-pool) with a 1x28x28 input trained for N epochs on
Fashion-MNIST with the recipe's settings (SGD lr 0.1, momentum 0.9, batch 128, shuffled),
then its test accuracy. Prints one JSON object.

    python3 torch_fmnist_epoch.py [--epochs 1] [--threads 2] [--seed 0]"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet34

FASHION = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(FASHION, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32)
    x = ((x / 255.0 - 0.2860) / 0.3530)[:, None, :, :].astype(np.float32)
    y = read_idx(os.path.join(FASHION, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def recipe_resnet34():
    """The recipe's model as the recipe builds it: torchvision's ResNet34, its stem replaced
    after construction (so the stem keeps nn.Conv2d's default initialisation), no max-pool."""
    m = resnet34(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=2, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def test_accuracy(m, xt, yt):
    m.eval()
    with torch.no_grad():
        return sum(int((m(xt[i:i + 500]).argmax(1) == yt[i:i + 500]).sum()) for i in range(0, len(xt), 500)) / len(xt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    m = recipe_resnet34()
    xs, ys = load("train")
    xt, yt = load("test")
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    start = time.time()
    for epoch in range(args.epochs):
        m.train()
        perm = torch.randperm(len(xs))
        for i in range(0, len(xs), 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            F.cross_entropy(m(xs[idx]), ys[idx]).backward()
            opt.step()
    train_s = time.time() - start
    accuracy = test_accuracy(m, xt, yt)
    print(json.dumps({"framework": "pytorch-" + torch.__version__, "epochs": args.epochs,
                      "test_accuracy": accuracy, "train_seconds": round(train_s, 1),
                      "s_per_step": round(train_s / (args.epochs * ((len(xs) + 127) // 128)), 3)}), flush=True)


if __name__ == "__main__":
    main()
