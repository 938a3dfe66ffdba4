#!/usr/bin/env python3
"""PyTorch's own training-step rate on this machine's GPU for the reference ResNet34 (the
CIFAR-10 recipe's: 3x3 stride-2 stem without max-pool, BasicBlocks [3, 4, 6, 3], 10
classes, as `onnx-train make-model resnet34` writes it), SGD momentum 0.9, batch 128, in
plain fp32 and with TF32 tensor cores. scripts/gpu-check.sh prints it beside onnx-train's.

    python3 torch_cuda_step.py [--batch 128] [--steps 30] [--warmup 10] [--modes fp32,tf32]

Prints one JSON object per mode: img_per_s, step_ms and MFU (model FLOPs: about 1.74 GFLOP
per trained 32x32 image, over the peak given by --peak-fp32 / --peak-tf32 in TFLOP/s,
H100/H200 SXM dense datasheet figures by default). Needs no torchvision. Without a CUDA
device it prints one {"skipped": reason} line and exits 0."""
import argparse
import json
import time

import torch
import torch.nn as nn

FLOP_PER_TRAINED_IMAGE = 1.74e9  # DESIGN.md: 0.29 GMAC forward, x3 for the step, x2 FLOP/MAC


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class ResNet34(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        layers, cin = [], 64
        for cout, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, stride if b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def step_rate(batch, steps, warmup, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = ResNet34().to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # onnx-train reads the loss on the host every step too
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--modes", default="fp32,tf32")
    ap.add_argument("--peak-fp32", type=float, default=67.0, help="TFLOP/s")
    ap.add_argument("--peak-tf32", type=float, default=494.7, help="TFLOP/s (dense)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "PyTorch sees no CUDA device"}), flush=True)
        return
    for mode in args.modes.split(","):
        t = step_rate(args.batch, args.steps, args.warmup, mode == "tf32")
        img_s = args.batch / t
        peak = (args.peak_tf32 if mode == "tf32" else args.peak_fp32) * 1e12
        print(json.dumps({"framework": "pytorch-" + torch.__version__, "gpu": torch.cuda.get_device_name(),
                          "model": "resnet34", "mode": mode, "batch": args.batch, "step_ms": round(1000 * t, 3),
                          "img_per_s": round(img_s, 1), "mfu": round(img_s * FLOP_PER_TRAINED_IMAGE / peak, 4)}),
              flush=True)


if __name__ == "__main__":
    main()
